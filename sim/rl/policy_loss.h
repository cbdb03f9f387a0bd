// policy_loss.h — the per-token driver shared by the algorithms (their factories are declared
// beside their rows in sim/rl/algorithm_registry.cpp).
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

// Σ scale_i·m·w·surrogate(ratio) (+ k3 KL), with exact gradients; fills every LossOutput field.
void policy_loss(LossOutput* out, const LossBatch& b, const LossConfig& c, Aggregation agg,
                 Correction corr, const RatioFn& ratio_of);

}  // namespace moerl::rl
