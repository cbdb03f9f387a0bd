#!/usr/bin/env bash
# Job arrays without a scheduler (ctest: sweep_array): the tiny grid's runs, each run alone as an
# array task would (`moerl sweep GRID --task K`, all four at once, sharing one fresh base-policy
# cache), give the same files as one plain `moerl sweep`; the tasks write no index, and
# `moerl inspect` assembles it; each base policy is trained once although two tasks need it at
# the same moment; --list, --task-from-env, --index-only and the refusals say what they should.
# Usage: tests/sweep_array.sh MOERL_BINARY
set -uo pipefail
moerl=$1
here=$(cd "$(dirname "$0")" && pwd)
grid=$here/sweep/tiny-grid.ini
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "sweep_array: FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "== $f"; tail -n 20 "$f"; done >&2; exit 1; }
# the index columns that must not depend on how the runs were run: id, file, status, steps, collapse, reward, eval
cols() { tail -n +2 "$1/index.csv" | cut -d, -f2-8; }
set_=(--set rl.steps=3)

# --list: the count, then index, id, variant, values, seed (tab-separated)
"$moerl" sweep "$grid" --list > "$tmp/list.log" 2>&1 || fail "--list"
[[ $(head -1 "$tmp/list.log") == "4 runs (index, id, variant, values, seed)" ]] || fail "--list: count line: $(head -1 "$tmp/list.log")"
[[ $(sed -n 5p "$tmp/list.log") == $'3\tr3-seed1\t-\trl.algorithm=r3\t1' ]] || fail "--list: line of run 3: $(sed -n 5p "$tmp/list.log" | cat -A)"

# the reference: one plain sweep
"$moerl" sweep "$grid" --out "$tmp/ref" "${set_[@]}" --quiet > "$tmp/ref.log" 2>&1 || fail "plain sweep"

# four tasks at once on one empty cache: seeds 0 and 1 each have one base, wanted by two tasks
pids=()
for k in 0 1 2 3; do
  # a checkpoint after every step (--checkpoint-interval): checkpoints do not change the numbers
  "$moerl" sweep "$grid" --out "$tmp/arr" --cache "$tmp/cache" --task "$k" --checkpoint-interval 1e-9 "${set_[@]}" \
    > "$tmp/task$k.log" 2>&1 &
  pids+=($!)
done
for k in 0 1 2 3; do wait "${pids[k]}" || fail "task $k exited $?"; done
trained=$(cat "$tmp"/task?.log | grep -c '^base policy: .*\.h5$')
cached=$(cat "$tmp"/task?.log | grep -c '^base policy: .*(cached)$')
[[ $trained == 2 && $cached == 2 ]] || fail "4 tasks on 2 bases: trained $trained, read from the cache $cached (expected 2 and 2)"
[[ $(ls "$tmp/cache" | grep -c '^base-.*\.h5$') == 2 ]] || fail "cache: $(ls "$tmp/cache")"
[[ -e $tmp/arr/index.csv ]] && fail "the tasks wrote an index"
[[ -f $tmp/arr/plan.csv ]] || fail "the tasks wrote no plan.csv"
ls "$tmp/arr" "$tmp/cache" | grep -q 'tmp-\|\.lock$' && fail "temporaries or locks left: $(ls "$tmp/arr" "$tmp/cache")"

# inspect assembles the index; the runs are the plain sweep's, bit for bit
"$moerl" inspect "$tmp/arr" > "$tmp/inspect.log" 2>&1 || fail "inspect of the array's directory"
grep -q "4 runs: 4 complete" "$tmp/inspect.log" || fail "inspect: not 4 complete runs"
diff <(cols "$tmp/ref") <(cols "$tmp/arr") > "$tmp/diff.log" || fail "assembled index differs from the plain sweep's"
"$py" "$here/sweep/same_runs.py" "$tmp/ref" "$tmp/arr" > "$tmp/same.log" 2>&1 || fail "$(cat "$tmp/same.log")"

