#!/usr/bin/env bash
# Runs the stability comparison of scenarios/paper/stability.ini: 7 variants × seeds.
# Usage: scenarios/paper/run_stability.sh [OUT_DIR] [SEEDS...]   (default results/paper/stability, seeds 0 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/paper/stability}; shift || true
seeds=("$@"); [[ ${#seeds[@]} -gt 0 ]] || seeds=(0 1 2)
moerl=${MOERL:-build/sim/moerl}
mkdir -p "$out"
declare -A variants=(
  [grpo]="rl.algorithm=grpo"
  [gspo]="rl.algorithm=gspo"
  [rspo]="rl.algorithm=rspo"
  [r3]="rl.algorithm=r3"
  [icepop]="rl.algorithm=icepop"
  [grpo-dense]="rl.algorithm=grpo model.n_experts=0"
  [grpo-nomismatch]="rl.algorithm=grpo engines.rollout=bf16-train"
)
for seed in "${seeds[@]}"; do
  for name in grpo gspo rspo r3 icepop grpo-dense grpo-nomismatch; do
    f="$out/$name-seed$seed.h5"
    sets=(--set "run.seed=$seed")
    for kv in ${variants[$name]}; do sets+=(--set "$kv"); done
    "$moerl" run scenarios/paper/stability.ini "${sets[@]}" --out "$f" --resume
  done
done
