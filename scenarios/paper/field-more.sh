#!/usr/bin/env bash
# field-more.sh — issue 65's grids at the field's MoE, one sweep after another, each resumed where
# it stopped (their plans are in each grid's header, written before their runs): the balancing grids
# (field-balance-aux.ini, field-balance-bias.ini, seeds 750-759), issue 62's on-policy MiniRL arms
# (field-minirl.ini, seeds 780-789), the league at this shape (field-league.ini, seeds 760-779),
# then the off-policy MiniRL arms (field-minirl-off.ini, 780-789). Two runs at a time (mpirun -np
# 2, a rank per run), base policies shared through OUT_ROOT/cache. A stop signal (TERM, INT, USR1,
# HUP) to the script stops the sweep cleanly (scenarios/paper/mpi-sweep.sh): run it again to
# resume. The flips' audits are scenarios/paper/field-flips.sh.
#   scenarios/paper/field-more.sh [OUT_ROOT]          (default results/paper)
#   /usr/bin/python3 -m analysis.league OUT_ROOT/field-balance-aux --by rl.aux_loss
#   /usr/bin/python3 -m analysis.league OUT_ROOT/field-league --out docs/field/league
# The body is one compound command, read whole before it runs: editing this file while a sweep
# runs cannot change what the running script does next.
{
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-results/paper}
mkdir -p "$out/field-search"
. "$here/mpi-sweep.sh"
for grid in field-balance-aux field-balance-bias field-minirl field-league field-minirl-off; do
  paper_sweep field-more.sh "$out" "$here/$grid.ini" "$out/$grid"
done
exit 0
}
