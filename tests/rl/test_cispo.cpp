// CISPO (sim/rl/cispo.cpp, MiniMax-M1 arXiv 2506.13585): ℓ = −sg[clip(r, 1 − ε_low, 1 + ε_high)]·A·
// logp_new, token-mean; every token keeps a gradient. Value and gradient on three hand-computed
// tokens, and random tokens against central differences with the weight held.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loss_tokens.h"
#include "sim/rl/registry.h"
#include "sim/scenario/scenario.h"

namespace moerl {
namespace {

LossConfig cispo_config(const std::vector<std::string>& sets = {}) { return test::loss_config("cispo", sets); }

// Three tokens of two sequences, token-mean over 3:
//   (r = e^0.25 = 1.284 → 1.2, A = 1, logp −0.75), (r = e^−0.5 = 0.607, no lower bound, A = 1,
//   logp −2.5), (r = e^0.125 = 1.133, A = −2, logp −0.375);
// by hand: ℓ = 1.2·0.75 + e^−0.5·2.5 − e^0.125·2·0.375, loss = ℓ/3; dlogp = −w·A/3:
//   −0.4, −e^−0.5/3, +e^0.125·2/3.
TEST(Cispo, ThreeTokensByHandAndEveryTokenKeepsAGradient) {
  test::Tokens d;
  d.S = 2;
  d.R = 2;
  d.lold = {-1.0f, -2.0f, -0.5f, -1.0f};
  d.lnew = {-0.75f, -2.5f, -0.375f, -1.0f};
  d.lroll = d.lold;
  d.mask = {1, 1, 1, 0};
  d.adv = {1.0f, -2.0f};
  const double e = std::exp(1.0);
  const LossConfig c = cispo_config();
  EXPECT_EQ(c.clip_low, 1.0f);  // no lower bound
  EXPECT_EQ(c.clip_high, 0.2f);
  EXPECT_EQ(c.aggregation, Aggregation::token_mean);
  LossOutput out;
  algorithm_create(c)->loss(&out, d.batch());
  EXPECT_NEAR(out.loss, (1.2 * 0.75 + std::pow(e, -0.5) * 2.5 - std::pow(e, 0.125) * 2 * 0.375) / 3, 1e-7);
  EXPECT_NEAR(out.dlogp[0], -1.2 / 3, 1e-7);
  EXPECT_NEAR(out.dlogp[1], -std::pow(e, -0.5) / 3, 1e-7);
  EXPECT_NEAR(out.dlogp[2], std::pow(e, 0.125) * 2 / 3, 1e-7);
  EXPECT_EQ(out.dlogp[3], 0.0f);
  EXPECT_EQ(out.clipped_tokens, 1.0);  // the weight was clipped, the gradient kept
  // a lower bound when asked for: 1 − 0.2 = 0.8
  algorithm_create(cispo_config({"rl.clip_low=0.2"}))->loss(&out, d.batch());
  EXPECT_NEAR(out.dlogp[1], -0.8 / 3, 1e-7);
  EXPECT_EQ(out.clipped_tokens, 2.0);
}

double cispo_value(const test::Tokens& d, const std::vector<double>& lnew, const LossConfig& c) {
  double tokens = 0, loss = 0;
  for (float m : d.mask) tokens += m;
  for (int i = 0; i < d.S; ++i)
    for (int t = 0; t < d.R; ++t) {
      const int j = i * d.R + t;
      if (!d.mask[j]) continue;
      const double r = std::exp((double)d.lnew[j] - d.lold[j]);  // held
      const double w = std::min(std::max(r, 1.0 - c.clip_low), 1.0 + c.clip_high);
      loss += -w * d.adv[i] * lnew[j] / tokens;
    }
  return loss;
}

TEST(Cispo, GradientMatchesCentralDifferencesWithTheWeightHeld) {
  const test::Tokens d = test::random_tokens(13);
  for (const auto& sets : std::vector<std::vector<std::string>>{{}, {"rl.clip_low=0.2", "rl.clip_high=0.28"}}) {
    const LossConfig c = cispo_config(sets);
    LossOutput out;
    algorithm_create(c)->loss(&out, d.batch());
    EXPECT_GT(out.clipped_tokens, 0.0);
    test::expect_gradient_matches(d, out, [&](const std::vector<double>& l) { return cispo_value(d, l, c); });
  }
}

}  // namespace
}  // namespace moerl
