#!/usr/bin/env bash
# learn-more.sh — issue 49's parts 3 and 4 after the league, one sweep after another, each resumed
# where it stopped: the collapse probes 27-32 on the search seeds 600-603 (their rules are in each
# grid's header and docs/notebook/collapse-search.md §8, written before their runs), cheapest first
# (28, 31, 29, 30, 27: a success must still be confirmed on fresh seeds, so the likeliest levers
# run first; 32, the sixth, was written after those five), then the expert counts 8/32/128 on
# seeds 720-725 (learn-experts.ini). Two runs at a
# time (mpirun -np 2, a rank per run), base policies shared through OUT_ROOT/cache. Stop it cleanly
# with SIGTERM, SIGINT, SIGUSR1 or SIGHUP to the script, as learn-league.sh (exit 75, "stopped;
# resume with ..."); run it again to resume.
#   scenarios/paper/learn-more.sh [OUT_ROOT]          (default results/paper)
#   /usr/bin/python3 -m analysis.probe_rule probe28 OUT_ROOT/learn-search/probe28
#   /usr/bin/python3 -m analysis.league OUT_ROOT/learn-experts --by model.n_experts
# The body is one compound command, read whole before it runs: editing this file while a sweep
# runs cannot change what the running script does next.
{
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-results/paper}
mkdir -p "$out/learn-search"
. "$here/mpi-sweep.sh"
for p in 28 31 29 30 27 32; do
  paper_sweep learn-more.sh "$out" "$here/learn-search/probe$p.ini" "$out/learn-search/probe$p"
done
paper_sweep learn-more.sh "$out" "$here/learn-experts.ini" "$out/learn-experts"
exit 0
}
