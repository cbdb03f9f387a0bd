#!/usr/bin/env bash
# field-flips.sh — the field's MoE against the record (docs/field/README.md, "The flips"): for each
# expert shape below, three base policies (moerl sft on scenarios/paper/field.ini with the shape's
# keys) audited at the realistic engine pair (moerl audit: fp8-rollout against bf16-train, the
# audit's 256 sampled sequences): routes flipped per (token, layer), tokens with a flipped layer,
# KL, the router's margins and their flips, and the base's expert load. No noise is added anywhere.
#   scenarios/paper/field-flips.sh [OUT]        (default results/paper/field-flips; resumable)
#   /usr/bin/python3 -m analysis.field_flips OUT --out docs/field
#   /usr/bin/python3 -m analysis.field_flips OUT/bf16 --out docs/field/bf16
# Added during the runs, after seed 740's first audits and before any other seed's (2026-12-07):
# each base is audited a second time at the record's own kind of pair, a BF16 inference engine
# (bf16-rollout: fp8-rollout's nondeterministic kernels with BF16 operands, BF16 router and BF16
# router logits) against bf16-train, into OUT/bf16/. The R3 paper's 10 % is BF16 against BF16.
#
# The plan, written before the first run (2026-12-07):
# - Seeds 740, 741, 742 (run.seed: the base's initialisation and warm-up, and the audit's prompts
#   and samples). Never used before (learn-league.ini lists the used ones; 900-999 are reserved);
#   every shape runs on all three, every result is kept.
# - The shapes (12 layers, d_model 32, learn.ini's task and warm-up). The activated FFN width is
#   128 in each, except where the count of experts varies at top-8:
#     learn        8 experts top-2, width 64, no balancing (learn.ini: the top-2 league's base)
#     k2           64 experts top-2, width 64, aux loss 0.01
#     k4           64 experts top-4, width 32, aux loss 0.01
#     k8           64 experts top-8, width 16, aux loss 0.01 (field.ini itself)
#     e16          16 experts top-8, width 16, aux loss 0.01
#     e128         128 experts top-8, width 16, aux loss 0.01 (Qwen3-30B-A3B's count)
#     none         64 experts top-8, width 16, no balancing
#     deepseek     64 experts top-8, width 16, DeepSeek-V3's form: sigmoid scores, the selection
#                  bias (rate 0.001), one shared expert of width 16, sequence aux loss 1e-4
# - Reported per shape: the mean over the three seeds with a 95 % t-interval; the record's numbers
#   beside them (R3 paper, Qwen3-30B-A3B at BF16: ~10 % of routes, 94 % of tokens, KL 1.5e-3).
#   Hypotheses stated before the runs: top-8 flips more than top-2 at one activated width; more
#   experts flip more; a balanced router flips more than an unbalanced one at the same shape; the
#   flips concentrate in the smallest fifth of the router's margins.
# Two jobs at a time; a finished audit (its JSON) is never redone: run it again to resume.
{
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
moerl=${MOERL:-$root/build/sim/moerl}
out=${1:-results/paper/field-flips}
mkdir -p "$out/bf16"
bf16=(--set profile.bf16-rollout.base=bf16-train --set profile.bf16-rollout.router=bf16
      --set profile.bf16-rollout.router_logits=bf16 --set profile.bf16-rollout.gemm_order=split_k:4
      --set profile.bf16-rollout.attn_order=split_k:2 --set profile.bf16-rollout.norm_order=split_k:2
      --set profile.bf16-rollout.combine_order=split_k:2 --set profile.bf16-rollout.batch_invariant=false
      --set profile.bf16-rollout.tie_break=random)
shapes=(
  "learn|model.n_experts=8 model.top_k=2 model.d_ff=64 model.load_balance=none"
  "k2|model.top_k=2 model.d_ff=64"
  "k4|model.top_k=4 model.d_ff=32"
  "k8|"
  "e16|model.n_experts=16"
  "e128|model.n_experts=128"
  "none|model.load_balance=none"
  "deepseek|model.scoring=sigmoid model.expert_bias=true model.bias_update_rate=0.001 model.shared_expert_ff=16 model.load_balance=seq_aux_loss model.aux_loss_coef=1e-4"
)
seeds=(740 741 742)
job() {  # name seed sets...
  local name=$1 seed=$2; shift 2
  local bf16=($BF16_SETS)
  local sets=(--set "run.seed=$seed")
  for kv in "$@"; do sets+=(--set "$kv"); done
  local base="$out/$name-$seed.base.h5" json="$out/$name-$seed.json" part="$out/$name-$seed.part"
  [ -s "$json" ] && [ -s "$out/bf16/$name-$seed.json" ] && return 0
  if [ ! -s "$base" ]; then
    "$moerl" sft "$here/field.ini" "${sets[@]}" --out "$part.base.h5" --force > "$out/$name-$seed.sft.log" 2>&1 ||
      { echo "field-flips.sh: $name seed $seed: sft failed (see $out/$name-$seed.sft.log)"; return 1; }
    mv "$part.base.h5" "$base"
  fi
  if [ ! -s "$json" ]; then
    "$moerl" audit --checkpoint "$base" --scenario "$here/field.ini" "${sets[@]}" --out "$part.json" --force \
      > "$out/$name-$seed.audit.log" 2>&1 ||
      { echo "field-flips.sh: $name seed $seed: audit failed (see $out/$name-$seed.audit.log)"; return 1; }
    mv "$part.json" "$json"
  fi
  # the record's own pair: a BF16 inference engine (fp8-rollout's kernels with BF16 operands and
  # router) against bf16-train
  "$moerl" audit --checkpoint "$base" --scenario "$here/field.ini" "${sets[@]}" "${bf16[@]}" --profile-a bf16-rollout \
    --out "$part.json" --force > "$out/bf16/$name-$seed.audit.log" 2>&1 ||
    { echo "field-flips.sh: $name seed $seed: bf16 audit failed (see $out/bf16/$name-$seed.audit.log)"; return 1; }
  mv "$part.json" "$out/bf16/$name-$seed.json"
  echo "field-flips.sh: $name seed $seed done"
}
export -f job
export moerl here out
export BF16_SETS="${bf16[*]}"
list=()
for seed in "${seeds[@]}"; do
  for s in "${shapes[@]}"; do
    item="${s%%|*} $seed ${s#*|}"
    list+=("${item% }")  # xargs -L joins a line that ends in a blank to the next
  done
done
printf '%s\n' "${list[@]}" | xargs -P 2 -L 1 bash -c 'job "$@"' _
}