# a task of a finished run does nothing; --task-from-env reads SLURM_ARRAY_TASK_ID
SLURM_ARRAY_TASK_ID=2 "$moerl" sweep "$grid" --out "$tmp/arr" --cache "$tmp/cache" --task-from-env "${set_[@]}" \
  > "$tmp/again.log" 2>&1 || fail "task 2 again"
grep -q "task 2 of 4: grpo-seed1.*complete before: nothing to do" "$tmp/again.log" || fail "task 2 again: $(cat "$tmp/again.log")"

# --index-only: a run whose file is gone is pending again; a task's failure note makes it failed
mv "$tmp/arr/r3-seed1.h5" "$tmp/r3-seed1.h5"
"$moerl" sweep "$grid" --out "$tmp/arr" --index-only "${set_[@]}" > "$tmp/index-only.log" 2>&1 || fail "--index-only"
grep -q "4 runs: 3 complete, 1 pending" "$tmp/index-only.log" || fail "--index-only: $(tail -n 2 "$tmp/index-only.log")"
mv "$tmp/r3-seed1.h5" "$tmp/arr/r3-seed1.h5"

# refusals: each names the option, the value and what is allowed; nothing is run
expect() {  # expect STATUS TEXT CMD...
  local want=$1 text=$2 rc=0
  shift 2
  "$@" > "$tmp/refused.log" 2>&1 || rc=$?
  [[ $rc == "$want" ]] || fail "$* exited $rc, expected $want"
  grep -qF -- "$text" "$tmp/refused.log" || fail "$*: no message '$text': $(cat "$tmp/refused.log")"
}
expect 2 "--task 4: the grid has 4 runs (tasks 0 to 3" "$moerl" sweep "$grid" --out "$tmp/x" --task 4
expect 2 "SLURM_ARRAY_TASK_ID is not set" env -u SLURM_ARRAY_TASK_ID "$moerl" sweep "$grid" --out "$tmp/x" --task-from-env
expect 2 "SLURM_ARRAY_TASK_ID = 'x1': must be a run index" env SLURM_ARRAY_TASK_ID=x1 "$moerl" sweep "$grid" --out "$tmp/x" --task-from-env
expect 1 "holds the sweep of another grid" "$moerl" sweep "$grid" --out "$tmp/arr" --task 0 --seeds 5,6
expect 2 "--resume with --task" "$moerl" sweep "$grid" --out "$tmp/arr" --task 0 --resume

# several sweep directories in one report (the array's and the plain sweep's): they hold the same
# runs (the same scenarios and seeds, bit for bit), so each run is counted once, the copies listed
# as duplicates
if "$py" -c 'import numpy, scipy, h5py, matplotlib' 2>/dev/null; then
  MOERL_PYTHON=$py "$moerl" report "$tmp/arr" "$tmp/ref" --out "$tmp/report" --quiet > "$tmp/report.log" 2>&1 ||
    fail "moerl report DIR1 DIR2"
  runs=$("$py" -c 'import csv, sys; print(sum(int(r["runs"]) for r in csv.DictReader(open(sys.argv[1]))))' \
         "$tmp/report/summary.csv") || fail "report: summary.csv unreadable"
  [[ $runs == 4 ]] || fail "report of two directories of the same 4 runs covers $runs runs: $(cat "$tmp/report/summary.csv")"
  [[ $(grep -c "the same run as" "$tmp/report/summary.md") == 4 ]] ||
    fail "report: summary.md does not list the 4 duplicates: $(cat "$tmp/report/summary.md")"
  echo "sweep_array: report of two directories: ok"
else
  echo "sweep_array: report of two directories not checked: no $py with numpy, scipy, h5py and matplotlib"
fi
echo "sweep_array: ok (4 tasks = 1 sweep, bit for bit; 2 bases trained once each under 4 concurrent tasks)"
