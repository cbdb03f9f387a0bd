#!/usr/bin/env bash
# Runs docs/tutorials/08-your-algorithm.md as written, shortened (ctest: tutorial_algorithm), so
# the page cannot rot:
# 1. its C++ block (the one with MOERL_REGISTER_ALGORITHM(<name>, the page's sim/rl/<name>.cpp)
#    is compiled with the build's own flags for the algorithm files and linked into a scratch
#    moerl with the build's link line — the build's objects and libraries, plus this one file; the
#    tree and the build are not touched, and no binary of the build registers the page's
#    algorithm. (A scratch copy of the project would take ~20 min to build; this takes seconds.
#    The page's `cmake --build build` step — a new file in sim/rl/ is picked up — is ctest
#    algorithm_files'.)
# 2. its `build/sim/moerl run` lines run with that binary and `--set rl.steps=2 --set sft.steps=5`;
#    `--set rl.capped_reinforce_cap=0`-style refusals of the row are checked;
# 3. its `scripts/league.sh` line runs against a small kept league the test makes (the league
#    grid's base, 2 RL steps and 5 SFT steps, control and grpo-real on seed 700): the guard must
#    pass and the table must hold the page's variant with its paired differences; then against a
#    kept row with one number altered: refused, naming the number kept and now;
# 4. scripts/league.sh's refusals of bad input (no run needed).
# Usage: tests/tutorial_algorithm.sh MOERL_BINARY   (the build's sim/moerl; its build directory's
# CMakeFiles give the flags and link line). Exit 77 (skipped) when the build is not a Makefiles
# build (no flags.make / link.txt) or python3 with h5py and numpy is missing.
set -euo pipefail
moerl=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
page=$root/docs/tutorials/08-your-algorithm.md
simdir=$(dirname "$moerl")
flags=$simdir/CMakeFiles/moerl_algorithms.dir/flags.make
link=$simdir/CMakeFiles/moerl.dir/link.txt
fail() { echo "tutorial_algorithm: FAIL: $*"; exit 1; }
[[ -f $flags && -f $link ]] || { echo "tutorial_algorithm: skipped: no $flags or $link (a Makefiles build)"; exit 77; }
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || { echo "tutorial_algorithm: skipped: no python3 with h5py, numpy"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# 1. The page's file, compiled and linked into a scratch moerl.
awk '/^```cpp/{on=1; next} /^```/{on=0} on' "$page" > "$tmp/block.cpp"
name=$(sed -n 's/^MOERL_REGISTER_ALGORITHM(\([a-z0-9_]*\),.*/\1/p' "$tmp/block.cpp")
[[ -n $name ]] || fail "$page: no \`\`\`cpp block with a MOERL_REGISTER_ALGORITHM( line"
grep -q "sim/rl/$name.cpp" "$page" || fail "$page: the block registers $name, but the page never names sim/rl/$name.cpp"
cp "$tmp/block.cpp" "$tmp/$name.cpp"
eval "$(sed -n 's/^\(CXX_DEFINES\|CXX_INCLUDES\|CXX_FLAGS\) = \(.*\)$/\1="\2"/p' "$flags")"
cxx=$(sed -n 's/^# compile CXX with //p' "$flags")
# shellcheck disable=SC2086
(cd "$tmp" && ${cxx:-c++} $CXX_DEFINES $CXX_INCLUDES $CXX_FLAGS -c "$name.cpp" -o "$name.o") ||
  fail "the page's sim/rl/$name.cpp does not compile"
line=$(cat "$link")
[[ $line == *" -o moerl "* ]] || fail "$link: no ' -o moerl ' in the link line"
(cd "$simdir" && bash -c "${line/ -o moerl / $tmp/$name.o -o $tmp/moerl }") || fail "the page's $name does not link"
echo "tutorial_algorithm: built a moerl with the page's $name ($((SECONDS - start)) s)"
"$tmp/moerl" run --help | grep -q "$name" || fail "moerl run --help does not name $name"

# 2. The page's commands, shortened, in a scratch directory with the tree's scenarios/.
ln -s "$root/scenarios" "$tmp/scenarios"
short="--set rl.steps=2 --set sft.steps=5"
cmds=$(awk '/^```sh/{on=1; next} /^```/{on=0} on && (/^build\/sim\/moerl / || /^scripts\/league.sh / || /^cmake /)' "$page")
grep -q '^scripts/league.sh ' <<< "$cmds" || fail "$page: no scripts/league.sh command"
grep -q '^build/sim/moerl run ' <<< "$cmds" || fail "$page: no build/sim/moerl run command"
# The small kept league: the league grid's base, shortened, control and grpo-real on seed 700.
cat > "$tmp/league-small.ini" <<EOF
[sweep]
base = $root/scenarios/paper/learn.ini
seeds = 700
variants = control, grpo-real
[rl]
steps = 2
[sft]
steps = 5
[variant.control]
engines.rollout = bf16-train
EOF
(cd "$tmp" && "$moerl" sweep league-small.ini --out kept-runs --quiet > kept.log 2>&1) || { cat "$tmp/kept.log"; fail "the small kept league"; }
export PYTHONPATH=$root
(cd "$tmp" && /usr/bin/python3 -m analysis.league kept-runs --out kept --pair grpo-real:control > kept-league.log 2>&1) ||
  { cat "$tmp/kept-league.log"; fail "the small kept league's table"; }
variant=""
while IFS= read -r cmd; do
  echo "tutorial_algorithm: $cmd"
  case "$cmd" in
    cmake\ *) continue ;;  # step 1 above compiled the page's file
    build/sim/moerl\ *)
      (cd "$tmp" && bash -c "'$tmp/moerl' ${cmd#build/sim/moerl } $short" > run.log 2>&1) ||
        { cat "$tmp/run.log"; fail "$cmd"; } ;;
    scripts/league.sh\ *)
      variant=$(sed -n 's/.*--variant \([^ ]*\).*/\1/p' <<< "$cmd")
      (cd "$tmp" && MOERL=$tmp/moerl bash -c "'$root/scripts/league.sh' ${cmd#scripts/league.sh } \
          --grid league-small.ini --kept kept/league-runs.csv --seeds 700 --work league-work" > league.log 2>&1) ||
        { cat "$tmp/league.log"; fail "$cmd"; }
      cat "$tmp/league.log"
      grep -q "guard passed" "$tmp/league.log" || fail "$cmd: no 'guard passed' line"
      grep -q "^| [0-9–]* | $variant | 1 |" "$tmp/league-work/league.md" || fail "$cmd: no row of $variant in league.md"
      for other in control grpo-real; do
        grep -q "^| $variant − $other | 1 |" "$tmp/league-work/league.md" || fail "$cmd: no pair $variant − $other"
      done
      # the kept league's own pairs (its pairs.csv) are kept in the joined table
      grep -q "^| grpo-real − control | 1 |" "$tmp/league-work/league.md" || fail "$cmd: the kept pair grpo-real − control was lost" ;;
  esac
