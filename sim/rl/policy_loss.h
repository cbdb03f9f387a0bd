// policy_loss.h — the per-token driver shared by the algorithms (each registered by its own file,
// sim/rl/<name>.cpp; sim/rl/registry.h).
#pragma once

#include <functional>
#include <memory>

#include "sim/rl/corrections.h"
#include "sim/rl/ppo_terms.h"

namespace moerl::rl {

// The ratio an algorithm clips at token (i, t): its value, its derivative with respect to
// logp_new[i, t], and the weight it reports (γ for RSPO, else 1).
struct RatioValue {
  double value = 1.0, grad = 0.0, weight = 1.0;
};
using RatioFn = std::function<RatioValue(int i, int t)>;

// The token ratio γ·r, r = exp(clamp(logp_new − logp_old, ±20)); no gradient where clamped.
inline RatioValue token_ratio(const LossBatch& b, int i, int t, double gamma = 1.0) {
  const size_t j = static_cast<size_t>(i) * b.R + t;
  const double raw = static_cast<double>(b.logp_new[j]) - b.logp_old[j];
  const double d = clamp20(raw);
  const double r = gamma * std::exp(d);
  return RatioValue{r, raw == d ? r : 0.0, gamma};
}

// The per-token term of a loss that is not PPO's clipped surrogate (sapo.cpp, cispo.cpp,
// minirl.cpp): ℓ and dℓ/dlogp_new for advantage A, the ratio x of ratio_of and the token's
// current log-prob; `clipped` counts the token in clipped_tokens (clip_frac).
using SurrogateFn = std::function<Surrogate(double A, const RatioValue& x, double logp_new)>;

// Σ scale_i·m·w·surrogate(ratio) (+ k3 KL), with exact gradients; fills every LossOutput field.
// The surrogate is PPO's clipped one (ppo_terms.h) unless `surrogate_of` is given.
void policy_loss(LossOutput* out, const LossBatch& b, const LossConfig& c, Aggregation agg,
                 Correction corr, const RatioFn& ratio_of, const SurrogateFn& surrogate_of = nullptr);

}  // namespace moerl::rl
