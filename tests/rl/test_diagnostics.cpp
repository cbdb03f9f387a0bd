// Rollout-correction diagnostics (sim/rl/diagnostics.h) against formulas recomputed here, the
// precursor flags' rules (sim/rl/precursors.h) on series whose firings are known, and the
// positions the routing-flip metrics count.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/rng.h"
#include "sim/io/results.h"
#include "sim/rl/diagnostics.h"
#include "sim/rl/precursors.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

TEST(Diagnostics, MatchTheirFormulas) {
  const int S = 7, R = 5;
  Rng rng(rng_derive(11, 5, {}));
  std::vector<float> lold, lroll;
  for (int j = 0; j < S * R; ++j) {
    // log-probs spread over every probability bucket (p from ~1e-4 to ~1)
    const float u = rng.uniform();
    const float base = -9.0f * u * u;
    lold.push_back(base);
    lroll.push_back(base + 0.4f * rng.normal());
  }
  const LossConfig c{.correction_cap = 1.5f, .correction_cap_low = 0.7f, .seq_mask_low = 0.9f, .seq_mask_high = 1.1f,
                     .seq_k3_max = 0.2f};
  const CorrectionDiagnostics d = correction_diagnostics(c, lold.data(), lroll.data(), nullptr, S, R);

  double k1 = 0, k3 = 0, sw = 0, sw2 = 0, qw = 0, qw2 = 0, tis = 0, mis = 0, ice = 0;
  double seq_tis = 0, seq_geo = 0, seq_mis = 0, seq_k3 = 0;
  std::vector<double> cnt(5, 0), absd(5, 0), gt2(5, 0);
  for (int i = 0; i < S; ++i) {
    double sum = 0, mk = 0;
    for (int t = 0; t < R; ++t) {
      const int j = i * R + t;
      const double x = (double)lold[j] - lroll[j], rho = std::exp(x);
      k1 += -x;
      k3 += rho - 1 - x;
      sw += rho;
      sw2 += rho * rho;
      tis += rho > 1.5 || rho < 0.7;
      mis += rho > 1.5;
      ice += rho < 0.5 || rho > 5.0;
      sum += x;
      mk = std::max(mk, rho - 1 - x);
      const double p = std::exp((double)lold[j]);
      const int b = p < 1e-3 ? 0 : p < 1e-2 ? 1 : p < 0.1 ? 2 : p < 0.5 ? 3 : 4;
      cnt[b] += 1;
      absd[b] += std::fabs(x);
      gt2[b] += rho > 2 || rho < 0.5;
    }
    const double q = std::exp(sum), g = std::exp(sum / R);
    qw += q;
    qw2 += q * q;
    seq_tis += q > 1.5;
    seq_geo += g > 1.5;
    seq_mis += g < 0.9 || g > 1.1;
    seq_k3 += mk > 0.2;
  }
  const double n = S * R;
  EXPECT_NEAR(d.k1, k1 / n, 1e-12);
  EXPECT_NEAR(d.k3, k3 / n, 1e-12);
  EXPECT_NEAR(d.chi2_token, n * sw2 / (sw * sw) - 1, 1e-12);
  EXPECT_NEAR(d.chi2_seq, S * qw2 / (qw * qw) - 1, 1e-10);
  EXPECT_NEAR(d.ess_token, sw * sw / (n * sw2), 1e-12);
  EXPECT_NEAR(d.ess_seq, qw * qw / (S * qw2), 1e-12);
  EXPECT_NEAR(d.ess_token, 1 / (1 + d.chi2_token), 1e-12);  // the two views of one spread
  EXPECT_DOUBLE_EQ(d.tis_truncated, tis / n);
  EXPECT_DOUBLE_EQ(d.mis_masked, mis / n);
  EXPECT_DOUBLE_EQ(d.icepop_masked, ice / n);
  EXPECT_DOUBLE_EQ(d.seq_tis_truncated, seq_tis / S);
  EXPECT_DOUBLE_EQ(d.seq_tis_geo_truncated, seq_geo / S);
  EXPECT_DOUBLE_EQ(d.seq_mis_masked, seq_mis / S);
  EXPECT_DOUBLE_EQ(d.seq_max_k3_masked, seq_k3 / S);
  EXPECT_GT(d.tis_truncated, 0);  // the data reach the thresholds
  EXPECT_GT(d.seq_mis_masked, 0);
  EXPECT_LT(d.seq_mis_masked, 1);
  double total = 0;
  for (int b = 0; b < 5; ++b) {
    EXPECT_EQ(d.bucket_tokens[b], cnt[b]) << b;
    EXPECT_GT(cnt[b], 0) << "bucket " << b << " is empty: the data miss it";
    EXPECT_NEAR(d.bucket_abs_log_ratio[b], absd[b] / cnt[b], 1e-12) << b;
    EXPECT_NEAR(d.bucket_ratio_gt2[b], gt2[b] / cnt[b], 1e-12) << b;
    total += d.bucket_tokens[b];
  }
  EXPECT_EQ(total, n);
}

