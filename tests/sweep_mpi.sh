#!/usr/bin/env bash
# `moerl sweep` over MPI (ctest: sweep_mpi). The tiny grid on 1 rank and on 2 ranks (rank 0 hands
# out runs dynamically and runs some itself) gives the same runs with the same numbers, and both
# ranks get work; 2 ranks per run make one group; a rank count that --ranks-per-run does not
# divide is refused; --resume after a finished sweep runs nothing.
# Usage: tests/sweep_mpi.sh MOERL_BINARY     (MPIEXEC overrides the launcher, default mpirun)
set -euo pipefail
moerl=$1
mpiexec=${MPIEXEC:-mpirun}
grid=$(cd "$(dirname "$0")" && pwd)/sweep/tiny-grid.ini
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "sweep_mpi: FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "== $f"; cat "$f"; done >&2; exit 1; }
# the columns that must not depend on where a run ran: id, file, status, steps, collapse, reward, eval
cols() { tail -n +2 "$1/index.csv" | cut -d, -f2-8; }

"$moerl" sweep "$grid" --out "$tmp/np1" --set rl.steps=3 --quiet > "$tmp/np1.log" 2>&1 || fail "1 rank"
"$mpiexec" --oversubscribe -np 2 "$moerl" sweep "$grid" --out "$tmp/np2" --set rl.steps=3 --quiet \
  > "$tmp/np2.log" 2>&1 || fail "2 ranks"
[[ $(cols "$tmp/np1" | grep -c ',complete,3,-1,') == 4 ]] || fail "1 rank: expected 4 complete runs of 3 steps"
diff <(cols "$tmp/np1") <(cols "$tmp/np2") > "$tmp/diff.log" || fail "1 and 2 ranks differ"
ranks=$(tail -n +2 "$tmp/np2/index.csv" | cut -d, -f10 | sort -u | tr '\n' ' ')
[[ "$ranks" == "0 1 " ]] || fail "2 ranks: runs were led by ranks '$ranks', expected both 0 and 1"

"$mpiexec" --oversubscribe -np 2 "$moerl" sweep "$grid" --out "$tmp/rpr2" --set rl.steps=3 --ranks-per-run 2 --quiet \
  > "$tmp/rpr2.log" 2>&1 || fail "--ranks-per-run 2"
diff <(cols "$tmp/np1") <(cols "$tmp/rpr2") > "$tmp/diff2.log" || fail "one group of 2 differs from 1 rank"

if "$mpiexec" --oversubscribe -np 2 "$moerl" sweep "$grid" --out "$tmp/bad" --ranks-per-run 3 > "$tmp/bad.log" 2>&1; then
  fail "--ranks-per-run 3 on 2 ranks was accepted"
fi
grep -q "do not divide into groups of 3" "$tmp/bad.log" || fail "--ranks-per-run 3: no clear message"

"$mpiexec" --oversubscribe -np 2 "$moerl" sweep "$grid" --out "$tmp/np2" --set rl.steps=3 --resume \
  > "$tmp/resume.log" 2>&1 || fail "--resume"
grep -q "0 to run" "$tmp/resume.log" || fail "--resume of a finished sweep ran something"
echo "sweep_mpi: ok (1 rank = 2 ranks = 1 group of 2; both ranks led runs: $ranks)"
