// icepop.cpp — IcePop (Ring-1T form, arXiv 2510.18855): GRPO's token surrogate weighted by
//   M(k) = k·1[α ≤ k ≤ β],  k = π_old/π_rollout (a constant),
// so tokens whose train/inference ratio leaves the band get zero gradient while still counting in
// the aggregation's denominators. Defaults α = 0.5, β = 5.
#include "sim/rl/policy_loss.h"

namespace moerl::rl {

namespace {
class Icepop final : public Algorithm {
 public:
  explicit Icepop(const LossConfig& c) : c_(c) {}
  const char* name() const override { return "icepop"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    policy_loss(out, b, c_, c_.aggregation, Correction::icepop, [&](int i, int t) { return token_ratio(b, i, t); });
  }

 private:
  LossConfig c_;
};
}  // namespace

std::unique_ptr<Algorithm> make_icepop(const LossConfig& cfg) { return std::make_unique<Icepop>(cfg); }

}  // namespace moerl::rl
