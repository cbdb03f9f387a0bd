// test_loss_device.cpp — the policy loss where the log-probs are (the policy_loss_rows op,
// kernels/cuda/hd/policy_loss.h) against sim/rl's own implementation of every algorithm
// (Algorithm::loss, whose gradients tests/rl/test_losses.cpp checks by finite differences): on
// the CPU the two agree bit for bit — gradient, ratio, weight, per-token term and every total —
// for each algorithm with a device form, each correction, each aggregation, with and without the
// k3 KL and the dual clip, with the log-probs in a packed row layout and the mini-batch's inputs
// read from step-wide arrays through a permutation. Then whole RL steps on the test device, whose
// loss runs through the op, against the CPU backend's, whose loss is sim/rl's: the same
// parameters and metrics after two steps, for each algorithm.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/rng.h"
#include "kernels/test_device.h"
#include "loss_tokens.h"
#include "models/model.h"
#include "rl_fixture.h"
#include "sim/io/results.h"
#include "sim/rl/corrections.h"
#include "sim/rl/loss.h"
#include "sim/rl/ppo_terms.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

// One mini-batch of S sequences drawn (seq) from a step of S_step, their response log-probs in
// packed rows (each sequence a prompt of P positions, then its own length).
struct Batch {
  int S = 11, R = 9, S_step = 19, P = 4;
  std::vector<float> old_lp, roll, mask, ref, adv;  // step-wide [S_step, R], [S_step]
  std::vector<int32_t> seq, len, new_row;
  std::vector<float> logp_new_rows;                 // packed
  std::vector<float> gamma;                         // [S, R]
  // the host loss's [S, R] views
  std::vector<float> h_new, h_old, h_roll, h_mask, h_ref, h_adv;

  explicit Batch(uint64_t seed, float spread) {
    Rng g(seed);
    const auto normal = [&](float sd) { return g.normal() * sd; };
    old_lp.resize(static_cast<size_t>(S_step) * R);
    roll.resize(old_lp.size());
    ref.resize(old_lp.size());
    mask.assign(old_lp.size(), 0.0f);
    adv.resize(S_step);
    std::vector<int32_t> step_len(S_step);
    for (int s = 0; s < S_step; ++s) {
      step_len[s] = s % 6 == 2 ? 0 : 1 + static_cast<int>(g.uniform_double() * R) % R;  // some fully masked
      adv[s] = normal(1.0f);
      for (int t = 0; t < R; ++t) {
        const size_t j = static_cast<size_t>(s) * R + t;
        old_lp[j] = -0.2f + normal(0.8f) - 0.5f;
        roll[j] = old_lp[j] + normal(spread);
        ref[j] = old_lp[j] + normal(0.3f);
        if (t < step_len[s]) mask[j] = 1.0f;
      }
    }
    seq.resize(S);
    for (int i = 0; i < S; ++i) seq[i] = (i * 7 + 5) % S_step;
    int rows = 0;
    for (int i = 0; i < S; ++i) {
      new_row.push_back(rows + P - 1);
      rows += P + step_len[seq[i]];
    }
    logp_new_rows.assign(static_cast<size_t>(rows), 0.0f);
    h_new.assign(static_cast<size_t>(S) * R, 0.0f);
    gamma.resize(h_new.size());
    for (int i = 0; i < S; ++i)
      for (int t = 0; t < R; ++t) {
        const size_t j = static_cast<size_t>(i) * R + t, at = static_cast<size_t>(seq[i]) * R + t;
        gamma[j] = 0.1f + 0.9f * static_cast<float>(g.uniform_double());
        h_old.push_back(old_lp[at]);
        h_roll.push_back(roll[at]);
        h_mask.push_back(mask[at]);
        h_ref.push_back(ref[at]);
        if (t < step_len[seq[i]]) {  // the new policy moved a little (large moves clip)
          const float x = old_lp[at] + normal(0.25f);
          logp_new_rows[static_cast<size_t>(new_row[i] + t)] = x;
          h_new[j] = x;
        }
      }
    for (int i = 0; i < S; ++i) h_adv.push_back(adv[seq[i]]);
  }

