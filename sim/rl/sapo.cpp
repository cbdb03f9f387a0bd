// sapo.cpp — SAPO, Soft Adaptive Policy Optimization (Qwen, arXiv 2511.20347): PPO's hard clip
// replaced by a smooth gate on the token ratio r = π_θ/π_old = exp(clamp(logp_new − logp_old, ±20)):
//   ℓ = −A·f(r),  f(r) = (4/τ)·σ(τ·(r − 1)),  τ = τ_pos for A > 0, τ_neg otherwise,
//   dℓ/dlogp_new = −A·4·σ·(1 − σ)·r   (σ = σ(τ(r − 1)); no gradient where the log ratio is clamped).
// At r = 1 the gradient is −A, GRPO's; it decays smoothly as r leaves 1, faster for A < 0
// (τ_neg > τ_pos). The gate is on r, not on log r. Aggregation by default seq-mean-token-mean (the
// paper's 1/G Σ_i 1/|y_i| Σ_t; verl's compute_policy_loss_sapo forces it), τ_pos = 1, τ_neg = 1.05
// (the paper's Qwen3-30B-A3B setting; verl's actor.yaml and examples/sapo_trainer). A rollout
// correction (rl.correction) weights each token's term, as under grpo; nothing is clipped.
#include <cmath>

#include "sim/rl/policy_loss.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Sapo final : public Algorithm {
 public:
  explicit Sapo(const LossConfig& c) : c_(c), tau_pos_(c.param("sapo_tau_pos")), tau_neg_(c.param("sapo_tau_neg")) {}
  const char* name() const override { return "sapo"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) { return token_ratio(b, i, t); },
                [&](double A, const RatioValue& x, double) {
                  const double tau = A > 0.0 ? tau_pos_ : tau_neg_;
                  const double s = 1.0 / (1.0 + std::exp(-tau * (x.value - 1.0)));
                  Surrogate out;
                  out.value = -A * (4.0 / tau) * s;
                  out.grad = -A * 4.0 * s * (1.0 - s) * x.grad;
                  return out;
                });
  }

 private:
  LossConfig c_;
  double tau_pos_, tau_neg_;
};

std::unique_ptr<Algorithm> make_sapo(const LossConfig& cfg) { return std::make_unique<Sapo>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(sapo, {.doc = "soft gate (4/tau)*sigmoid(tau*(r-1)) instead of the clip, tau_pos for A > 0, tau_neg "
                                       "for A < 0 (arXiv 2511.20347)",
                                .create = make_sapo,
                                .defaults = {"rl.aggregation = seq-mean-token-mean"},
                                .params = {{.key = "sapo_tau_pos", .value = 1.0f,
                                            .doc = "SAPO gate temperature tau_pos for tokens with A > 0",
                                            .lo = 0.0f, .lo_open = true},
                                           {.key = "sapo_tau_neg", .value = 1.05f,
                                            .doc = "SAPO gate temperature tau_neg for tokens with A <= 0 (larger: faster decay)",
                                            .lo = 0.0f, .lo_open = true}}});

}  // namespace moerl::rl
