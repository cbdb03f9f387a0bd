// icepop.cpp — IcePop (Ring-1T form, arXiv 2510.18855): GRPO's token surrogate weighted by
//   M(k) = k·1[α ≤ k ≤ β],  k = π_old/π_rollout (a constant),
// so tokens whose train/inference ratio leaves the band get zero gradient while still counting in
// the aggregation's denominators. Defaults α = 0.5, β = 5. The band is its row's forced correction
// (Correction::icepop), so the loss is GRPO's (grpo.h); this class adds the masked share.
#include "sim/io/results.h"
#include "sim/rl/grpo.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

namespace {
class Icepop final : public Grpo {
 public:
  explicit Icepop(const LossConfig& c) : Grpo(c, "icepop") {}
  void observe(const LossOutput& out) override {
    masked_ += out.masked_tokens;
    tokens_ += out.tokens;
  }
  void record(RunResults* res) override {
    res->set("icepop_masked_frac", tokens_ > 0 ? masked_ / tokens_ : 0.0);
    masked_ = tokens_ = 0.0;
  }

 private:
  double masked_ = 0.0, tokens_ = 0.0;  // over the step's mini-batches
};

std::unique_ptr<Algorithm> make_icepop(const LossConfig& cfg) { return std::make_unique<Icepop>(cfg); }
}  // namespace

MOERL_REGISTER_ALGORITHM(icepop, {.doc = "grpo with tokens whose pi_old/pi_rollout leaves [alpha, beta] masked (arXiv 2510.18855)",
                                  .create = make_icepop,
                                  .correction = Correction::icepop,
                                  .metrics = {{"icepop_masked_frac", 0.0, "share of tokens the IcePop band masked"}}});

}  // namespace moerl::rl