TEST(Diagnostics, IdenticalEnginesGiveTheNeutralValues) {
  const int S = 3, R = 4;
  std::vector<float> lp(S * R, -0.7f);
  const CorrectionDiagnostics d = correction_diagnostics(LossConfig{}, lp.data(), lp.data(), nullptr, S, R);
  EXPECT_EQ(d.k1, 0.0);
  EXPECT_EQ(d.k3, 0.0);
  EXPECT_EQ(d.chi2_token, 0.0);
  EXPECT_EQ(d.chi2_seq, 0.0);
  EXPECT_EQ(d.ess_token, 1.0);
  EXPECT_EQ(d.ess_seq, 1.0);
  EXPECT_EQ(d.seq_mis_masked, 0.0);  // 1 ∈ [0.99, 1.001]
  EXPECT_EQ(d.seq_max_k3_masked, 0.0);
  EXPECT_EQ(d.bucket_tokens[3], S * R);  // p = e^-0.7 ≈ 0.497: bucket [0.1, 0.5)
  EXPECT_TRUE(std::isnan(d.bucket_abs_log_ratio[0]));  // empty buckets have no mean
}

// A series of `n` ones with the last value `x`.
std::vector<double> flat_then(int n, double x) {
  std::vector<double> v(static_cast<size_t>(n), 1.0);
  v.push_back(x);
  return v;
}

TEST(Precursors, RulesFireOnlyPastTheirThresholdsAndAfterAFullWindow) {
  PrecursorConfig c;
  c.window = 4;
  EXPECT_EQ(precursor_fires(c, "pre_k3_rise", flat_then(4, 3.1)), 1.0);
  EXPECT_EQ(precursor_fires(c, "pre_k3_rise", flat_then(4, 2.9)), 0.0);
  EXPECT_EQ(precursor_fires(c, "pre_k3_rise", flat_then(3, 10.0)), 0.0);  // history too short
  EXPECT_EQ(precursor_fires(c, "pre_grad_norm_spike", flat_then(4, 3.5)), 1.0);
  EXPECT_EQ(precursor_fires(c, "pre_grad_norm_drop", flat_then(4, 0.3)), 1.0);
  EXPECT_EQ(precursor_fires(c, "pre_grad_norm_drop", flat_then(4, 0.4)), 0.0);
  EXPECT_EQ(precursor_fires(c, "pre_entropy_spike", flat_then(4, 1.6)), 1.0);
  EXPECT_EQ(precursor_fires(c, "pre_ess_drop", flat_then(4, 0.85)), 1.0);
  EXPECT_EQ(precursor_fires(c, "pre_ess_drop", flat_then(4, 0.95)), 0.0);
  EXPECT_EQ(precursor_fires(c, "pre_length_surge", flat_then(4, 1.6)), 1.0);
  // the clip burst needs both the factor and the absolute floor over a zero median
  std::vector<double> clip(4, 0.0);
  clip.push_back(0.005);
  EXPECT_EQ(precursor_fires(c, "pre_clip_burst", clip), 0.0);
  clip.back() = 0.02;
  EXPECT_EQ(precursor_fires(c, "pre_clip_burst", clip), 1.0);
  // the median, not the mean: one earlier outlier does not raise the bar
  std::vector<double> k3 = {1, 1, 100, 1, 3.5};
  EXPECT_EQ(precursor_fires(c, "pre_k3_rise", k3), 1.0);
  EXPECT_THROW(precursor_fires(c, "pre_nothing", k3), std::invalid_argument);
}

TEST(Precursors, RecordedFromTheSeriesLikeTheCollapseRule) {
  PrecursorConfig c;
  c.window = 3;
  RunResults r;
  const double gn[] = {1.0, 1.1, 0.9, 1.0, 5.0, 1.0};
  for (int s = 0; s < 6; ++s) {
    r.begin_step(s);
    r.set("grad_norm", gn[s]);
    precursors_record(&r, c);
  }
  EXPECT_EQ(*r.series("pre_grad_norm_spike"), (std::vector<double>{0, 0, 0, 0, 1, 0}));
  for (const PrecursorFlag& f : precursor_flags()) ASSERT_NE(r.series(f.name), nullptr) << f.name;
  EXPECT_EQ(*r.series("pre_k3_rise"), std::vector<double>(6, 0.0));  // its source was never set
}

TEST(Precursors, BadThresholdsNameTheirKey) {
  PrecursorConfig c;
  c.grad_norm_drop = 1.5f;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("precursors.grad_norm_drop"), std::string::npos) << e.what();
  }
}

TEST(FlipPositions, AreThePositionsThatScoreTheResponse) {
  // response token r sits at P+r and is scored (log-prob and routing) at position P−1+r
  const int S = 2, P = 3, T = 7;
  const std::vector<uint8_t> m = rl_scored_positions_mask(S, P, T);
  ASSERT_EQ(m.size(), static_cast<size_t>(S * T));
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < T; ++t)
      EXPECT_EQ(m[s * T + t], t >= P - 1 && t <= T - 2 ? 1 : 0) << "seq " << s << " position " << t;
}

}  // namespace
}  // namespace moerl
