// rspo.cpp — RSPO (arXiv 2510.23027), as reconstructed in docs/algorithms.md (its method section
// was not available): the token ratio is rescaled by the stop-gradient router-shift weight
// before clipping,
//   r̃ = sg[γ]·r,  γ = max(γ_min, exp(−d)),  d = mean over layers of the mean over π_old's top-k
//   experts of |log p_θ(e) − log p_old(e)|,
// then GRPO's clipped surrogate on r̃ (grpo.h). γ is read at the positions that score the response
// (positions.h); it needs the router, so the algorithm asks for the router shift (needs()) and
// computes γ in prepare(). A dense model has no router: γ = 1.
#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/io/results.h"
#include "sim/rl/grpo.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Rspo final : public Grpo {
 public:
  explicit Rspo(const LossConfig& c) : Grpo(c, "rspo") {}
  AlgorithmNeeds needs() const override { return {.router_shift = true}; }

  void prepare(LossBatch* b, const MinibatchView& v) override {
    b->gamma = nullptr;
    if (!v.router_logp_new) return;
    const ResponseSlice& x = v.slice;
    const size_t new_layer = static_cast<size_t>(v.n_mine) * x.T, old_layer = static_cast<size_t>(v.S_step) * x.T;
    std::vector<double> mine(static_cast<size_t>(v.n_mine) * x.R);
    for (int i = 0; i < v.n_mine; ++i)
      for (int r = 0; r < x.R; ++r) {
        const size_t row_new = x.row_at(i, r), row_old = x.row_at(v.mine[i], r);
        double d = 0.0;
        for (int l = 0; l < v.L; ++l)
          for (int k = 0; k < v.K; ++k)
            d += std::fabs(static_cast<double>(v.router_logp_new[(l * new_layer + row_new) * v.K + k]) -
                           v.router_logp_old[(l * old_layer + row_old) * v.K + k]);
        d /= static_cast<double>(v.L) * v.K;
        mine[static_cast<size_t>(i) * x.R + r] = std::max(static_cast<double>(c_.rspo_floor), std::exp(-d));
      }
    const std::vector<double> all = v.gather(mine);
    gamma_.resize(all.size());
    for (size_t j = 0; j < all.size(); ++j) {
      gamma_[j] = static_cast<float>(all[j]);
      gamma_sum_ += all[j];
      gamma_min_ = std::min(gamma_min_, all[j]);
      gamma_n_ += 1.0;
    }
    b->gamma = gamma_.data();
  }

  // GRPO's surrogate on γ·r (Grpo::loss)
  double gamma(const LossBatch& b, int i, int t) const override {
    return b.gamma ? b.gamma[static_cast<size_t>(i) * b.R + t] : 1.0;
  }

  void record(RunResults* res) override {
    res->set("rspo_gamma_mean", gamma_n_ > 0 ? gamma_sum_ / gamma_n_ : 1.0);
    res->set("rspo_gamma_min", gamma_n_ > 0 ? gamma_min_ : 1.0);
    gamma_sum_ = gamma_n_ = 0.0;
    gamma_min_ = 1.0;
  }

 private:
  std::vector<float> gamma_;  // [S, R] of the current mini-batch
  double gamma_sum_ = 0.0, gamma_min_ = 1.0, gamma_n_ = 0.0;  // over the step
};

std::unique_ptr<Algorithm> make_rspo(const LossConfig& cfg) { return std::make_unique<Rspo>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(rspo, {.doc = "token ratio rescaled by the router-shift weight gamma (arXiv 2510.23027)",
                                .create = make_rspo,
                                .metrics = {{"rspo_gamma_mean", 1.0, "mean router-shift weight gamma over the step's tokens"},
                                            {"rspo_gamma_min", 1.0, "smallest gamma of the step"}}});

}  // namespace moerl::rl
