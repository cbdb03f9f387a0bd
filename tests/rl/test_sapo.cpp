// SAPO (sim/rl/sapo.cpp, arXiv 2511.20347): ℓ = −A·(4/τ)·σ(τ(r − 1)), τ = τ_pos for A > 0 and
// τ_neg otherwise; its value and dℓ/dlogp_new on three hand-computed tokens, and on random tokens
// against central differences of an independent evaluation.
#include <gtest/gtest.h>

#include <cmath>

#include "loss_tokens.h"
#include "sim/rl/corrections.h"
#include "sim/rl/registry.h"

namespace moerl {
namespace {

LossConfig sapo_config() {
  LossConfig c;
  c.algorithm = "sapo";
  c.aggregation = Aggregation::seq_mean_token_mean;  // the row's default (a scenario key)
  return c;
}

// Two sequences: (r = e^0.25, A = 1), (r = e^−0.125, A = 1); (r = e^0.5, A = −2), one masked token.
// seq-mean-token-mean: scale 1/(2·2) on the first sequence's tokens, 1/(1·2) on the second's.
// By hand (τ_pos = 1, τ_neg = 1.05 as a float, 1.0499999523162842; a calculator's 17 digits):
//   σ(e^0.25 − 1) = 0.57053283093442080  ℓ = −4σ = −2.2821313237376830  g = −4σ(1−σ)·r = −1.2584739259971243
//   σ(e^−0.125 − 1) = 0.47065797826702610  ℓ = −1.8826319130681044  g = −0.87945774478652160
//   σ(τ_neg·(e^0.5 − 1)) = 0.66399694654460795  ℓ = +2·4/τ_neg·σ = 5.0590245843713850  g = +2·4σ(1−σ)·r = 2.9427036928982200
//   loss = (ℓ1 + ℓ2)/4 + ℓ3/2 = 1.4883214829842457
TEST(Sapo, ThreeTokensByHand) {
  test::Tokens d;
  d.S = 2;
  d.R = 2;
  d.lold = {-1.0f, -2.0f, -0.5f, -1.0f};
  d.lnew = {-0.75f, -2.125f, 0.0f, -3.0f};
  d.lroll = d.lold;
  d.mask = {1, 1, 1, 0};
  d.adv = {1.0f, -2.0f};
  LossOutput out;
  algorithm_create(sapo_config())->loss(&out, d.batch());
  EXPECT_NEAR(out.loss, 1.4883214829842457, 1e-12);
  EXPECT_NEAR(out.dlogp[0], -1.2584739259971243 / 4, 1e-7);  // dlogp is float: ~1e-7 relative
  EXPECT_NEAR(out.dlogp[1], -0.87945774478652160 / 4, 1e-7);
  EXPECT_NEAR(out.dlogp[2], 2.9427036928982200 / 2, 1e-7);
  EXPECT_EQ(out.dlogp[3], 0.0f);
  EXPECT_EQ(out.clipped_tokens, 0.0);  // nothing is clipped
  EXPECT_EQ(out.tokens, 3.0);
  // at r = 1 the gate's gradient is GRPO's, −A, whatever τ
  test::Tokens on = d;
  on.lnew = on.lold;
  algorithm_create(sapo_config())->loss(&out, on.batch());
  EXPECT_NEAR(out.dlogp[0], -1.0 / 4, 1e-7);
  EXPECT_NEAR(out.dlogp[2], 2.0 / 2, 1e-7);
}

double sapo_value(const test::Tokens& d, const std::vector<double>& lnew, const LossConfig& c) {
  const double tau_pos = c.param("sapo_tau_pos"), tau_neg = c.param("sapo_tau_neg");
  double loss = 0, seqs = 0;
  for (int i = 0; i < d.S; ++i) seqs += d.mask[i * d.R] > 0;
  for (int i = 0; i < d.S; ++i) {
    double sum = 0, len = 0;
    for (int t = 0; t < d.R; ++t) {
      const int j = i * d.R + t;
      if (!d.mask[j]) continue;
      const double A = d.adv[i], tau = A > 0 ? tau_pos : tau_neg;
      const double rho = std::exp((double)d.lold[j] - d.lroll[j]);
      const double w = c.correction == Correction::tis ? std::min(rho, (double)c.correction_cap) : 1.0;
      sum += w * -A * 4 / tau / (1 + std::exp(-tau * (std::exp(lnew[j] - d.lold[j]) - 1)));
      len += 1;
    }
    loss += sum / len / seqs;
  }
  return loss;
}

TEST(Sapo, GradientMatchesCentralDifferencesWithAndWithoutTis) {
  const test::Tokens d = test::random_tokens(5, 6, 9, 0.6);
  for (Correction k : {Correction::none, Correction::tis}) {
    LossConfig c = sapo_config();
    c.correction = k;
    c.params["sapo_tau_pos"] = 0.7f;  // both temperatures away from their defaults
    c.params["sapo_tau_neg"] = 2.5f;
    LossOutput out;
    algorithm_create(c)->loss(&out, d.batch());
    test::expect_gradient_matches(d, out, [&](const std::vector<double>& l) { return sapo_value(d, l, c); });
  }
}

TEST(Sapo, LargerNegativeTemperatureDecaysTheGradientFaster) {
  // one token with A < 0 at r = e^0.5: its gradient weight 4σ(1−σ)·r falls as τ_neg grows
  test::Tokens d;
  d.S = 1;
  d.R = 1;
  d.lold = {-1.0f};
  d.lnew = {-0.5f};
  d.lroll = d.lold;
  d.mask = {1};
  d.adv = {-1.0f};
  double prev = INFINITY;
  for (float tau : {0.5f, 1.05f, 2.0f, 4.0f}) {
    LossConfig c = sapo_config();
    c.params["sapo_tau_neg"] = tau;
    LossOutput out;
    algorithm_create(c)->loss(&out, d.batch());
    EXPECT_LT(out.dlogp[0], prev) << tau;
    prev = out.dlogp[0];
  }
}

}  // namespace
}  // namespace moerl
