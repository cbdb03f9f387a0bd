// rspo.cpp — RSPO (arXiv 2510.23027), as reconstructed in docs/algorithms.md (its method section
// was not available): the token ratio is rescaled by the stop-gradient router-shift weight
// before clipping,
//   r̃ = sg[γ]·r,  γ = max(γ_min, exp(−d)),  d = mean over layers of the mean over π_old's top-k
//   experts of |log p_θ(e) − log p_old(e)|,
// then GRPO's clipped surrogate on r̃. γ is computed by the train step (it needs the router) and
// passed in LossBatch::gamma, already floored.
#include "sim/rl/policy_loss.h"

namespace moerl::rl {

namespace {
class Rspo final : public Algorithm {
 public:
  explicit Rspo(const LossConfig& c) : c_(c) {}
  const char* name() const override { return "rspo"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, c_.correction, [&](int i, int t) {
      return token_ratio(b, i, t, b.gamma ? b.gamma[static_cast<size_t>(i) * b.R + t] : 1.0);
    });
  }

 private:
  LossConfig c_;
};
}  // namespace

std::unique_ptr<Algorithm> make_rspo(const LossConfig& cfg) { return std::make_unique<Rspo>(cfg); }

}  // namespace moerl::rl
