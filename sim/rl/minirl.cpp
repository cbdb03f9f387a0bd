// minirl.cpp — MiniRL (Qwen, "Stabilizing Reinforcement Learning with LLMs: Formulation and
// Practices", arXiv 2512.01374, eq. 7): REINFORCE with the token IS weight under a stop-gradient
// and the decoupled-PPO mask,
//   ℓ = −M·sg[w·r]·A·logp_new,  dℓ/dlogp_new = −M·w·r·A,
//   r = π_θ/π_old = exp(clamp(logp_new − logp_old, ±20))            (policy staleness),
//   w = the rollout correction of ρ = π_old/μ_old (rl.correction)    (train–inference discrepancy),
//   M = 0 if A > 0 and r > 1 + ε_high, or A < 0 and r < 1 − ε_low; else 1 (rl.minirl_mask),
// so sg[π_θ/μ_old] = ρ·r is the paper's IS weight, factored as its eq. 5/6 does. The truncation at
// 5 applies to ρ: rl.correction = tis with rl.correction_cap = 5 (TIS truncates the train–inference
// ratio π_old/μ; the mask already bounds r where it would push the policy further). On-policy
// (one mini-batch, π_old recomputed) r = 1 in value, so both readings agree there. π_old is the
// proximal policy: the train engine's recompute (rl.old_logprobs = recompute), μ_old the rollout's.
// Defaults: ε_low 0.2, ε_high 0.27, seq-mean-token-sum (the paper's 1/G Σ_i Σ_t: no 1/|y|), and the
// advantage Â = R − mean_group(R) (rl.adv_std_norm = false, forced). The paper's variants are keys:
// length normalisation rl.aggregation = seq-mean-token-mean; without the train–inference IS weight
// rl.correction = none (w = 1: the weight is π_θ/π_old alone); without clipping
// rl.minirl_mask = false. A masked token counts in clip_frac.
#include "sim/rl/policy_loss.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Minirl final : public Algorithm {
 public:
  explicit Minirl(const LossConfig& c) : c_(c), mask_(c.param("minirl_mask") != 0.0f) {}
  const char* name() const override { return "minirl"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) { return token_ratio(b, i, t); },
                [&](double A, const RatioValue& x, double logp_new) {
                  const bool masked = mask_ && ((A > 0.0 && x.value > 1.0 + c_.clip_high) ||
                                                (A < 0.0 && x.value < 1.0 - c_.clip_low));
                  Surrogate none;  // masked: no term, no gradient
                  none.clipped = true;
                  return masked ? none : reinforce_term(x.value, A, logp_new, false);
                });
  }

 private:
  LossConfig c_;
  bool mask_;
};

std::unique_ptr<Algorithm> make_minirl(const LossConfig& cfg) { return std::make_unique<Minirl>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(minirl, {.doc = "REINFORCE with the token IS weight sg[pi/mu_old] (train-inference part truncated "
                                         "at 5) and the decoupled-PPO mask, token sums (arXiv 2512.01374)",
                                  .create = make_minirl,
                                  .clip_low = 0.2f,  // the paper's ε_low / ε_high
                                  .clip_high = 0.27f,
                                  .defaults = {"rl.aggregation = seq-mean-token-sum", "rl.correction = tis",
                                               "rl.correction_cap = 5"},
                                  .forced = {"rl.adv_std_norm = false"},
                                  .params = {{.key = "minirl_mask",
                                              .value = 1.0f,
                                              .doc = "MiniRL's decoupled-PPO mask M (false: no clipping, the paper's "
                                                     "off-policy ablation)",
                                              .boolean = true}}});

}  // namespace moerl::rl
