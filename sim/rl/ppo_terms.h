// ppo_terms.h — the pieces every policy loss shares: clipped surrogate, k3 KL and aggregation
// (the correction weights are sim/rl/corrections.h). Internal to sim/rl/.
#pragma once

#include <algorithm>
#include <cmath>

#include "sim/rl/loss.h"

namespace moerl::rl {

inline double clamp20(double x) { return std::clamp(x, -20.0, 20.0); }

// PPO clipped surrogate of one token for ratio x with d x / d logp_new = dx:
// ℓ = max(−A·x, −A·clip(x, 1−ε_l, 1+ε_h)), then the dual clip min(ℓ, −A·c) for A < 0.
struct Surrogate {
  double value = 0.0;
  double grad = 0.0;     // dℓ / dlogp_new
  bool clipped = false;  // the clipped branch was strictly larger (or the dual clip bound)
};
inline Surrogate surrogate(double A, double x, double dx, const LossConfig& c) {
  Surrogate s;
  const double l1 = -A * x;
  const double l2 = -A * std::clamp(x, 1.0 - c.clip_low, 1.0 + c.clip_high);
  if (l2 > l1) {
    s.value = l2;
    s.clipped = true;  // constant in x: no gradient
  } else {
    s.value = l1;
    s.grad = -A * dx;
  }
  if (c.dual_clip > 0.0f && A < 0.0 && s.value > -A * c.dual_clip) {
    s.value = -A * c.dual_clip;
    s.grad = 0.0;
    s.clipped = true;
  }
  return s;
}

// The REINFORCE term of one token under a stop-gradient weight (CISPO, MiniRL):
// ℓ = −sg[weight]·A·logp_new, dℓ/dlogp_new = −weight·A; `clipped` as the algorithm counts it.
inline Surrogate reinforce_term(double weight, double A, double logp_new, bool clipped) {
  Surrogate s;
  s.value = -weight * A * logp_new;
  s.grad = -weight * A;
  s.clipped = clipped;
  return s;
}

// k3 = e^x − x − 1 with x = logp_ref − logp_new (clamped ±20, result clamped ±10, verl's
// low_var_kl); returns the value and d k3 / d logp_new.
inline void k3(double logp_ref, double logp_new, double* value, double* grad) {
  const double raw = logp_ref - logp_new;
  const double x = clamp20(raw);
  const double v = std::exp(x) - x - 1.0;
  *value = std::clamp(v, -10.0, 10.0);
  *grad = (raw == x && v == *value) ? -(std::exp(x) - 1.0) : 0.0;
}

// Per-token scale of the aggregation: loss = Σ_{i,t} scale_i · m·ℓ.
// token-mean: 1/norm_tokens; seq-mean-token-mean: 1/(|y_i|·norm_seqs); seq-mean-token-sum:
// 1/norm_seqs. Denominators default to this mini-batch's counts (fully masked sequences excluded
// from the sequence count, as verl does).
void aggregation_scales(double* scale, Aggregation agg, const LossBatch& b);

}  // namespace moerl::rl
