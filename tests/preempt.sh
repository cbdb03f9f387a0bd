#!/usr/bin/env bash
# Clean preemption (ctest: preempt; sim/process/preempt.h). A signal in the middle of a run or a sweep, on
# 1 and on 2 ranks, ends it at a step boundary with status 75 ("preempted"), every run written and
# resumable, none failed and no rank left hanging; --resume then gives files bit-identical to an
# uninterrupted run's. On 2 ranks the signal goes to one rank only (the others learn it at the
# next step boundary), to mpirun (which forwards SIGUSR1 to every rank), or to every rank, as
# SLURM sends it.
# Usage: tests/preempt.sh MOERL_BINARY     (MPIEXEC overrides the launcher, default mpirun)
set -uo pipefail
moerl=$1
mpiexec=${MPIEXEC:-mpirun}
here=$(cd "$(dirname "$0")" && pwd)
scen=$here/faults/tiny.ini
grid=$here/sweep/tiny-grid.ini
py=/usr/bin/python3
tmp=$(mktemp -d)
job=""
trap '[[ -n $job ]] && kill -KILL $job 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "preempt: FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "== $f"; tail -n 15 "$f"; done >&2; exit 1; }
# 150 steps: the signal must reach a run still running (30 tiny steps once finished in the ~0.1 s
# between the log line and the kill)
run_set=(--cache "$tmp/cache" --set rl.steps=150 --set rl.checkpoint_every=0)
# 300 steps a sweep run for the same reason: at 40 the 4 cached runs took 0.8 s in all, and under
# `ctest -j2` the whole sweep once ended (status 0) before the SIGINT that followed its first run file
sweep_set=(--cache "$tmp/cache" --set rl.steps=300 --quiet)