  // The host loss's batch over the [S, R] views (no reference log-probs, no γ: a test adds its own).
  LossBatch host() const { return test::host_batch(S, R, h_new, h_old, h_roll, h_mask, h_adv); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(LossDevice, TheOpIsTheHostLossBitForBit) {
  const Backend& cpu = cpu_backend();
  int checked = 0;
  for (const char* algorithm : {"grpo", "gspo", "rspo", "icepop"})
    for (const rl::CorrectionInfo& corr : rl::correction_registry())
      for (int agg = 0; agg < static_cast<int>(kAggregationNames.size()); ++agg)
        for (const float kl : {0.0f, 0.05f})
          for (const float dual : {0.0f, 3.0f}) {
            LossConfig c;
            c.algorithm = algorithm;
            c.correction = corr.kind;
            c.aggregation = static_cast<Aggregation>(agg);
            c.kl_coef = kl;
            c.dual_clip = dual;
            c.correction_cap_low = 0.5f;
            c.seq_mask_low = 0.6f;  // wide enough that some sequences pass and some do not
            c.seq_mask_high = 1.5f;
            c.seq_k3_max = 0.05f;
            if (std::string(algorithm) == "gspo") c.clip_low = 3e-4f, c.clip_high = 4e-4f;
            const std::unique_ptr<Algorithm> a = algorithm_create(c);
            PolicyLossParams p;
            Aggregation used = Aggregation::token_mean;
            ASSERT_TRUE(a->device_form(&p, &used)) << algorithm;
            const Batch x(rng_derive(17, 3, {static_cast<uint64_t>(checked)}), 0.4f);
            LossBatch b = x.host();
            b.logp_ref = x.h_ref.data();
            b.gamma = std::string(algorithm) == "rspo" ? x.gamma.data() : nullptr;
            b.norm_len = 12;
            LossOutput want;
            a->loss(&want, b);
            std::vector<double> scale(x.S);
            rl::aggregation_scales(scale.data(), used, b);
            std::vector<float> dlogp(x.logp_new_rows.size(), 0.0f), ratio(want.ratio.size()), weight(ratio.size()),
                term(ratio.size());
            double totals[kLossTotals];
            cpu.policy_loss_rows(dlogp.data(), totals, ratio.data(), weight.data(), term.data(), x.logp_new_rows.data(),
                                 x.new_row.data(), x.old_lp.data(), x.roll.data(), x.mask.data(), x.ref.data(),
                                 x.seq.data(), x.adv.data(), b.gamma, scale.data(), x.S, x.R, p);
            // the host loss's gradient, moved to the packed rows
            std::vector<float> want_rows(dlogp.size(), 0.0f);
            for (int i = 0; i < x.S; ++i)
              for (int t = 0; t < x.R; ++t)
                if (x.h_mask[static_cast<size_t>(i) * x.R + t] != 0.0f)
                  want_rows[static_cast<size_t>(x.new_row[i] + t)] = want.dlogp[static_cast<size_t>(i) * x.R + t];
            const std::string what = std::string(algorithm) + " " + correction_name(corr.kind) + " " +
                                     aggregation_name(c.aggregation) + " kl=" + std::to_string(kl) +
                                     " dual=" + std::to_string(dual);
            EXPECT_TRUE(same_bits(dlogp, want_rows)) << what << ": dlogp";
            EXPECT_TRUE(same_bits(ratio, want.ratio)) << what << ": ratio";
            EXPECT_TRUE(same_bits(weight, want.weight)) << what << ": weight";
            EXPECT_TRUE(same_bits(term, want.term)) << what << ": term";
            EXPECT_TRUE(same_bits(totals[kLossSum], want.loss)) << what << ": loss " << totals[kLossSum] << " vs " << want.loss;
            EXPECT_TRUE(same_bits(totals[kLossKl], want.kl_loss)) << what << ": kl";
            EXPECT_EQ(totals[kLossTokens], want.tokens) << what;
            EXPECT_EQ(totals[kLossClipped], want.clipped_tokens) << what;
            EXPECT_EQ(totals[kLossMasked], want.masked_tokens) << what;
            EXPECT_TRUE(same_bits(totals[kLossRatioMaxNegAdv], want.ratio_max_neg_adv)) << what << ": ratio max";
            ++checked;
          }
  EXPECT_EQ(checked, 4 * kCorrectionCount * static_cast<int>(kAggregationNames.size()) * 2 * 2);
}

// The test's batches exercise what they claim: tokens clipped, tokens masked by a correction,
// sequences cut by a sequence-level one, negative advantages.
TEST(LossDevice, TheBatchesReachEveryBranch) {
  const Batch x(rng_derive(17, 3, {0}), 0.4f);
  LossConfig c;
  c.correction = Correction::icepop;
  c.icepop_low = 0.8f;
  c.icepop_high = 1.25f;
  const std::unique_ptr<Algorithm> a = algorithm_create(c);
  LossOutput out;
  a->loss(&out, x.host());
  EXPECT_GT(out.clipped_tokens, 0.0);
  EXPECT_GT(out.masked_tokens, 0.0);
  EXPECT_LT(out.masked_tokens, out.tokens);
  EXPECT_GT(out.ratio_max_neg_adv, 0.0);
}

// A bad row addresses nothing it should not: an empty mini-batch writes only zero totals.
TEST(LossDevice, AnEmptyMiniBatchHasZeroTotals) {
  double totals[kLossTotals];
  std::fill_n(totals, static_cast<int>(kLossTotals), 7.0);
  const PolicyLossParams p;
  const float none = 0.0f;
  const int32_t row = 0;
  const double one = 1.0;
  cpu_backend().policy_loss_rows(nullptr, totals, nullptr, nullptr, nullptr, &none, &row, &none, &none, &none, nullptr,
                                 &row, &none, nullptr, &one, 1, 1, p);  // one sequence, its one token masked
  for (int k = 0; k < kLossTotals; ++k) EXPECT_EQ(totals[k], 0.0) << k;
}

// Whole steps: the test device runs the loss through the op (its parameters live on the device),
// the CPU backend through sim/rl's loss; every algorithm ends with the same bits and metrics.
TEST(LossDevice, StepsOnTheDeviceHaveTheHostLossBits) {
  const std::vector<std::vector<std::string>> runs = {
      {"rl.algorithm=gspo"},
      {"rl.algorithm=rspo"},
      {"rl.algorithm=icepop"},
      {"rl.algorithm=grpo", "rl.correction=tis+seq-mis", "rl.kl_coef=0.05", "rl.aggregation=seq-mean-token-sum-norm"},
      {"rl.algorithm=grpo", "rl.grad_surgery=true", "rl.router_kl_coef=0.1"},
  };
  for (const auto& sets : runs) {
    std::vector<std::string> all = sets;
    all.push_back("task.partial_credit=true");  // rewards that differ within a group: a loss and a gradient
    const Scenario s = test::tiny_scenario(all);
    test::TwinTrainers tw(s, 9);
    RunResults rc, rd;
    bool learned = false;  // a step had a loss (the checks below could not fail on zero losses)
    for (int64_t step = 0; step < 2; ++step) {
      tw.step(step, &rc, &rd);
      EXPECT_TRUE(same_bits(rc.last("loss"), rd.last("loss"))) << "step " << step;
      learned = learned || (rd.last("loss") != 0.0 && rd.last("grad_norm") > 0.0);
    }
    std::string what;
    for (const std::string& x : sets) what += x + " ";
    EXPECT_TRUE(same_bits(tw.cpu.params().data(), tw.on.params().data())) << what << ": parameters";
    for (const char* m : {"loss", "clip_frac", "masked_frac", "ratio_max_neg_adv", "grad_norm", "icepop_masked_frac",
                          "rspo_gamma_mean", "rspo_gamma_min"})
      EXPECT_TRUE(same_bits(rc.last(m), rd.last(m))) << what << m << ": " << rc.last(m) << " vs " << rd.last(m);
    EXPECT_TRUE(learned) << what;
  }
}

}  // namespace
}  // namespace moerl
