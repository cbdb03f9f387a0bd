// MiniRL (sim/rl/minirl.cpp, arXiv 2512.01374 eq. 7): ℓ = −M·sg[min(ρ, 5)·r]·A·logp_new with the
// decoupled-PPO mask M (ε_low 0.2, ε_high 0.27), token sums per sequence averaged over sequences;
// its value and gradient on four hand-computed tokens, the paper's variants by their keys, and
// random tokens against central differences with the stop-gradient weights held.
#include <gtest/gtest.h>

#include <cmath>

#include "loss_tokens.h"
#include "sim/rl/registry.h"
#include "sim/scenario/scenario.h"

namespace moerl {
namespace {

// The loss config of a scenario with rl.algorithm = minirl: the row's defaults resolved.
LossConfig minirl_config(const std::vector<std::string>& sets = {}) { return test::loss_config("minirl", sets); }

// Four tokens (the lowest of each pair masked by M):
//   seq 0, A = +0.5: t0 r = e^0.25 = 1.284 > 1.27 → M = 0; t1 r = e^0.125, ρ = e^2 = 7.39 → 5 (truncated)
//   seq 1, A = −1.5: t0 r = e^−0.25 = 0.779 < 0.8 → M = 0; t1 r = e^−0.125, ρ = e^−0.5
// By hand: ℓ(0,1) = −5·e^0.125·0.5·(−1.875), g(0,1) = −5·e^0.125·0.5 = −2.8328711326670656;
//          ℓ(1,1) = −e^−0.5·e^−0.125·(−1.5)·(−1.625), g(1,1) = e^−0.625·1.5 = 0.80289214277848542;
// seq-mean-token-sum over 2 sequences: loss = (ℓ(0,1) + ℓ(1,1))/2 = 2.0034668208678545,
// dlogp = g/2 = −1.4164355663335328 and 0.40144607138924271.
test::Tokens four_tokens() {
  test::Tokens d;
  d.S = 2;
  d.R = 2;
  d.lold = {-1.0f, -2.0f, -0.5f, -1.5f};
  d.lnew = {-0.75f, -1.875f, -0.75f, -1.625f};
  d.lroll = {-1.0f, -4.0f, -0.5f, -1.0f};
  d.mask = {1, 1, 1, 1};
  d.adv = {0.5f, -1.5f};
  return d;
}

TEST(Minirl, DefaultsAreThePapers) {
  const Scenario s = Scenario::defaults({"rl.algorithm=minirl"});
  EXPECT_EQ(s.rl.loss.clip_low, 0.2f);
  EXPECT_EQ(s.rl.loss.clip_high, 0.27f);
  EXPECT_EQ(s.rl.loss.aggregation, Aggregation::seq_mean_token_sum);
  EXPECT_EQ(s.rl.loss.correction, Correction::tis);
  EXPECT_EQ(s.rl.loss.correction_cap, 5.0f);
  EXPECT_EQ(s.rl.loss.correction_cap_low, 0.0f);
  EXPECT_FALSE(s.rl.adv_std_norm);  // Â = R − mean(R), forced
  EXPECT_EQ(s.rl.loss.param("minirl_mask"), 1.0f);
  EXPECT_EQ(s.rl.old_logprobs, OldLogprobs::recompute);  // π_old: the train engine's recompute
}

TEST(Minirl, FourTokensByHand) {
  const test::Tokens d = four_tokens();
  LossOutput out;
  algorithm_create(minirl_config())->loss(&out, d.batch());
  EXPECT_NEAR(out.loss, 2.0034668208678545, 1e-12);
  EXPECT_EQ(out.dlogp[0], 0.0f);
  EXPECT_NEAR(out.dlogp[1], -1.4164355663335328, 1e-6);
  EXPECT_EQ(out.dlogp[2], 0.0f);
  EXPECT_NEAR(out.dlogp[3], 0.40144607138924271, 1e-6);
  EXPECT_EQ(out.clipped_tokens, 2.0);  // the masked tokens are clip_frac's
  EXPECT_EQ(out.tokens, 4.0);
}

TEST(Minirl, ThePapersVariantsAreKeys) {
  const test::Tokens d = four_tokens();
  const double e = std::exp(1.0);
  LossOutput out;
  // with length normalisation (1/|y|): each sequence's sum over its 2 tokens
  algorithm_create(minirl_config({"rl.aggregation=seq-mean-token-mean"}))->loss(&out, d.batch());
  EXPECT_NEAR(out.loss, 2.0034668208678545 / 2, 1e-12);
  EXPECT_NEAR(out.dlogp[1], -1.4164355663335328 / 2, 1e-6);
  // without the train–inference IS weight: w = 1, the weight is π_θ/π_old alone
  algorithm_create(minirl_config({"rl.correction=none"}))->loss(&out, d.batch());
  EXPECT_NEAR(out.dlogp[1], -std::pow(e, 0.125) * 0.5 / 2, 1e-6);
  EXPECT_NEAR(out.dlogp[3], std::pow(e, -0.125) * 1.5 / 2, 1e-6);
  // without clipping: every token, masked ones included
  algorithm_create(minirl_config({"rl.minirl_mask=false"}))->loss(&out, d.batch());
  EXPECT_NEAR(out.dlogp[0], -1.0 * std::pow(e, 0.25) * 0.5 / 2, 1e-6);  // ρ = 1
  EXPECT_NEAR(out.dlogp[2], 1.0 * std::pow(e, -0.25) * 1.5 / 2, 1e-6);
  EXPECT_EQ(out.clipped_tokens, 0.0);
}

// Independent: weights from the log-probs of the run (held), log π_θ from `lnew`.
double minirl_value(const test::Tokens& d, const std::vector<double>& lnew, const LossConfig& c) {
  const bool mask = c.param("minirl_mask") != 0;
  double loss = 0, seqs = 0;
  for (int i = 0; i < d.S; ++i) seqs += d.mask[i * d.R] > 0;
  for (int i = 0; i < d.S; ++i)
    for (int t = 0; t < d.R; ++t) {
      const int j = i * d.R + t;
      if (!d.mask[j]) continue;
      const double A = d.adv[i];
      const double r = std::exp((double)d.lnew[j] - d.lold[j]);  // held: the run's log-probs
      const double rho = std::exp((double)d.lold[j] - d.lroll[j]);
      const double w = c.correction == Correction::tis ? std::min(rho, (double)c.correction_cap) : 1.0;
      if (mask && ((A > 0 && r > 1 + c.clip_high) || (A < 0 && r < 1 - c.clip_low))) continue;
      loss += -w * r * A * lnew[j] / seqs;
    }
  return loss;
}

TEST(Minirl, GradientMatchesCentralDifferencesWithTheWeightHeld) {
  const test::Tokens d = test::random_tokens(11);
  for (const auto& sets : std::vector<std::vector<std::string>>{{}, {"rl.correction=none"}, {"rl.minirl_mask=false"}}) {
    const LossConfig c = minirl_config(sets);
    LossOutput out;
    algorithm_create(c)->loss(&out, d.batch());
    EXPECT_GT(out.clipped_tokens, sets.empty() ? 0.0 : -1.0);  // the data reach the mask
    test::expect_gradient_matches(d, out, [&](const std::vector<double>& l) { return minirl_value(d, l, c); });
  }
}

}  // namespace
}  // namespace moerl