# waits (at most 120 s) until the file exists / the log has the text
wait_for() { local i; for i in $(seq 1200); do eval "$1" && return 0; kill -0 "$job" 2>/dev/null || return 1; sleep 0.1; done; return 1; }
# the world ranks of an mpirun job: "rank pid" lines
ranks_of() {
  local p
  for p in $(pgrep -P "$1"); do
    [[ -r /proc/$p/environ ]] || continue
    r=$(tr '\0' '\n' < "/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [[ -n $r ]] && echo "$r $p"
  done
}
# ends the job started in the background, within 120 s, and checks its status
expect_status() {  # expect_status WANT WHAT
  local i rc
  for i in $(seq 1200); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then fail "$2: still running 120 s after the signal (a hang)"; fi
  wait "$job"; rc=$?
  job=""
  [[ $rc == "$1" ]] || fail "$2: exited $rc, expected $1"
}
status_of() { "$py" -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["status"])' "$1"; }

# --- a run on 1 rank: SIGTERM after step 3 ---
"$moerl" run "$scen" --out "$tmp/ref1/r.h5" "${run_set[@]}" > "$tmp/ref1.log" 2>&1 || fail "reference run"
"$moerl" run "$scen" --out "$tmp/p1/r.h5" "${run_set[@]}" > "$tmp/p1.log" 2>&1 &
job=$!
wait_for 'grep -q "step 3/150" "$tmp/p1.log"' || fail "1 rank: the run did not reach step 3"
kill -TERM "$job"
expect_status 75 "1 rank, SIGTERM"
grep -q "preempted by SIGTERM after step" "$tmp/p1.log" || fail "1 rank: no 'preempted' line"
[[ $(status_of "$tmp/p1/r.h5") == preempted ]] || fail "1 rank: results status $(status_of "$tmp/p1/r.h5")"
[[ -f $tmp/p1/r.ckpt.h5 ]] || fail "1 rank: no checkpoint written on preemption"
"$moerl" run "$scen" --out "$tmp/p1/r.h5" "${run_set[@]}" --resume > "$tmp/p1-resume.log" 2>&1 || fail "1 rank: --resume"
"$py" "$here/sweep/same_runs.py" --files "$tmp/ref1/r.h5" "$tmp/p1/r.h5" > "$tmp/same1.log" || fail "1 rank: $(cat "$tmp/same1.log")"

# --- a run on 2 ranks: SIGUSR1 to rank 1 only ---
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scen" --out "$tmp/ref2/r.h5" "${run_set[@]}" > "$tmp/ref2.log" 2>&1 ||
  fail "reference run on 2 ranks"
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scen" --out "$tmp/p2/r.h5" "${run_set[@]}" > "$tmp/p2.log" 2>&1 &
job=$!
wait_for 'grep -q "step 3/150" "$tmp/p2.log"' || fail "2 ranks: the run did not reach step 3"
victim=$(ranks_of "$job" | awk '$1 == 1 {print $2}')
[[ -n $victim ]] || fail "2 ranks: rank 1 not found among mpirun's children"
kill -USR1 "$victim"
expect_status 75 "2 ranks, SIGUSR1 to rank 1"
grep -q "preempted by another rank's signal after step" "$tmp/p2.log" || fail "2 ranks: rank 0 did not say it stopped for rank 1"
[[ $(status_of "$tmp/p2/r.h5") == preempted ]] || fail "2 ranks: results status $(status_of "$tmp/p2/r.h5")"
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scen" --out "$tmp/p2/r.h5" "${run_set[@]}" --resume > "$tmp/p2-resume.log" 2>&1 ||
  fail "2 ranks: --resume"
"$py" "$here/sweep/same_runs.py" --files "$tmp/ref2/r.h5" "$tmp/p2/r.h5" > "$tmp/same2.log" || fail "2 ranks: $(cat "$tmp/same2.log")"

# --- the same under mpirun, SIGUSR1 to mpirun itself: it forwards the signal to every rank ---
rm -rf "$tmp/p2"
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scen" --out "$tmp/p2/r.h5" "${run_set[@]}" > "$tmp/p2u.log" 2>&1 &
job=$!
wait_for 'grep -q "step 3/150" "$tmp/p2u.log"' || fail "2 ranks (mpirun): the run did not reach step 3"
kill -USR1 "$job"
expect_status 75 "2 ranks, SIGUSR1 to mpirun"
grep -q "preempted by SIGUSR1 after step" "$tmp/p2u.log" || fail "2 ranks: mpirun did not pass SIGUSR1 on to rank 0"
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scen" --out "$tmp/p2/r.h5" "${run_set[@]}" --resume > "$tmp/p2u-resume.log" 2>&1 ||
  fail "2 ranks (mpirun): --resume"
"$py" "$here/sweep/same_runs.py" --files "$tmp/ref2/r.h5" "$tmp/p2/r.h5" > "$tmp/same2u.log" || fail "2 ranks (mpirun): $(cat "$tmp/same2u.log")"

# --- sweeps: the reference on 1 rank (a sweep's runs do not depend on the rank count) ---
"$moerl" sweep "$grid" --out "$tmp/sref" "${sweep_set[@]}" > "$tmp/sref.log" 2>&1 || fail "reference sweep"
check_sweep() {  # check_sweep DIR WHAT RANKS: preempted, none failed; then --resume ends it like the reference
  local d=$1 what=$2 np=$3
  grep -q ",failed," "$d/index.csv" && fail "$what: a run is marked failed: $(cat "$d/index.csv")"
  grep -q ",preempted," "$d/index.csv" || fail "$what: no run marked preempted: $(cat "$d/index.csv")"
  grep -q ",running," "$d/index.csv" && fail "$what: a run is left 'running': $(cat "$d/index.csv")"
  local launch=("$moerl")
  (( np > 1 )) && launch=("$mpiexec" --oversubscribe -np "$np" "$moerl")
  "${launch[@]}" sweep "$grid" --out "$d" "${sweep_set[@]}" --resume > "$tmp/resume-$np.log" 2>&1 || fail "$what: --resume"
  [[ $(grep -c ",complete," "$d/index.csv") == 4 ]] || fail "$what: after --resume: $(cat "$d/index.csv")"
  "$py" "$here/sweep/same_runs.py" "$tmp/sref" "$d" > "$tmp/same-$np.log" || fail "$what: $(cat "$tmp/same-$np.log")"
}

# 1 rank: SIGINT once the first run has written a step
"$moerl" sweep "$grid" --out "$tmp/s1" "${sweep_set[@]}" > "$tmp/s1.log" 2>&1 &
job=$!
wait_for 'ls "$tmp/s1"/*-seed*.h5 2>/dev/null | grep -qv ckpt' || fail "sweep, 1 rank: no run started"
kill -INT "$job"
expect_status 75 "sweep, 1 rank, SIGINT"
check_sweep "$tmp/s1" "sweep, 1 rank" 1

# 2 ranks: SIGTERM to every rank, as SLURM sends it
"$mpiexec" --oversubscribe -np 2 "$moerl" sweep "$grid" --out "$tmp/s2" "${sweep_set[@]}" > "$tmp/s2.log" 2>&1 &
job=$!
wait_for '[[ $(ls "$tmp/s2"/*-seed*.h5 2>/dev/null | grep -cv ckpt) -ge 2 ]]' || fail "sweep, 2 ranks: two runs did not start"
for p in $(ranks_of "$job" | awk '{print $2}'); do kill -TERM "$p"; done
expect_status 75 "sweep, 2 ranks, SIGTERM to both"
check_sweep "$tmp/s2" "sweep, 2 ranks" 2
echo "preempt: ok (run on 1 and 2 ranks, sweep on 1 and 2 ranks: status 75, resumed bit-identically)"
