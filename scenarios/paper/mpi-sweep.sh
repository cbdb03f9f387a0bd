# mpi-sweep.sh — sourced by the paper's driver scripts (learn-league.sh, learn-more.sh,
# field-more.sh) and scripts/league.sh: one sweep under mpirun that a stop signal to the script ends
# cleanly.
#   mpi_sweep SCRIPT RESUME WHAT GRID OUT [sweep options...]
#   paper_sweep SCRIPT OUT_ROOT GRID OUT: a driver's grid, resumed, two runs at a time (a rank per
#     run), base policies shared through OUT_ROOT/cache; resumed with `scenarios/paper/SCRIPT OUT_ROOT`
# runs `mpirun -np 2 $moerl sweep GRID --out OUT [options]` in its own session (a Ctrl-C at the
# terminal reaches the script only, not mpirun, whose own SIGINT and SIGTERM kill the ranks). The
# script's SIGTERM, SIGINT, SIGUSR1 and SIGHUP are passed to mpirun as SIGUSR1, which Open MPI
# forwards to the ranks: the runs in flight write their checkpoints and the sweep exits 75. The
# script waits for it, then says "stopped; resume with RESUME" and exits 75 — also when the signal
# came as the sweep finished. Any other failure: "WHAT: exit N" and that status. $moerl: the
# caller's, else $MOERL, else the build beside this checkout. Open MPI may run as root (a container)
# unless the caller's environment says otherwise.
# mpi_sweep_np=1 (scripts/league.sh's guard run, or a machine without mpirun) runs the sweep as one
# process without mpirun; moerl itself takes SIGUSR1 as a stop (docs/reliability.md). With
# mpi_sweep_log=FILE the sweep's own output is appended to FILE; mpi_sweep's lines stay on stdout.
moerl=${moerl:-${MOERL:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/sim/moerl}}
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
mpi_sweep_pid=""
mpi_sweep_signal=""
mpi_sweep_on_signal() {
  mpi_sweep_signal=${mpi_sweep_signal:-$1}
  [ -n "$mpi_sweep_pid" ] && kill -USR1 "$mpi_sweep_pid" 2>/dev/null
}
for mpi_sweep_sig in TERM INT USR1 HUP; do
  trap "mpi_sweep_on_signal SIG$mpi_sweep_sig" "$mpi_sweep_sig"
done
mpi_sweep() {
  local script=$1 resume=$2 what=$3 grid=$4 dir=$5 rc
  shift 5
  if [ -n "$mpi_sweep_signal" ]; then
    echo "$script: stopped by $mpi_sweep_signal before $what; resume with: $resume"
    exit 75
  fi
  local launch=(setsid mpirun --oversubscribe -np "${mpi_sweep_np:-2}" "$moerl" sweep "$grid" --out "$dir" "$@")
  [ "${mpi_sweep_np:-2}" = 1 ] && launch=(setsid "$moerl" sweep "$grid" --out "$dir" "$@")
  if [ -n "${mpi_sweep_log:-}" ]; then
    "${launch[@]}" >> "$mpi_sweep_log" 2>&1 &
  else
    "${launch[@]}" &
  fi
  mpi_sweep_pid=$!
  [ -n "$mpi_sweep_signal" ] && kill -USR1 "$mpi_sweep_pid" 2>/dev/null  # a signal while it started
  # `wait` returns at every trapped signal: wait again until mpirun has ended, then take its status
  while kill -0 "$mpi_sweep_pid" 2>/dev/null; do wait "$mpi_sweep_pid"; done
  wait "$mpi_sweep_pid"
  rc=$?
  mpi_sweep_pid=""
  if [ -n "$mpi_sweep_signal" ] || [ $rc -eq 75 ]; then
    echo "$script: stopped${mpi_sweep_signal:+ by $mpi_sweep_signal} during $what (exit 75: the runs in flight wrote their checkpoints); resume with: $resume"
    exit 75
  fi
  if [ $rc -ne 0 ]; then
    echo "$script: $what: exit $rc (see $dir/index.csv); run again to resume: $resume"
    exit $rc
  fi
}
paper_sweep() {
  mpi_sweep "$1" "scenarios/paper/$1 $2" "$4" "$3" "$4" --cache "$2/cache" --ranks-per-run 1 --resume --quiet
}
