#!/usr/bin/env bash
# The engine audit of docs/reproductions.md (d), "Does the mismatch grow, and with which FP8
# recipe?": every checkpoint given, audited under four FP8 rollout recipes against bf16-train on
# scenarios/long.ini's task (256 prompts sampled under the rollout recipe, at temperature 1, to
# EOS or 64 tokens).
#   scenarios/paper/collapse-search/engines.sh OUT_DIR C1.h5 [C2.h5 ...]   → OUT_DIR/<stem>-<recipe>.json
#   /usr/bin/python3 -m analysis.audits OUT_DIR/*.json --out OUT_DIR
# The recipes:
#   fp8-rollout  built in: DeepSeek-V3's blockwise recipe (1×128 activation, 128×128 weight
#                scales), every linear layer in E4M3, the MoE router included;
#   fp8r16       the same with the router in BF16, as FP8 checkpoints ship it (DeepSeek-V3 keeps
#                its gating modules in their original precision; Neural Magic's FP8 MoE
#                checkpoints list the gate among the layers left unquantised);
#   fp8t         vLLM's online FP8 of a BF16 checkpoint (`--quantization fp8`): one scale per
#                weight matrix, one dynamic scale per activation tensor;
#   fp8tr16      per-tensor scales and a BF16 router.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OUT_DIR CHECKPOINT.h5 [CHECKPOINT.h5 ...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
moerl=${MOERL:-$root/build/sim/moerl}
out=$1; shift
mkdir -p "$out"
declare -A recipe=(
  [fp8-rollout]=""
  [fp8r16]="router=bf16"
  [fp8t]="act_scaling=tensor weight_scaling=tensor"
  [fp8tr16]="act_scaling=tensor weight_scaling=tensor router=bf16"
)
for ckpt in "$@"; do
  stem=$(basename "$ckpt" .h5); stem=${stem%.ckpt}
  for name in fp8-rollout fp8r16 fp8t fp8tr16; do
    sets=()
    if [ "$name" != fp8-rollout ]; then
      sets+=(--set "profile.$name.base=fp8-rollout")
      for kv in ${recipe[$name]}; do sets+=(--set "profile.$name.$kv"); done
    fi
    "$moerl" audit --force --checkpoint "$ckpt" --scenario "$root/scenarios/long.ini" "${sets[@]}" \
      --profile-a "$name" --profile-b bf16-train --out "$out/$stem-$name.json" > /dev/null
  done
done
echo "wrote $(( $# * 4 )) audits to $out"
