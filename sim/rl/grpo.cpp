// grpo.cpp — GRPO's token-level clipped surrogate (arXiv 2402.03300), class in grpo.h:
// r = exp(clamp(logp_new − logp_old, ±20)), ℓ = max(−A·r, −A·clip(r, 1−ε_l, 1+ε_h)) with optional
// dual clip, any aggregation, optional rollout correction (rl.correction, docs/algorithms.md).
#include "sim/rl/grpo.h"

#include "sim/rl/registry.h"

namespace moerl::rl {

void Grpo::loss(LossOutput* out, const LossBatch& b) const {
  policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) { return token_ratio(b, i, t, gamma(b, i, t)); });
}

bool Grpo::device_form(PolicyLossParams* p, Aggregation* agg) const {
  *p = policy_loss_params(c_, PolicyRatio::token);
  *agg = c_.aggregation;
  return true;
}

double Grpo::gamma(const LossBatch& b, int i, int t) const {
  (void)b, (void)i, (void)t;
  return 1.0;
}

namespace {
std::unique_ptr<Algorithm> make_grpo(const LossConfig& cfg) { return std::make_unique<Grpo>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(grpo, {.doc = "token-level PPO clipped surrogate, group-normalised advantages (arXiv 2402.03300)",
                                .create = make_grpo});

}  // namespace moerl::rl
