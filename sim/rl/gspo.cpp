// gspo.cpp — GSPO in its GSPO-token form (arXiv 2507.18071): per sequence
//   s_i = exp(min(δ̄_i, 10)),  δ̄_i = Σ_t m·(logp_new − logp_old) / max(Σ_t m, 1),
// each token's ratio has the value s_i and the gradient s_i·∇logp_new (the stop-gradient
// construction), clipped with ε_l/ε_h (paper: 3e-4 / 4e-4), no dual clip, aggregation forced to
// seq-mean-token-mean. With sequence-constant advantages this equals sequence-level GSPO.
#include <vector>

#include "sim/rl/policy_loss.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Gspo final : public Algorithm {
 public:
  explicit Gspo(const LossConfig& c) : c_(c) { c_.dual_clip = 0.0f; }
  const char* name() const override { return "gspo"; }
  void loss(LossOutput* out, const LossBatch& b) const override {
    std::vector<double> s(b.S), ds(b.S);
    for (int i = 0; i < b.S; ++i) {
      double sum = 0.0, len = 0.0;
      for (int t = 0; t < b.R; ++t) {
        const size_t j = static_cast<size_t>(i) * b.R + t;
        sum += b.mask[j] * (static_cast<double>(b.logp_new[j]) - b.logp_old[j]);
        len += b.mask[j];
      }
      const double mean = sum / std::max(len, 1.0);
      s[i] = std::exp(std::min(mean, 10.0));
      ds[i] = mean < 10.0 ? s[i] : 0.0;
    }
    policy_loss(out, b, c_, Aggregation::seq_mean_token_mean, c_.correction,
                [&](int i, int) { return RatioValue{s[i], ds[i], 1.0}; });
  }
  bool device_form(PolicyLossParams* p, Aggregation* agg) const override {
    *p = policy_loss_params(c_, PolicyRatio::sequence);  // c_.dual_clip is 0
    *agg = Aggregation::seq_mean_token_mean;
    return true;
  }

 private:
  LossConfig c_;
};

std::unique_ptr<Algorithm> make_gspo(const LossConfig& cfg) { return std::make_unique<Gspo>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(gspo, {.doc = "sequence-level ratio exp(mean log r), its own clip range (arXiv 2507.18071)",
                                .create = make_gspo,
                                .clip_low = 3e-4f,  // GSPO paper §5.1: 3e-4 / 4e-4
                                .clip_high = 4e-4f});

}  // namespace moerl::rl
