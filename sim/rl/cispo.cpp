// cispo.cpp — CISPO, clipped IS-weight policy optimisation (MiniMax-M1, arXiv 2506.13585 §3.1; as
// written in arXiv 2512.01374 App. A): REINFORCE whose token weight is the clipped ratio under a
// stop-gradient, so every token keeps a gradient:
//   ℓ = −sg[clip(r, 1 − ε_low, 1 + ε_high)]·A·logp_new,  r = exp(clamp(logp_new − logp_old, ±20)),
//   dℓ/dlogp_new = −clip(r, 1 − ε_low, 1 + ε_high)·A,
// aggregated by token-mean (the paper's 1/Σ_i|y_i| over the batch), group-normalised advantages
// (with the std). Defaults: ε_low = 1, so 1 − ε_low = 0 and the weight has no lower bound
// (MiniMax-M1 sets ε_low large and tunes only ε_high; slime's canonical --eps-clip 1.0, verl's
// examples/cispo_trainer clip_ratio_low = 10); ε_high = 0.2 (verl's example; the paper does not
// state its tuned value; slime suggests a wide one, e.g. 4: rl.clip_high = 4). With one
// mini-batch and π_old recomputed r = 1 in value, so ε_high matters only off-policy.
// The loss's value is a surrogate whose gradient is the policy gradient (it depends on logp_new's
// level); a token whose weight was clipped counts in clip_frac. rl.correction weights each term.
#include <algorithm>

#include "sim/rl/policy_loss.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Cispo final : public Algorithm {
 public:
  explicit Cispo(const LossConfig& c) : c_(c) {}
  const char* name() const override { return "cispo"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) { return token_ratio(b, i, t); },
                [&](double A, const RatioValue& x, double logp_new) {
                  const double w = std::clamp(x.value, 1.0 - c_.clip_low, 1.0 + c_.clip_high);
                  return reinforce_term(w, A, logp_new, w != x.value);
                });
  }

 private:
  LossConfig c_;
};

std::unique_ptr<Algorithm> make_cispo(const LossConfig& cfg) { return std::make_unique<Cispo>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(cispo, {.doc = "REINFORCE weighted by sg[clip(r, 1-eps_low, 1+eps_high)], every token keeps a "
                                        "gradient, token-mean (arXiv 2506.13585)",
                                 .create = make_cispo,
                                 .clip_low = 1.0f,  // no lower bound (MiniMax-M1 §3.1)
                                 .clip_high = 0.2f,
                                 .defaults = {"rl.aggregation = token-mean"}});

}  // namespace moerl::rl
