#!/usr/bin/env bash
# A newcomer's first hour (ctest: first_hour): scripts/quickstart.sh runs again without an error,
# skipping finished work and printing the comparison again, and takes the flags moerl suggests;
# the commands' usage errors speak the usage line's words (a missing positional, a grid given to
# run, a key in the wrong section, a missing file), carry the `moerl: error:` prefix (report
# too), --ranks-per-run is >= 1 everywhere, and run and sweep share one cache of base policies.
# Usage: tests/first_hour.sh MOERL_BINARY
set -euo pipefail
moerl=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "first_hour: FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "== $f"; cat "$f"; done >&2; exit 1; }
# expects exit status $1 and every later argument in the output of the command after "--"
expect() {
  local code=$1; shift
  local parts=()
  while [[ $1 != -- ]]; do parts+=("$1"); shift; done
  shift
  local rc=0
  "$@" > "$tmp/cmd.log" 2>&1 || rc=$?
  [[ $rc == "$code" ]] || fail "'$*' exited $rc, expected $code: $(cat "$tmp/cmd.log")"
  for p in "${parts[@]}"; do grep -qF -- "$p" "$tmp/cmd.log" || fail "'$*': no '$p' in: $(cat "$tmp/cmd.log")"; done
}

# --- the README's commands are the ones a newcomer follows here (the grid of the sweep and report,
# scenarios/teach/04-r3.ini, is tutorial 4's, run in teach_smoke) ---
for c in "scripts/quickstart.sh" "scripts/test.sh" "build/sim/moerl sweep scenarios/teach/04-r3.ini" \
         "build/sim/moerl report results/r3-vs-grpo"; do
  grep -qF -- "$c" "$root/README.md" || fail "README.md no longer shows '$c', which this test follows"
done

# --- the quickstart, twice, on a shortened job ---
short=(--no-build --out "$tmp/qs" --set sft.steps=3 --set rl.steps=2 --set rl.eval_prompts=16 --set audit.prompts=16)
MOERL=$moerl "$root/scripts/quickstart.sh" "${short[@]}" > "$tmp/qs1.log" 2>&1 || fail "quickstart, first time"
grep -q "^run .*algo .*replay" "$tmp/qs1.log" || fail "quickstart, first time: no comparison table"
sums=$(md5sum "$tmp"/qs/quickstart-*.h5)
MOERL=$moerl "$root/scripts/quickstart.sh" "${short[@]}" > "$tmp/qs2.log" 2>&1 || fail "quickstart, second time"
grep -q "^run .*algo .*replay" "$tmp/qs2.log" || fail "quickstart, second time: no comparison table"
[[ $(md5sum "$tmp"/qs/quickstart-*.h5) == "$sums" ]] || fail "quickstart, second time: finished runs were run again"
MOERL=$moerl "$root/scripts/quickstart.sh" "${short[@]}" --force > "$tmp/qs3.log" 2>&1 || fail "quickstart --force"
grep -q "^run .*algo .*replay" "$tmp/qs3.log" || fail "quickstart --force: no comparison table"
expect 2 "unknown option '--bogus'" "usage: scripts/quickstart.sh" -- "$root/scripts/quickstart.sh" --bogus

# --- usage errors in the usage's words, with the prefix ---
cd "$tmp"
expect 2 "moerl: error: run: SCENARIO is missing (usage: moerl run SCENARIO" -- "$moerl" run
grep -q "is required" "$tmp/cmd.log" && fail "run: names the option behind the positional"
expect 2 "moerl: error: sweep: GRID.ini is missing (usage: moerl sweep GRID.ini" -- "$moerl" sweep
expect 2 "moerl: error: sft: SCENARIO is missing" -- "$moerl" sft --out x.h5
expect 2 "moerl: error: report: SWEEP_DIR | RUN.h5 is missing (usage: moerl report" -- "$moerl" report
expect 1 "moerl: error:" "this is a grid: use moerl sweep" -- "$moerl" run "$root/tests/sweep/tiny-grid.ini"
expect 1 "moerl: error:" "unknown key 'model.steps'" "did you mean rl.steps" -- \
  "$moerl" run "$root/scenarios/quickstart.ini" --set model.steps=20
expect 1 "moerl: error:" "nope.ini: no such file" -- "$moerl" run nope.ini
expect 2 "moerl: error: run: --ranks-per-run 0: must be >= 1" -- "$moerl" run "$root/scenarios/quickstart.ini" --ranks-per-run 0
expect 2 "unrecognised option '--scenario'" -- "$moerl" inspect x.h5 --scenario  # a switch no more: --show-scenario
if /usr/bin/python3 -c "import numpy, scipy, h5py, matplotlib" 2> /dev/null; then
  MOERL_PYTHON=/usr/bin/python3 "$moerl" report "$tmp/none" > "$tmp/report.log" 2>&1 && fail "report of a missing path succeeded"
  grep -i "error" "$tmp/report.log" | grep -qv "^moerl: error: " && fail "report: an error without the prefix: $(cat "$tmp/report.log")"
  grep -q "^moerl: error: report: " "$tmp/report.log" || fail "report: no prefixed error: $(cat "$tmp/report.log")"
fi

# --- one cache: a sweep's base policy serves a run started in the same directory ---
"$moerl" sweep "$root/tests/sweep/tiny-grid.ini" --out "$tmp/sw" --quiet > "$tmp/sweep.log" 2>&1 || fail "sweep"
sed '/^\[sweep\]/,$d' "$root/tests/sweep/tiny-grid.ini" > "$tmp/one.ini"
"$moerl" run "$tmp/one.ini" --out "$tmp/one.h5" > "$tmp/run.log" 2>&1 || fail "run"
grep -q "^base policy: results/cache/.*(cached)$" "$tmp/run.log" || fail "run trained the sweep's base policy again"
# --- inspect's correction column reads the run's file (icepop's row forces its band) ---
"$moerl" run "$tmp/one.ini" --set rl.algorithm=icepop --out "$tmp/ice.h5" > "$tmp/ice.log" 2>&1 || fail "icepop run"
"$moerl" inspect "$tmp/ice.h5" > "$tmp/inspect.log" 2>&1 || fail "inspect"
grep -Eq "ice\.h5 +icepop +[0-9]" "$tmp/inspect.log" || fail "inspect: no icepop correction: $(cat "$tmp/inspect.log")"
echo "first_hour: ok"
