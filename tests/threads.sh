#!/usr/bin/env bash
# Threads as the allocation says (ctest: threads; sim/process/threads.h): --threads, else OMP_NUM_THREADS,
# else SLURM_CPUS_PER_TASK (at most the affinity mask), else the affinity mask — the count oneTBB is
# limited to, as `moerl --version` and a run's header print it with the reason; a malformed value
# is refused naming the variable, its value and what is allowed.
# Usage: tests/threads.sh MOERL_BINARY
set -uo pipefail
moerl=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "threads: FAIL: $*" >&2; exit 1; }
cpus=$(nproc)      # the affinity mask's CPUs
online=$(getconf _NPROCESSORS_ONLN)
plural() { (( $1 == 1 )) && echo "1 thread" || echo "$1 threads"; }
clean=(env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK)
expect() {  # expect TEXT ENV... : the --version line ends with TEXT
  local want=$1 got
  shift
  got=$("${clean[@]}" "$@" "$moerl" --version) || fail "--version under $*"
  [[ $got == *", $want" ]] || fail "under '$*': '$got', expected it to end with '$want'"
}
expect "$(plural "$cpus") (affinity mask: $cpus of $online CPUs)"
if command -v taskset > /dev/null; then
  got=$("${clean[@]}" taskset -c 0 "$moerl" --version)
  [[ $got == *", 1 thread (affinity mask: 1 of $online CPUs)" ]] || fail "taskset -c 0: '$got'"
fi
expect "1 thread (SLURM_CPUS_PER_TASK=1)" SLURM_CPUS_PER_TASK=1
expect "$(plural "$cpus") (SLURM_CPUS_PER_TASK=999, but the affinity mask has $cpus CPUs)" SLURM_CPUS_PER_TASK=999
expect "3 threads (OMP_NUM_THREADS=3)" OMP_NUM_THREADS=3 SLURM_CPUS_PER_TASK=1
expect "2 threads (OMP_NUM_THREADS=2)" OMP_NUM_THREADS=2,1
for bad in "OMP_NUM_THREADS=x" "OMP_NUM_THREADS=0" "SLURM_CPUS_PER_TASK=-2"; do
  rc=0
  "${clean[@]}" "$bad" "$moerl" --version > "$tmp/bad.log" 2>&1 || rc=$?
  [[ $rc != 0 ]] || fail "$bad was accepted"
  grep -q "${bad%%=*} = '${bad#*=}': must be a number of threads from 1 to 4096" "$tmp/bad.log" || fail "$bad: $(cat "$tmp/bad.log")"
done
# a command's --threads wins over the environment, and its run says so
"${clean[@]}" OMP_NUM_THREADS=2 "$moerl" sweep "$here/sweep/tiny-grid.ini" --out "$tmp/s" --task 0 --threads 1 \
  --set rl.steps=1 > "$tmp/task.log" 2>&1 || fail "sweep --task 0 --threads 1: $(tail -n 3 "$tmp/task.log")"
grep -q "1 rank, 1 thread (--threads 1) per rank" "$tmp/task.log" || fail "the task's header: $(head -1 "$tmp/task.log")"
rc=0
"$moerl" sweep "$here/sweep/tiny-grid.ini" --out "$tmp/s" --task 0 --threads -1 > "$tmp/neg.log" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q -- "--threads -1: must be >= 1" "$tmp/neg.log" || fail "--threads -1: status $rc, $(cat "$tmp/neg.log")"
echo "threads: ok ($cpus CPUs in the mask; --threads > OMP_NUM_THREADS > SLURM_CPUS_PER_TASK > mask)"
