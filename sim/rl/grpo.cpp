// grpo.cpp — GRPO's token-level clipped surrogate (arXiv 2402.03300):
// r = exp(clamp(logp_new − logp_old, ±20)), ℓ = max(−A·r, −A·clip(r, 1−ε_l, 1+ε_h)) with optional
// dual clip, any aggregation, optional rollout correction (rl.correction, docs/algorithms.md).
// `r3` is this loss; the replay is the train engine's routing mode.
#include "sim/rl/policy_loss.h"

namespace moerl::rl {

namespace {
class Grpo final : public Algorithm {
 public:
  explicit Grpo(const LossConfig& c) : c_(c) {}
  const char* name() const override { return "grpo"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) { return token_ratio(b, i, t); });
  }

 private:
  LossConfig c_;
};
}  // namespace

std::unique_ptr<Algorithm> make_grpo(const LossConfig& cfg) { return std::make_unique<Grpo>(cfg); }

}  // namespace moerl::rl
