#!/usr/bin/env bash
# Runs scenarios/paper/mismatch.ini for each engine pairing, MoE vs dense, with and without R3.
# Usage: scenarios/paper/run_mismatch.sh [OUT_DIR] [SEEDS...]   (default results/paper/mismatch, seeds 0 1 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-results/paper/mismatch}; shift || true
seeds=("$@"); [[ ${#seeds[@]} -gt 0 ]] || seeds=(0 1 2)
moerl=${MOERL:-build/sim/moerl}
mkdir -p "$out"
declare -A variants=(
  [moe-fp8]="engines.rollout=fp8-rollout"
  [moe-fp8-r3]="engines.rollout=fp8-rollout rl.algorithm=r3"
  [dense-fp8]="engines.rollout=fp8-rollout model.n_experts=0"
  [moe-bf16]="engines.rollout=bf16-train"
  [moe-bf16-r3]="engines.rollout=bf16-train rl.algorithm=r3"
  [dense-bf16]="engines.rollout=bf16-train model.n_experts=0"
  [moe-bf16-splitk]="engines.rollout=bf16-splitk engines.train=bf16-train"
)
for seed in "${seeds[@]}"; do
  for name in moe-fp8 moe-fp8-r3 dense-fp8 moe-bf16 moe-bf16-r3 dense-bf16 moe-bf16-splitk; do
    sets=(--set "run.seed=$seed")
    for kv in ${variants[$name]}; do sets+=(--set "$kv"); done
    "$moerl" run scenarios/paper/mismatch.ini "${sets[@]}" --out "$out/$name-seed$seed.h5" --resume
  done
done
