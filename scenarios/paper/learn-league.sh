#!/usr/bin/env bash
# learn-league.sh — the league of learn-league.ini on its 20 seeds, in chunks of 5 seeds (one sweep
# directory each: a sweep trains all of its base policies before its first run, so a chunk gives
# complete seeds within the hour instead of after 40 base policies). Two runs at a time (mpirun
# -np 2, a rank per run). Run it again, or after a stop, and every chunk resumes where it stopped
# (bit-identical: docs/reliability.md). Stop it cleanly with SIGTERM, SIGINT (Ctrl-C), SIGUSR1 or
# SIGHUP to the script: it passes the stop to its mpirun as SIGUSR1 (Open MPI's mpirun forwards
# SIGUSR1; its own SIGTERM kills the ranks: docs/clusters.md), the runs in flight write their
# checkpoints, and the script says "stopped; resume with ..." and exits 75 (mpi-sweep.sh). Any
# chunk that does not finish clean ends the script with its exit status (1: some runs failed;
# --resume runs them again).
#   scenarios/paper/learn-league.sh [OUT_ROOT]          (default results/paper)
#   /usr/bin/python3 -m analysis.league OUT_ROOT/learn-league-{700,705,710,715} --out docs/league \
#       --pair grpo-real:control --pair r3-real:'*' --pair gspo-real:rspo-real --pair rspo-real:grpo-real \
#       --pair gspo-real:grpo-real --pair icepop-real:grpo-real --pair tis-real:grpo-real \
#       --pair calib-real:grpo-real --pair tis+seq-mis-real:grpo-real
# The body is one compound command, read whole before it runs: editing this file while a sweep
# runs cannot change what the running script does next.
{
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-results/paper}
mkdir -p "$out"
. "$here/mpi-sweep.sh"
resume="scenarios/paper/learn-league.sh $out"
for lo in 700 705 710 715; do
  mpi_sweep learn-league.sh "$resume" "seeds $lo-$((lo + 4))" "$here/learn-league.ini" "$out/learn-league-$lo" \
    --seeds "$lo-$((lo + 4))" --cache "$out/cache" --ranks-per-run 1 --resume --quiet
done
exit 0
}
