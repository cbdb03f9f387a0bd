// Policy losses against an independent computation: each algorithm's value is recomputed here
// from the formulas of docs/algorithms.md (GRPO arXiv 2402.03300, GSPO 2507.18071, RSPO
// 2510.23027, IcePop 2510.18855, TIS/MIS and the sequence-level corrections of verl's rollout
// correction and slime) in plain double arithmetic, and its gradient dLoss/dlogp_new is checked
// against central differences of that independent value.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/rng.h"
#include "sim/rl/corrections.h"
#include "sim/rl/loss.h"

namespace moerl {
namespace {

// L of seq-mean-token-sum-norm in these tests (a run's rl.max_response_len; longer than R).
constexpr double kNormLen = 12.0;

struct Data {
  int S = 6, R = 9;
  std::vector<float> lnew, lold, lroll, mask, adv, gamma, lref;
  LossBatch batch() const {
    LossBatch b;
    b.S = S; b.R = R;
    b.logp_new = lnew.data(); b.logp_old = lold.data(); b.logp_rollout = lroll.data();
    b.mask = mask.data(); b.advantages = adv.data(); b.gamma = gamma.data(); b.logp_ref = lref.data();
    b.norm_len = kNormLen;
    return b;
  }
};

// Log-probs around −1.5 with ratio spreads that cross the clip bands; ragged masks. roll_spread:
// the spread of log π_rollout around log π_old.
Data make_data(uint64_t seed, double spread, double roll_spread = 0.6) {
  Data d;
  Rng rng(rng_derive(seed, 77, {}));
  const size_t n = static_cast<size_t>(d.S) * d.R;
  for (size_t j = 0; j < n; ++j) {
    const float base = -1.5f + 0.5f * rng.normal();
    d.lold.push_back(base);
    d.lnew.push_back(base + static_cast<float>(spread) * rng.normal());
    d.lroll.push_back(base + static_cast<float>(roll_spread) * rng.normal());
    d.lref.push_back(base + 0.3f * rng.normal());
    d.gamma.push_back(0.3f + 0.7f * rng.uniform());
  }
  for (int i = 0; i < d.S; ++i) {
    const int len = 2 + static_cast<int>(rng.below(d.R - 1));
    for (int t = 0; t < d.R; ++t) d.mask.push_back(t < len ? 1.0f : 0.0f);
    d.adv.push_back(rng.normal());
  }
  d.adv[0] = -1.3f;  // make sure both signs of A occur
  d.adv[1] = 0.9f;
  return d;
}

// ---- the independent reference -------------------------------------------------------------
double clipd(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

double ref_surrogate(double A, double r, const LossConfig& c) {
  double l = std::max(-A * r, -A * clipd(r, 1.0 - c.clip_low, 1.0 + c.clip_high));
  if (c.dual_clip > 0 && A < 0) l = std::min(l, -A * c.dual_clip);
  return l;
}

double ref_weight(const LossConfig& c, Correction k, double rho) {
  if (k == Correction::tis || k == Correction::tis_seq_mis)
    return clipd(rho, (double)c.correction_cap_low, (double)c.correction_cap);
  if (k == Correction::mis) return rho <= c.correction_cap ? rho : 0.0;
  if (k == Correction::icepop) return (rho >= c.icepop_low && rho <= c.icepop_high) ? rho : 0.0;
  return 1.0;
}

// The sequence factor of a sequence-level correction, from sequence i's masked tokens.
double ref_seq_weight(const Data& d, int i, const LossConfig& c, Correction k) {
  double sum = 0, len = 0, max_k3 = 0;
  for (int t = 0; t < d.R; ++t) {
    const int j = i * d.R + t;
    if (!d.mask[j]) continue;
    const double lr = (double)d.lold[j] - d.lroll[j];
    sum += lr;
    len += 1;
    max_k3 = std::max(max_k3, std::exp(lr) - 1 - lr);
  }
  if (len == 0) return 1;
  const double geo = std::exp(sum / len);
  if (k == Correction::seq_tis) return std::min(std::exp(sum), (double)c.correction_cap);
  if (k == Correction::seq_tis_geo) return std::min(geo, (double)c.correction_cap);
  if (k == Correction::seq_mis || k == Correction::tis_seq_mis)
    return geo >= c.seq_mask_low && geo <= c.seq_mask_high ? 1 : 0;
  if (k == Correction::seq_max_k3) return max_k3 <= c.seq_k3_max ? 1 : 0;
  return 1;
}

// lnew as doubles so that finite differences are not limited by float storage.
double ref_loss(const Data& d, const std::vector<double>& lnew, const LossConfig& c) {
  const bool gspo = c.algorithm == "gspo";
  Aggregation agg = gspo ? Aggregation::seq_mean_token_mean : c.aggregation;
  Correction corr = c.algorithm == "icepop" ? Correction::icepop : c.correction;
  double total_tokens = 0, seqs = 0;
  std::vector<double> len(d.S, 0);
  for (int i = 0; i < d.S; ++i) {
    for (int t = 0; t < d.R; ++t) len[i] += d.mask[i * d.R + t];
    total_tokens += len[i];
    seqs += len[i] > 0;
  }
  double loss = 0;
  for (int i = 0; i < d.S; ++i) {
    double seq_sum = 0;
    double mean_lr = 0;
    for (int t = 0; t < d.R; ++t) mean_lr += d.mask[i * d.R + t] * (lnew[i * d.R + t] - d.lold[i * d.R + t]);
    const double s_i = std::exp(std::min(mean_lr / std::max(len[i], 1.0), 10.0));
    const double w_seq = ref_seq_weight(d, i, c, corr);
    for (int t = 0; t < d.R; ++t) {
      const int j = i * d.R + t;
      if (!d.mask[j]) continue;
      double r = gspo ? s_i : std::exp(lnew[j] - d.lold[j]);
      if (c.algorithm == "rspo") r *= d.gamma[j];
      const double rho = std::exp((double)d.lold[j] - d.lroll[j]);
      LossConfig cc = c;
      if (gspo) cc.dual_clip = 0;
      double term = ref_weight(c, corr, rho) * w_seq * ref_surrogate(d.adv[i], r, cc);
      if (c.kl_coef > 0) {
        const double x = d.lref[j] - lnew[j];
        term += c.kl_coef * (std::exp(x) - x - 1);
      }
      seq_sum += term;
    }
    if (agg == Aggregation::token_mean) loss += seq_sum / total_tokens;
    if (agg == Aggregation::seq_mean_token_mean && len[i] > 0) loss += seq_sum / len[i] / seqs;
    if (agg == Aggregation::seq_mean_token_sum) loss += seq_sum / seqs;
    if (agg == Aggregation::seq_mean_token_sum_norm) loss += seq_sum / seqs / kNormLen;
  }
  return loss;
}

// Checks value and gradient; returns the output for further checks.
LossOutput check(const Data& d, const LossConfig& c) {
  LossOutput out;
  algorithm_create(c)->loss(&out, d.batch());
  std::vector<double> lnew(d.lnew.begin(), d.lnew.end());
  const double ref = ref_loss(d, lnew, c);
  EXPECT_NEAR(out.loss, ref, 1e-9 * (1 + std::fabs(ref))) << c.algorithm;
  int compared = 0;
  for (size_t j = 0; j < lnew.size(); ++j) {
    const double h = 1e-6;
    std::vector<double> p = lnew, m = lnew;
    p[j] += h; m[j] -= h;
    const double lp = ref_loss(d, p, c), lm = ref_loss(d, m, c);
    const double fwd = (lp - ref) / h, bwd = (ref - lm) / h;
    if (std::fabs(fwd - bwd) > 1e-4 * (1 + std::fabs(fwd))) continue;  // a kink (clip boundary)
    EXPECT_NEAR(out.dlogp[j], (lp - lm) / (2 * h), 1e-5 * (1 + std::fabs(fwd))) << c.algorithm << " token " << j;
    ++compared;
  }
  EXPECT_GT(compared, static_cast<int>(lnew.size()) / 2);
  return out;
}

TEST(Losses, GrpoAllAggregationsAndDualClip) {
  const Data d = make_data(1, 0.3);
  for (Aggregation agg : {Aggregation::token_mean, Aggregation::seq_mean_token_mean,
                          Aggregation::seq_mean_token_sum}) {
    LossConfig c;
    c.aggregation = agg;
    const LossOutput o = check(d, c);
    EXPECT_GT(o.clipped_tokens, 0);  // the spread reaches outside [0.8, 1.2]
    c.dual_clip = 1.5f;
    check(d, c);
  }
}

// Every aggregation on responses of unequal lengths (the ragged masks of make_data), under the
// three algorithms whose ratios differ: value and gradient against the reference (GSPO forces
// seq-mean-token-mean, whatever is asked).
TEST(Losses, EveryAggregationOnUnequalLengthsUnderGrpoGspoRspo) {
  const Data d = make_data(11, 0.3);
  int lengths_differ = 0;
  for (int i = 1; i < d.S; ++i)
    for (int t = 0; t < d.R; ++t) lengths_differ += d.mask[i * d.R + t] != d.mask[t];
  ASSERT_GT(lengths_differ, 0);
  for (const char* algo : {"grpo", "gspo", "rspo"})
    for (Aggregation agg : {Aggregation::token_mean, Aggregation::seq_mean_token_mean, Aggregation::seq_mean_token_sum,
                            Aggregation::seq_mean_token_sum_norm}) {
      SCOPED_TRACE(std::string(algo) + " / " + aggregation_name(agg));
      LossConfig c;
      c.algorithm = algo;
      c.aggregation = agg;
      check(d, c);
    }
}

// The four aggregations by hand: two responses of 1 and 3 tokens, ratio 1 everywhere (so each
// token's loss is −A and its gradient −A, inside the clip band), A = +1 and −1, L = 4.
TEST(Losses, AggregationsByHandOnTwoLengths) {
  const std::vector<float> lp = {-1.0f, 0.0f, 0.0f, -0.5f, -0.7f, -0.2f};
  const std::vector<float> mask = {1, 0, 0, 1, 1, 1}, adv = {1.0f, -1.0f};
  LossBatch b;
  b.S = 2; b.R = 3;
  b.logp_new = b.logp_old = b.logp_rollout = lp.data();
  b.mask = mask.data();
  b.advantages = adv.data();
  b.norm_len = 4.0;
  struct Case {
    Aggregation agg;
    double loss, g0, g1;  // the loss, the gradient at the short response's token and at the long one's
  };
  // token-mean (−1 + 3)/4; seq-mean-token-mean (−1/1 + 3/3)/2; seq-mean-token-sum (−1 + 3)/2;
  // seq-mean-token-sum-norm (−1 + 3)/(2·4)
  const Case cases[] = {{Aggregation::token_mean, 0.5, -0.25, 0.25},
                        {Aggregation::seq_mean_token_mean, 0.0, -0.5, 1.0 / 6},
                        {Aggregation::seq_mean_token_sum, 1.0, -0.5, 0.5},
                        {Aggregation::seq_mean_token_sum_norm, 0.25, -0.125, 0.125}};
  for (const char* algo : {"grpo", "gspo", "rspo"})
    for (const Case& k : cases) {
      if (std::string(algo) == "gspo" && k.agg != Aggregation::seq_mean_token_mean) continue;  // forced
      SCOPED_TRACE(std::string(algo) + " / " + aggregation_name(k.agg));
      LossConfig c;
      c.algorithm = algo;
      c.aggregation = k.agg;
      LossOutput o;
      algorithm_create(c)->loss(&o, b);
      EXPECT_NEAR(o.loss, k.loss, 1e-12);
      EXPECT_NEAR(o.dlogp[0], k.g0, 1e-7);
      for (int t = 3; t < 6; ++t) EXPECT_NEAR(o.dlogp[t], k.g1, 1e-7);
      EXPECT_EQ(o.dlogp[1], 0.0f);  // past the short response's end
      EXPECT_EQ(o.dlogp[2], 0.0f);
      EXPECT_EQ(o.tokens, 4.0);
    }
}

TEST(Losses, TisAndMisCorrections) {
  const Data d = make_data(2, 0.2);
  for (Correction k : {Correction::tis, Correction::mis}) {
    LossConfig c;
    c.correction = k;
    const LossOutput o = check(d, c);
    for (size_t j = 0; j < d.lnew.size(); ++j) {
      if (!d.mask[j]) continue;
      const double rho = std::exp((double)d.lold[j] - d.lroll[j]);
      EXPECT_FLOAT_EQ(o.weight[j], static_cast<float>(ref_weight(c, k, rho)));
    }
    if (k == Correction::mis) EXPECT_GT(o.masked_tokens, 0);
  }
}

// Every sequence-level correction, alone and under GSPO and RSPO: value and gradient against the
// independent implementation, one weight per sequence, and both outcomes of each threshold.
TEST(Losses, SequenceLevelCorrections) {
  // log π_rollout within ~±0.01 of log π_old; for this seed the six sequences have geometric
  // means 1.00148, 0.99909, 1.00119, 0.99816, 1.00141, 0.99945, products 1.0134, 0.9973, 1.0096,
  // 0.9945, 1.0070, 0.9973 and max token k3 1.9e-4, 5.6e-5, 1.5e-4, 3.5e-5, 1.4e-4, 4.5e-5, so
  // each threshold below keeps some sequences and changes others
  const Data d = make_data(7, 0.2, 0.01);
  for (Correction k : {Correction::seq_tis, Correction::seq_tis_geo, Correction::seq_mis, Correction::tis_seq_mis,
                       Correction::seq_max_k3}) {
    for (const char* algo : {"grpo", "gspo", "rspo"}) {
      // GSPO's token form gives token j the gradient w_j·s_i·∇logp_j, which equals the
      // sequence-level objective's only when w is constant over the sequence: tis+seq-mis's
      // token part is not (its GSPO value still matches, its gradient is the token form's)
      if (k == Correction::tis_seq_mis && std::string(algo) == "gspo") continue;
      LossConfig c;
      c.algorithm = algo;
      c.correction = k;
      c.correction_cap = 1.0013f;       // truncates some products / geometric means, not all
      c.correction_cap_low = 0.995f;    // tis+seq-mis: the lower truncation too
      c.seq_mask_low = 0.9985f;
      c.seq_mask_high = 1.0013f;
      c.seq_k3_max = 1e-4f;
      SCOPED_TRACE(std::string(correction_name(k)) + " / " + algo);
      const LossOutput o = check(d, c);
      int changed = 0, kept = 0;
      for (int i = 0; i < d.S; ++i) {
        const double ws = ref_seq_weight(d, i, c, k);
        (k == Correction::seq_tis || k == Correction::seq_tis_geo ? ws < (double)c.correction_cap : ws == 1.0) ? ++kept : ++changed;
        for (int t = 0; t < d.R; ++t) {
          const int j = i * d.R + t;
          if (!d.mask[j]) continue;
          const double rho = std::exp((double)d.lold[j] - d.lroll[j]);
          EXPECT_NEAR(o.weight[j], ref_weight(c, k, rho) * ws, 1e-6) << "token " << j;
        }
      }
      EXPECT_GT(changed, 0);  // the threshold bites on some sequence ...
      EXPECT_GT(kept, 0);     // ... and not on every one
      if (k == Correction::seq_mis || k == Correction::seq_max_k3 || k == Correction::tis_seq_mis)
        EXPECT_GT(o.masked_tokens, 0);
    }
  }
}

TEST(Losses, SequenceMaskDropsWholeSequencesButKeepsThemInDenominators) {
  Data d = make_data(8, 0.2, 0.0);  // π_rollout = π_old: every sequence passes ...
  for (int t = 0; t < d.R; ++t) d.lroll[2 * d.R + t] = d.lold[2 * d.R + t] - 0.1f;  // ... but sequence 2
  LossConfig c;
  c.correction = Correction::seq_mis;
  const LossOutput o = check(d, c);
  double total = 0, tokens = 0;
  for (int t = 0; t < d.R; ++t) {
    EXPECT_EQ(o.dlogp[2 * d.R + t], 0.0f);
    EXPECT_EQ(o.term[2 * d.R + t], 0.0f);
  }
  for (size_t j = 0; j < d.lnew.size(); ++j) { total += d.mask[j] * o.term[j]; tokens += d.mask[j]; }
  EXPECT_NEAR(o.loss, total / tokens, 1e-6 * std::fabs(o.loss));
  LossConfig none;
  LossOutput plain;
  algorithm_create(none)->loss(&plain, d.batch());
  for (int i = 0; i < d.S; ++i)  // the other sequences are untouched (weight exactly 1)
    for (int t = 0; t < d.R && i != 2; ++t) EXPECT_EQ(o.dlogp[i * d.R + t], plain.dlogp[i * d.R + t]);
}

TEST(Losses, SequenceTisUsesTheProductAndItsGeometricFormTheMean) {
  Data d = make_data(9, 0.2, 0.0);
  for (int i = 0; i < d.S; ++i)
    for (int t = 0; t < d.R; ++t) d.lroll[i * d.R + t] = d.lold[i * d.R + t] - 0.05f;  // ρ_t = e^0.05
  for (Correction k : {Correction::seq_tis, Correction::seq_tis_geo}) {
    LossConfig c;
    c.correction = k;
    c.correction_cap = 100.0f;  // no truncation
    const LossOutput o = check(d, c);
    for (int i = 0; i < d.S; ++i) {
      double len = 0;
      for (int t = 0; t < d.R; ++t) len += d.mask[i * d.R + t];
      const double expect = k == Correction::seq_tis ? std::exp(0.05 * len) : std::exp(0.05);
      EXPECT_NEAR(o.weight[i * d.R], expect, 1e-5 * expect) << correction_name(k) << " seq " << i;
    }
  }
}

TEST(Losses, TokenTisLowerTruncation) {
  const Data d = make_data(10, 0.2);
  LossConfig c;
  c.correction = Correction::tis;
  c.correction_cap = 1.5f;
  c.correction_cap_low = 0.5f;  // Miles: [0.5, 1.5]
  const LossOutput o = check(d, c);
  int low = 0;
  for (size_t j = 0; j < d.lnew.size(); ++j)
    if (d.mask[j]) {
      EXPECT_GE(o.weight[j], 0.5f);
      EXPECT_LE(o.weight[j], 1.5f);
      low += o.weight[j] == 0.5f;
    }
  EXPECT_GT(low, 0);
}

// Every row of the correction table, not a hand-kept list: a new correction fails here until the
// reference above knows its weight.
TEST(Losses, EveryCorrectionOfTheTableMatchesTheReference) {
  const Data d = make_data(4, 0.2);
  ASSERT_EQ(rl::correction_registry().size(), static_cast<size_t>(kCorrectionCount));
  for (const rl::CorrectionInfo& k : rl::correction_registry()) {
    SCOPED_TRACE(correction_name(k.kind));
    LossConfig c;
    c.correction = k.kind;
    c.correction_cap = 1.2f;
    c.seq_mask_low = 0.9f;
    c.seq_mask_high = 1.1f;
    check(d, c);
  }
}

TEST(Losses, CorrectionNamesRoundTrip) {
  for (int i = 0; i < kCorrectionCount; ++i) {
    Correction c = Correction::none;
    ASSERT_TRUE(correction_parse(correction_name(static_cast<Correction>(i)), &c)) << i;
    EXPECT_EQ(static_cast<int>(c), i);
  }
  Correction c;
  EXPECT_FALSE(correction_parse("seq_mis", &c));
}

TEST(Losses, GspoTokenFormEqualsSequenceLevelObjective) {
  const Data d = make_data(3, 0.01);
  LossConfig c;
  c.algorithm = "gspo";
  c.clip_low = 3e-4f;
  c.clip_high = 4e-4f;
  const LossOutput o = check(d, c);  // value and gradient vs the sequence-level formula above
  // every token of a sequence carries the same ratio s_i
  for (int i = 0; i < d.S; ++i)
    for (int t = 1; t < d.R; ++t)
      if (d.mask[i * d.R + t]) EXPECT_EQ(o.ratio[i * d.R + t], o.ratio[i * d.R]);
  EXPECT_GT(o.clipped_tokens, 0);  // with |log s| ~ 1e-2 ≫ 4e-4, most sequences clip
}

TEST(Losses, IcepopMasksOutOfBandTokensButKeepsThemInDenominators) {
  Data d = make_data(4, 0.2);
  d.lroll[3] = d.lold[3] + 2.0f;   // ρ = e^-2 < 0.5: masked
  d.lroll[5] = d.lold[5] - 2.0f;   // ρ = e^2 ≈ 7.4 > 5: masked
  d.mask[3] = d.mask[5] = 1.0f;
  LossConfig c;
  c.algorithm = "icepop";
  const LossOutput o = check(d, c);
  EXPECT_EQ(o.dlogp[3], 0.0f);
  EXPECT_EQ(o.dlogp[5], 0.0f);
  EXPECT_EQ(o.term[3], 0.0f);
  EXPECT_GE(o.masked_tokens, 2);
  // denominators: the loss is Σ of in-band terms over ALL masked tokens
  double total = 0, tokens = 0;
  for (size_t j = 0; j < d.lnew.size(); ++j) { total += d.mask[j] * o.term[j]; tokens += d.mask[j]; }
  EXPECT_NEAR(o.loss, total / tokens, 1e-6 * std::fabs(o.loss));  // terms are stored as float
}

TEST(Losses, RspoScalesTheRatioBeforeClippingAndReducesToGrpoAtGammaOne) {
  Data d = make_data(5, 0.2);
  LossConfig c;
  c.algorithm = "rspo";
  check(d, c);
  std::fill(d.gamma.begin(), d.gamma.end(), 1.0f);
  LossOutput rspo, grpo;
  algorithm_create(c)->loss(&rspo, d.batch());
  LossConfig g;
  algorithm_create(g)->loss(&grpo, d.batch());
  EXPECT_EQ(rspo.loss, grpo.loss);
  EXPECT_EQ(rspo.dlogp, grpo.dlogp);
}

TEST(Losses, K3KlToReference) {
  const Data d = make_data(6, 0.1);
  LossConfig c;
  c.kl_coef = 0.3f;
  const LossOutput o = check(d, c);
  EXPECT_GT(o.kl_loss, 0.0);
}

TEST(Losses, UnknownAlgorithmIsRejectedWithItsName) {
  LossConfig c;
  c.algorithm = "ppo2";
  try {
    algorithm_create(c);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ppo2"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gspo"), std::string::npos);
  }
}

}  // namespace
}  // namespace moerl
