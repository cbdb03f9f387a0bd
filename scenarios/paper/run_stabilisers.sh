#!/usr/bin/env bash
# The stabilisers of docs/stabilisers.md on the setting of scenarios/paper/stability.ini (same base
# policies, same FP8 rollout mismatch), written beside the headline algorithms' runs so that one
# report compares them all: router KL replay buffer, routing calibration (with its TIS correction,
# and with gradient surgery), router temperature control, frozen router, stale rollouts (one RL
# step behind), shared-prefix routing.
# Usage: scenarios/paper/run_stabilisers.sh [OUT_DIR] [SEEDS...]   (default results/paper/stability, seeds 0 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/paper/stability}; shift || true
seeds=("$@"); [[ ${#seeds[@]} -gt 0 ]] || seeds=(0 1 2)
moerl=${MOERL:-build/sim/moerl}
mkdir -p "$out"
declare -A variants=(
  [router-kl]="rl.router_kl_coef=0.1"
  [calib]="rl.calib_coef=0.1 rl.calib_schedule=sigmoid rl.correction=tis"
  [calib-surgery]="rl.calib_coef=0.1 rl.calib_schedule=sigmoid rl.correction=tis rl.grad_surgery=true"
  [router-temp]="rl.router_temp_every=10"
  [frozen-router]="rl.freeze_router=true"
  [stale]="rl.rollout_staleness=4"
  [shared-prefix]="rl.shared_prefix_routing=true"
)
for seed in "${seeds[@]}"; do
  for name in router-kl calib calib-surgery router-temp frozen-router stale shared-prefix; do
    sets=(--set "run.seed=$seed" --set rl.algorithm=grpo)
    for kv in ${variants[$name]}; do sets+=(--set "$kv"); done
    "$moerl" run scenarios/paper/stability.ini "${sets[@]}" --out "$out/$name-seed$seed.h5" --resume
  done
done