done <<< "$cmds"
[[ -n $variant ]] || fail "no --variant in the page's league command"
# The row's param is validated with the range (the page says so).
if "$tmp/moerl" run "$root/scenarios/paper/learn.ini" --set "rl.algorithm=$name" --set "rl.${name}_cap=0" $short \
     --out "$tmp/bad.h5" > "$tmp/bad.log" 2>&1; then fail "rl.${name}_cap=0 was not refused"; fi
grep -q "rl.${name}_cap" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "the refusal of rl.${name}_cap=0 does not name the key"; }

# 3. The guard against an altered kept row: refused, naming the number (kept, now). The guard's run
# is this binary's (kept beside it by sha256), so only the comparison runs again.
awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "load_cv_first10") c = i }
                  $1 == "control" && $2 == "700" { $c = $c + 0.01 } { print }' "$tmp/kept/league-runs.csv" > "$tmp/altered.csv"
cmp -s "$tmp/kept/league-runs.csv" "$tmp/altered.csv" && fail "could not alter the kept row"
if (cd "$tmp" && MOERL=$tmp/moerl "$root/scripts/league.sh" --variant "$variant" --set "rl.algorithm=$name" \
      --grid league-small.ini --kept altered.csv --seeds 700 --work league-work > altered.log 2>&1); then
  cat "$tmp/altered.log"; fail "an altered kept row was not refused"
fi
grep -q "reproducibility guard failed.*load_cv_first10: kept [0-9.]*, now [0-9.]*" "$tmp/altered.log" ||
  { cat "$tmp/altered.log"; fail "the guard's refusal does not name load_cv_first10 kept and now"; }
echo "tutorial_algorithm: $(grep -o 'load_cv_first10: kept [^;(]*' "$tmp/altered.log") — refused"

# 4. Bad input, refused before anything runs: the option, the value, what is allowed.
refused() {  # refused PATTERN ARGS...: scripts/league.sh ARGS must exit non-zero printing PATTERN
  local pattern=$1
  shift
  if (cd "$tmp" && MOERL=$tmp/moerl "$root/scripts/league.sh" "$@" --grid league-small.ini --kept kept/league-runs.csv \
        --work bad-work > refused.log 2>&1); then
    cat "$tmp/refused.log"; fail "scripts/league.sh $* was not refused"
  fi
  grep -q -- "$pattern" "$tmp/refused.log" || { cat "$tmp/refused.log"; fail "scripts/league.sh $*: no '$pattern'"; }
}
refused "unknown option '--seed'" --variant x --set rl.algorithm=gspo --seed 700
refused "--variant: required" --set rl.algorithm=gspo
refused "--variant grpo-real: the kept league" --variant grpo-real --set rl.algorithm=gspo
refused "--variant control: the reference" --variant control --set rl.algorithm=gspo
refused "--variant 'a b': not a variant name" --variant "a b" --set rl.algorithm=gspo
refused "--seeds 720: seed 720 is not in the kept league (allowed: its seeds, 700)" --variant x --set rl.algorithm=gspo --seeds 720
refused "--set rl.algorithm: expected section.key=value" --variant x --set rl.algorithm
refused "--set: none given" --variant x
refused "must be one of" --variant x --set rl.algorithm=no_such_loss
refused "--np 0: not a number" --variant x --set rl.algorithm=gspo --np 0
[[ ! -e $tmp/bad-work/runs && ! -e $tmp/bad-work/guard ]] || fail "a refused command ran something"
echo "tutorial_algorithm: ok ($((SECONDS - start)) s)"
