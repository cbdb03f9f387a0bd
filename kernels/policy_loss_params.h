// policy_loss_params.h — the settings of the policy_loss_rows op (kernels/ops.def): one RL policy
// loss per token (sim/rl/loss.h) where the log-probs are. Plain data, passed to a device kernel by
// value. The codes of `correction` are sim/rl/loss.h's Correction (static_asserts there keep them
// in step); the row functions are kernels/cuda/hd/policy_loss.h.
#pragma once

#include <cstdint>

namespace moerl {

// The ratio a policy loss clips.
enum class PolicyRatio : int32_t {
  token = 0,     // γ·r, r = exp(clamp(logp_new − logp_old, ±20)) (GRPO, R3, IcePop, RSPO's γ)
  sequence = 1,  // GSPO's s_i = exp(min(mean_t m·(logp_new − logp_old), 10)) on every token of i
};

struct PolicyLossParams {
  float clip_low = 0.2f, clip_high = 0.2f;  // ε_low, ε_high
  float dual_clip = 0.0f;                   // c of the dual clip for A < 0 (0 = off)
  int32_t correction = 0;                   // sim/rl/loss.h's Correction
  float correction_cap = 2.0f, correction_cap_low = 0.0f;
  float seq_mask_low = 0.99f, seq_mask_high = 1.001f;
  float seq_k3_max = 0.01f;
  float icepop_low = 0.5f, icepop_high = 5.0f;
  float kl_coef = 0.0f;                     // β of the k3 KL to the reference (0 = off)
  PolicyRatio ratio = PolicyRatio::token;
};

// The op's totals, in this order: Σ scale·m·ℓ, its k3 part, the masked tokens, those whose
// clipped branch was taken, those whose correction weight is 0, and the largest ratio of a token
// with a negative advantage (0 when none).
enum PolicyLossTotal : int { kLossSum = 0, kLossKl, kLossTokens, kLossClipped, kLossMasked, kLossRatioMaxNegAdv, kLossTotals };

}  // namespace moerl
