// grpo.h — GRPO's token-level clipped surrogate (arXiv 2402.03300) as a class the variants built
// on it extend: icepop adds its masked-share metric (the band mask is its row's forced
// correction), rspo rescales the ratio by its router-shift weight γ (gamma()). `r3` is this loss
// with a routing choice: a row alone (sim/rl/r3.cpp).
#pragma once

#include "sim/rl/policy_loss.h"

namespace moerl::rl {

class Grpo : public Algorithm {
 public:
  explicit Grpo(const LossConfig& c, const char* name = "grpo") : c_(c), name_(name) {}
  const char* name() const override { return name_; }
  // policy_loss over γ·r with the run's aggregation and correction (c.correction).
  void loss(LossOutput* out, const LossBatch& b) const override;
  // The token ratio with b.gamma (RSPO's γ; null: 1), the run's aggregation and correction.
  bool device_form(PolicyLossParams* p, Aggregation* agg) const override;

 protected:
  // γ of token (i, t): 1 for GRPO.
  virtual double gamma(const LossBatch& b, int i, int t) const;
  LossConfig c_;

 private:
  const char* name_;
};

}  // namespace moerl::rl
