#!/usr/bin/env bash
# Smoke test of the teaching path (ctest: teach_smoke): runs every command of the tutorials
# (docs/tutorials/*.md, the lines of their ```sh blocks that start with `build/sim/moerl` or
# `/usr/bin/python3 -m analysis`) in order, shortened, in a scratch directory that links the
# tree's scenarios/ and analysis/ (`mkdir -p` lines run too): `run` and `sweep` get
# `--set rl.steps=2 --set sft.steps=5`, `sft` gets `--set sft.steps=5`, `audit` gets
# `--set audit.prompts=8`, so every scenario, grid, profile and report command of the pages is
# exercised in seconds. After each page, its results are compared with the numbers kept beside
# its scenario (scenarios/teach/NN-*.expected.csv, tests/teach_expected.py: the tolerances are in
# the file). The Python commands and the comparison are skipped, with a message, only when python3
# with h5py and matplotlib is missing.
# A page with a line `<!-- teach_smoke: skip; WHY -->` is left out with WHY (page 8 builds an
# algorithm of its own; tests/tutorial_algorithm.sh runs it).
# Usage: tests/teach_smoke.sh MOERL_BINARY [--full DIR | --write-expected] [PAGE_NUMBER...]
#   --full DIR: the commands as written (not shortened), kept in DIR — how the pictures of the
#   pages were made (then copied to docs/tutorials/images/); compared with NN-*.expected-full.csv
#   where a page has one. --write-expected: rewrite the pages' NN-*.expected.csv from this run.
#   PAGE_NUMBERs pick pages (e.g. 3 6).
set -euo pipefail
moerl=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
shift
root=$(cd "$(dirname "$0")/.." && pwd)
full=0
write_expected=0
if [[ "${1:-}" == "--write-expected" ]]; then
  write_expected=1
  shift
fi
if [[ "${1:-}" == "--full" ]]; then
  full=1
  mkdir -p "$2"
  tmp=$(cd "$2" && pwd)
  shift 2
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
pages=("$@")
ln -sfn "$root/scenarios" "$tmp/scenarios"
ln -sfn "$root/analysis" "$tmp/analysis"
have_py=1
/usr/bin/python3 -c 'import h5py, numpy, matplotlib' 2>/dev/null || have_py=0
n=0
for page in "$root"/docs/tutorials/[0-9]*.md; do
  num=$(basename "$page" | sed 's/^0*\([0-9]*\).*/\1/')
  if [[ ${#pages[@]} -gt 0 && ! " ${pages[*]} " == *" $num "* ]]; then continue; fi
  # A page that builds an algorithm of its own is run by its own test (named in its marker line).
  if grep -q '^<!-- teach_smoke: skip' "$page"; then
    echo "teach_smoke: $(basename "$page"): $(sed -n 's/^<!-- teach_smoke: skip; \(.*\) -->$/\1/p' "$page")"
    continue
  fi
  cmds=$(awk '/^```sh/{on=1; next} /^```/{on=0} on && (/^build\/sim\/moerl / || /^\/usr\/bin\/python3 -m analysis/ || /^mkdir -p /)' "$page")
  [[ -n "$cmds" ]] || { echo "teach_smoke: FAIL: $page has no commands"; exit 1; }
  while IFS= read -r line; do
    cmd=$line
    if [[ $line == build/sim/moerl* ]]; then
      rest=${line#build/sim/moerl }
      case "$rest" in
        run\ *|sweep\ *) extra="--set rl.steps=2 --set sft.steps=5" ;;
        sft\ *) extra="--set sft.steps=5" ;;
        audit\ *) extra="--set audit.prompts=8" ;;
        *) extra="" ;;
      esac
      [[ $full == 1 ]] && extra=""
      cmd="'$moerl' $rest $extra"
    elif [[ $have_py == 0 && $line == /usr/bin/python3* ]]; then
      echo "teach_smoke: skipping (no python3 with h5py, matplotlib): $line"
      continue
    fi
    echo "teach_smoke: $(basename "$page"): $line"
    start=$SECONDS
    if ! (cd "$tmp" && bash -c "$cmd" > "$tmp/last.log" 2>&1); then
      cat "$tmp/last.log"
      echo "teach_smoke: FAIL: $(basename "$page"): $line"
      exit 1
    fi
    [[ $full == 1 ]] && { cat "$tmp/last.log"; echo "teach_smoke: $((SECONDS - start)) s"; }
    n=$((n + 1))
  done <<< "$cmds"
  # The page's numbers against those kept beside its scenario.
  nn=$(basename "$page" | cut -c1-2)
  suffix=expected.csv
  [[ $full == 1 ]] && suffix=expected-full.csv
  expected=$(ls "$root"/scenarios/teach/"$nn"-*.ini 2>/dev/null | head -1 | sed "s/\.ini\$/.$suffix/")
  [[ -n "$expected" ]] || { echo "teach_smoke: FAIL: no scenario scenarios/teach/$nn-*.ini"; exit 1; }
  if [[ $have_py == 0 ]]; then
    echo "teach_smoke: skipping the comparison with $(basename "$expected") (no python3 with h5py)"
  elif [[ $write_expected == 1 ]]; then
    mapfile -t produced < <(cd "$tmp" && find results/teach -path "results/teach/$nn*" \
      \( -name '*.json' -o -name '*.h5' \) ! -name '*.ckpt.h5' ! -path '*/cache/*' ! -name 'base.h5' | sort)
    /usr/bin/python3 "$root/tests/teach_expected.py" write "$expected" "$tmp" "${produced[@]}"
  elif [[ -f "$expected" ]]; then
    /usr/bin/python3 "$root/tests/teach_expected.py" check "$expected" "$tmp" ||
      { echo "teach_smoke: FAIL: $(basename "$page"): numbers differ from $(basename "$expected")"; exit 1; }
  elif [[ $full == 0 ]]; then
    echo "teach_smoke: FAIL: $(basename "$page"): no expected numbers $(basename "$expected")"; exit 1
  else
    echo "teach_smoke: $(basename "$page"): no $(basename "$expected") to compare with"
  fi
done
echo "teach_smoke: ok ($n commands)"
