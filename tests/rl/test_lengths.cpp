// Responses of their own length: generation ends at EOS or is truncated at the limit, the padding
// changes nothing of the other rows, the loss mask, truncation reward, the overlong penalty and
// dynamic sampling act as documented, the response metrics against a hand computation, and runs
// with lengths that differ within a group resume bit-identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "rl_fixture.h"
#include "models/params.h"
#include "models/sites.h"
#include "sim/rl/response_metrics.h"
#include "sim/rl/rollout.h"
#include "sim/jobs/run.h"
#include "store/h5io.h"

namespace moerl {
namespace {

// The tiny scenario on the bubble task: 4 values in [0, 6), answers of 5..15 tokens, a limit of 12
// so that the untrained policy both ends (EOS = 7) and is truncated.
// The bubble task's keys, each unless `sets` gives it (a --set key is given once).
std::vector<std::string> bubble(std::vector<std::string> sets) {
  for (const std::string s : {"task.name=bubble", "task.length=4", "task.base=6", "model.max_seq_len=24",
                              "rl.max_response_len=12"}) {
    const std::string key = s.substr(0, s.find('='));
    if (std::none_of(sets.begin(), sets.end(), [&](const std::string& x) { return x.rfind(key + "=", 0) == 0; }))
      sets.insert(sets.begin(), s);
  }
  return sets;
}

RunSummary run(const Scenario& s, const std::string& out, const std::string& dir, bool dump = false,
               bool resume = false, int max_steps = -1) {
  return test::run_quiet(s, out, dir, {.dump = dump, .resume = resume, .max_steps = max_steps});
}

TEST(Lengths, GenerationEndsAtEosAndPaddingChangesNoOtherRow) {
  const Scenario s = test::tiny_scenario(bubble({}));
  Model m(s.model);
  params_init(&m.params(), s.model, 2);
  const int S = 16, P = 5, R_max = 12, eos = 7, L = s.model.n_layers, K = s.model.top_k, V = s.model.vocab_size;
  std::vector<int32_t> prompts(static_cast<size_t>(S) * P);
  for (int i = 0; i < S * P; ++i) prompts[i] = (i * 5 + 3) % 6;
  SamplingConfig sampling;
  for (const char* profile : {"fp32-ref", "fp8-rollout"}) {
    SCOPED_TRACE(profile);
    RolloutBatch free_run, ended;  // eos < 0: every sequence runs R_max tokens
    rollout_generate(&free_run, m, s.profile(profile), prompts.data(), S, P, R_max, sampling, 9, 0, 0, 1, -1);
    rollout_generate(&ended, m, s.profile(profile), prompts.data(), S, P, R_max, sampling, 9, 0, 0, 1, eos);
    ASSERT_EQ(free_run.R, R_max);
    int longest = 0, n_trunc = 0;
    std::set<int> lengths;
    for (int i = 0; i < S; ++i) {
      const int len = ended.len[i];
      longest = std::max(longest, len);
      lengths.insert(len);
      n_trunc += ended.truncated[i];
      // the sequence up to its end is the free run's, bit for bit: the same stream, the same rows
      int first_eos = R_max;
      for (int r = 0; r < R_max; ++r)
        if (free_run.tokens[static_cast<size_t>(i) * free_run.T + P + r] == eos) { first_eos = r; break; }
      EXPECT_EQ(len, std::min(first_eos + 1, R_max)) << "sequence " << i;
      EXPECT_EQ(ended.truncated[i], first_eos == R_max ? 1 : 0);
      for (int r = 0; r < ended.R; ++r) {
        const int32_t tok = ended.tokens[static_cast<size_t>(i) * ended.T + P + r];
        const float lp = ended.logp[static_cast<size_t>(i) * ended.R + r];
        if (r < len) {
          EXPECT_EQ(tok, free_run.tokens[static_cast<size_t>(i) * free_run.T + P + r]);
          EXPECT_EQ(lp, free_run.logp[static_cast<size_t>(i) * R_max + r]);
          EXPECT_EQ(ended.entropy[static_cast<size_t>(i) * ended.R + r], free_run.entropy[static_cast<size_t>(i) * R_max + r]);
        } else {  // padding
          EXPECT_EQ(tok, eos);
          EXPECT_EQ(lp, 0.0f);
          EXPECT_EQ(ended.logp_all[(static_cast<size_t>(i) * ended.R + r) * V], 0.0f);
        }
      }
      // routing of every position up to the end equals the free run's
      for (int l = 0; l < L; ++l)
        for (int t = 0; t < P + len; ++t)
          for (int k = 0; k < K; ++k)
            EXPECT_EQ(ended.topk_ids[((static_cast<size_t>(l) * S + i) * ended.T + t) * K + k],
                      free_run.topk_ids[((static_cast<size_t>(l) * S + i) * free_run.T + t) * K + k]);
    }
    EXPECT_EQ(ended.R, longest) << "the buffers are trimmed to the longest response";
    EXPECT_EQ(ended.T, P + longest);
    EXPECT_GE(lengths.size(), 3u) << "lengths of their own";
    EXPECT_GT(n_trunc, 0);
    EXPECT_LT(n_trunc, S);
  }
}

// Decode compaction: under a row-independent profile a finished sequence leaves the decode batch
// (its rows are never computed again), and every sequence's tokens, log-probs, distributions,
// entropies and routing are those of the masked batch, in which it stays fed EOS, bit for bit.
// The masked batch here: the same arithmetic with random top-k tie-breaking (no ties occur in
// these logits, but the draw is keyed by the row's index, so the batch keeps its layout).
TEST(Lengths, CompactedDecodeEqualsTheMaskedBatch) {
  const Scenario s = test::tiny_scenario(bubble({}));
  Model m(s.model);
  params_init(&m.params(), s.model, 2);
  const int S = 16, P = 5, R_max = 12, eos = 7, L = s.model.n_layers, K = s.model.top_k;
  std::vector<int32_t> prompts(static_cast<size_t>(S) * P);
  for (int i = 0; i < S * P; ++i) prompts[i] = (i * 5 + 3) % 6;
  const NumericsProfile compact = s.profile("fp32-ref");
  NumericsProfile masked = compact;
  masked.tie_break = TieBreak::random;
  ASSERT_TRUE(profile_rows_independent(compact));
  ASSERT_FALSE(profile_rows_independent(masked));
  SamplingConfig sampling;
  RolloutBatch a, b;
  rollout_generate(&a, m, compact, prompts.data(), S, P, R_max, sampling, 9, 0, 0, 1, eos);
  rollout_generate(&b, m, masked, prompts.data(), S, P, R_max, sampling, 9, 0, 0, 1, eos);
  EXPECT_EQ(a.len, b.len);
  EXPECT_EQ(a.truncated, b.truncated);
  EXPECT_EQ(a.tokens, b.tokens);  // the padding is EOS in both
  EXPECT_EQ(a.logp, b.logp);
  EXPECT_EQ(a.logp_all, b.logp_all);
  EXPECT_EQ(a.entropy, b.entropy);
  ASSERT_EQ(a.T, b.T);
  int finished_early = 0, pad_routed = 0;
  for (int i = 0; i < S; ++i) {
    finished_early += a.len[i] < a.R;
    for (int l = 0; l < L; ++l)
      for (int t = 0; t < a.T; ++t)
        for (int k = 0; k < K; ++k) {
          const size_t at = ((static_cast<size_t>(l) * S + i) * a.T + t) * K + k;
          if (t < P + a.len[i]) {
            EXPECT_EQ(a.topk_ids[at], b.topk_ids[at]);
            EXPECT_EQ(a.router_logp[at], b.router_logp[at]);
          } else {  // compacted: never computed; masked: the EOS fed to a finished row
            EXPECT_EQ(a.topk_ids[at], 0);
            EXPECT_EQ(a.router_logp[at], 0.0f);
            pad_routed += b.router_logp[at] != 0.0f;
          }
        }
  }
  EXPECT_GT(finished_early, 0);
  EXPECT_GT(pad_routed, 0);
}

TEST(Lengths, RolloutTrimKeepsTheFirstPositions) {
  RolloutBatch rb;
  rb.S = 2; rb.P = 1; rb.R = 3; rb.T = 4;
  const int L = 2, K = 1, V = 2;
  for (int i = 0; i < rb.S * rb.T; ++i) rb.tokens.push_back(i);
  for (int i = 0; i < rb.S * rb.R; ++i) { rb.logp.push_back(i); rb.entropy.push_back(10 + i); }
  for (int i = 0; i < rb.S * rb.R * V; ++i) rb.logp_all.push_back(i);
  for (int i = 0; i < L * rb.S * rb.T * K; ++i) { rb.topk_ids.push_back(i); rb.router_logp.push_back(i); }
  rollout_trim(&rb, 2, L);
  EXPECT_EQ(rb.R, 2);
  EXPECT_EQ(rb.T, 3);
  EXPECT_EQ(rb.tokens, (std::vector<int32_t>{0, 1, 2, 4, 5, 6}));
  EXPECT_EQ(rb.logp, (std::vector<float>{0, 1, 3, 4}));
  EXPECT_EQ(rb.entropy, (std::vector<float>{10, 11, 13, 14}));
  EXPECT_EQ(rb.logp_all, (std::vector<float>{0, 1, 2, 3, 6, 7, 8, 9}));
  // [L, S·T, K]: layer 0 rows 0..3 | 4..7, layer 1 rows 8..11 | 12..15 → the first 3 of each
  EXPECT_EQ(rb.topk_ids, (std::vector<int32_t>{0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14}));
}

TEST(Lengths, ResponseMetricsByHand) {
  // 3 sequences, R = 4, R_max = 8 (bucket width 1): lengths 1, 4, 3; the second is truncated
  const int32_t len[] = {1, 4, 3}, trunc[] = {0, 1, 0};
  const float lt[] = {-1.0f, 0, 0, 0, -1.0f, -1.0f, -1.0f, -1.0f, -0.5f, -0.5f, -0.5f, 0};
  const float lr[] = {-1.2f, 9, 9, 9, -1.0f, -1.1f, -0.9f, -1.0f, -0.5f, -0.7f, -0.5f, 9};
  const float ent[] = {0.5f, 9, 9, 9, 1.0f, 1.0f, 1.0f, 2.0f, 0.0f, 0.5f, 0.0f, 9};
  const int answer[] = {2, 4, 4};
  const ResponseMetrics m = response_metrics(len, trunc, answer, lt, lr, ent, 3, 4, 8, 3, 1);
  EXPECT_DOUBLE_EQ(m.answer_length_mean, 10.0 / 3);
  EXPECT_DOUBLE_EQ(m.length_mean, 8.0 / 3);
  EXPECT_EQ(m.length_min, 1.0);
  EXPECT_EQ(m.length_max, 4.0);
  EXPECT_EQ(m.length_p90, 4.0);  // the ⌈2.7⌉ = 3rd smallest
  EXPECT_DOUBLE_EQ(m.truncated_frac, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.filtered_group_frac, 1.0 / 3);
  // X = 0.2, 0 (−0.1 + 0.1), 0.2 (float arithmetic of the inputs, in double)
  const double x0 = static_cast<double>(-1.0f) - (-1.2f);
  const double x1 = (static_cast<double>(-1.0f) - (-1.1f)) + (static_cast<double>(-1.0f) - (-0.9f));
  const double x2 = static_cast<double>(-0.5f) - (-0.7f);
  EXPECT_NEAR(m.seq_log_ratio_mean, (x0 + x1 + x2) / 3, 1e-12);
  EXPECT_NEAR(m.seq_log_ratio_abs_max, std::max({std::fabs(x0), std::fabs(x1), std::fabs(x2)}), 1e-12);
  auto k3 = [](double x) { return std::exp(x) - 1 - x; };
  EXPECT_EQ(m.tokens_by_position, (std::vector<double>{3, 2, 2, 1, 0, 0, 0, 0}));
  EXPECT_NEAR(m.k3_by_position[0], (k3(x0) + 0 + 0) / 3, 1e-12);
  EXPECT_NEAR(m.k3_by_position[1], (k3(static_cast<double>(-1.0f) - (-1.1f)) + k3(x2)) / 2, 1e-12);
  EXPECT_NEAR(m.entropy_by_position[0], 0.5, 1e-7);
  EXPECT_NEAR(m.entropy_by_position[3], 2.0, 1e-7);
  EXPECT_TRUE(std::isnan(m.k3_by_position[4]));
  EXPECT_TRUE(std::isnan(m.entropy_by_position[7]));
  EXPECT_EQ(position_bucket_width(8), 1);
  EXPECT_EQ(position_bucket_width(160), 20);
  EXPECT_EQ(position_bucket_width(161), 21);
}

TEST(Lengths, MarginsByHand) {
  // one sequence, P = 1, T = 3, len 2: rows 0 and 1 score its tokens, row 2 scores nothing
  // router logits [1, 3, E = 3]: {1, 3, 2}, {0.5, 0.1, 0.4}, {9, −9, 0}; their K-th and (K+1)-th
  // largest (ForwardResult::router_top) at K = 1 and K = 2
  const std::vector<float> top1 = {3.0f, 2.0f, 0.5f, 0.4f, 9.0f, 0.0f};
  const std::vector<float> top2 = {2.0f, 1.0f, 0.4f, 0.1f, 0.0f, -9.0f};
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 1.0f, 5.0f, -5.0f};  // [3, V = 2]
  const int32_t len[] = {2};
  // the logits' spread and margin at rows 0 and 1, reduced where they are (logit_stats_rows)
  auto stats = [&](float tau) {
    const int32_t rows[] = {0, 1};
    std::vector<double> sd(2), margin(2);
    cpu_backend().logit_stats_rows(sd.data(), margin.data(), logits.data(), rows, 2, 2, tau);
    return std::make_pair(sd, margin);
  };
  const auto [sd1, mg1] = stats(1.0f);
  const auto [sd2, mg2] = stats(2.0f);
  const ResponseMargins m = response_margins(top1, sd1, mg1, len, 1, 1, 3, 1);
  EXPECT_NEAR(m.router_margin_mean, (1.0 + 0.1) / 2, 1e-7);  // 3 − 2 and 0.5 − 0.4
  EXPECT_NEAR(m.router_margin_p10, 0.1, 1e-7);
  EXPECT_NEAR(m.logit_std_mean, 0.5, 1e-12);                  // stds 1 and 0
  EXPECT_NEAR(m.logit_margin_mean, 1.0, 1e-12);               // margins 2 and 0
  const ResponseMargins k2 = response_margins(top2, sd2, mg2, len, 1, 1, 3, 1);
  EXPECT_NEAR(k2.router_margin_mean, (1.0 + 0.3) / 2, 1e-7);  // K = 2: 2 − 1 and 0.4 − 0.1
  EXPECT_NEAR(k2.logit_margin_mean, 0.5, 1e-12);              // at temperature 2
  EXPECT_TRUE(std::isnan(response_margins({}, sd1, mg1, len, 1, 1, 3, 1).router_margin_mean));
}

// The dumped first mini-batch: the mask covers each response's own tokens, truncated responses
// get rl.truncated_reward and leave the loss under rl.mask_truncated.
TEST(Lengths, MaskTruncationRewardAndMaskTruncated) {
  const std::string dir = test::tmp_dir("len_mask");
  for (const bool mask_truncated : {false, true}) {
    SCOPED_TRACE(mask_truncated ? "mask_truncated" : "plain");
    const Scenario s = test::tiny_scenario(bubble({"rl.steps=1", "rl.truncated_reward=0.25",
                                                   std::string("rl.mask_truncated=") + (mask_truncated ? "true" : "false")}));
    run(s, dir + "/m.h5", dir, true);
    const H5File f = H5File::open(dir + "/m.h5");
    const std::vector<float> mask = f.read_f32("dump/step_0/mask"), len = f.read_f32("dump/step_0/response_length"),
                             trunc = f.read_f32("dump/step_0/truncated"), reward = f.read_f32("dump/step_0/reward");
    const int n = static_cast<int>(len.size()), R = static_cast<int>(mask.size()) / n;
    int truncated = 0;
    for (int i = 0; i < n; ++i) {
      truncated += trunc[i] != 0;
      if (trunc[i] != 0) {
        EXPECT_EQ(len[i], 12.0f);
        EXPECT_EQ(reward[i], 0.25f);
      }
      const bool kept = !(mask_truncated && trunc[i] != 0);
      for (int r = 0; r < R; ++r) EXPECT_EQ(mask[i * R + r], (kept && r < len[i]) ? 1.0f : 0.0f) << i << "," << r;
    }
    EXPECT_GT(truncated, 0);
    EXPECT_LT(truncated, n);
    const auto tf = test::run_metric(dir + "/m.h5", "truncated_frac");
    EXPECT_GT(tf[0], 0.0);
    EXPECT_LT(tf[0], 1.0);
  }
}

// DAPO's overlong penalty: 0 up to L_max − buffer, −penalty·(len − start)/buffer after; here every
// well-formed answer is wrong (reward 0) or right, so reward = task reward + penalty is checked
// where the task reward is 0: an untrained policy.
TEST(Lengths, OverlongPenaltyIsLinearOverTheBuffer) {
  const std::string dir = test::tmp_dir("len_overlong");
  const Scenario s = test::tiny_scenario(bubble({"rl.steps=1", "rl.overlong_buffer=4", "rl.overlong_penalty=0.5"}));
  run(s, dir + "/o.h5", dir, true);
  const H5File f = H5File::open(dir + "/o.h5");
  const std::vector<float> len = f.read_f32("dump/step_0/response_length"), reward = f.read_f32("dump/step_0/reward");
  int penalised = 0;
  for (size_t i = 0; i < len.size(); ++i) {
    const double pen = len[i] <= 8 ? 0.0 : -0.5 * (len[i] - 8) / 4;
    // the task reward is in [0, 1]: the penalty is what lies below it
    EXPECT_LE(reward[i], 1.0 + pen + 1e-6);
    EXPECT_GE(reward[i], pen - 1e-6);
    if (len[i] == 12) {
      EXPECT_FLOAT_EQ(reward[i], -0.5f);  // truncated: reward 0, full penalty
    }
    penalised += pen < 0;
  }
  EXPECT_GT(penalised, 0);
}

// Dynamic sampling: a group whose rewards are all equal leaves the loss (mask 0), and the share
// of such groups is recorded.
TEST(Lengths, FilterGroupsDropsGroupsOfEqualRewards) {
  const std::string dir = test::tmp_dir("len_filter");
  // truncated responses get 1, ended ones (malformed: reward 0) 0: some groups all-truncated
  const Scenario s = test::tiny_scenario(bubble({"rl.steps=2", "rl.truncated_reward=1", "rl.filter_groups=true",
                                                 "rl.max_response_len=4", "rl.minibatches=1"}));
  run(s, dir + "/f.h5", dir, true);
  const H5File f = H5File::open(dir + "/f.h5");
  const std::vector<float> mask = f.read_f32("dump/step_0/mask"), reward = f.read_f32("dump/step_0/reward"),
                           index = f.read_f32("dump/step_0/sequence_index");
  const int n = static_cast<int>(reward.size()), R = static_cast<int>(mask.size()) / n, G = 4;
  std::vector<float> by_seq(n);
  std::vector<int> row_of(n);
  for (int i = 0; i < n; ++i) { by_seq[static_cast<int>(index[i])] = reward[i]; row_of[static_cast<int>(index[i])] = i; }
  int dropped = 0;
  for (int g = 0; g < n / G; ++g) {
    bool equal = true;
    for (int k = 1; k < G; ++k) equal = equal && by_seq[g * G + k] == by_seq[g * G];
    dropped += equal;
    for (int k = 0; k < G; ++k) {
      double m = 0;
      for (int r = 0; r < R; ++r) m += mask[row_of[g * G + k] * R + r];
      if (equal) EXPECT_EQ(m, 0.0) << "group " << g;
      else EXPECT_GT(m, 0.0) << "group " << g;
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, n / G);
  EXPECT_DOUBLE_EQ(test::run_metric(dir + "/f.h5", "filtered_group_frac")[0], static_cast<double>(dropped) / (n / G));
}

// Lengths that differ within a group, under each aggregation and with the length options on: a
// run split in two resumes bit-identically.
TEST(Lengths, ResumeIsBitIdentical) {
  const std::string dir = test::tmp_dir("len_resume");
  const std::vector<std::vector<std::string>> variants = {
      {"rl.algorithm=grpo", "rl.truncated_reward=0.5", "rl.filter_groups=true"},
      {"rl.algorithm=r3", "rl.aggregation=seq-mean-token-sum-norm", "rl.overlong_buffer=4", "rl.mask_truncated=true"},
      {"rl.algorithm=gspo", "task.partial_credit=true"}};
  for (const auto& v : variants) {
    SCOPED_TRACE(v.front());
    std::vector<std::string> sets = bubble(v);
    sets.push_back("rl.steps=4");
    const Scenario s = test::tiny_scenario(sets);
    std::filesystem::remove_all(dir + "/cache");
    run(s, dir + "/straight.h5", dir);
    run(s, dir + "/split.h5", dir, false, false, 2);
    run(s, dir + "/split.h5", dir, false, true);
    const H5File a = H5File::open(dir + "/straight.h5");
    int compared = 0;
    for (const std::string& name : a.datasets_below("metrics")) {
      const std::string m = name.substr(8);
      if (m.rfind("time_", 0) == 0) continue;
      const auto x = test::run_metric(dir + "/straight.h5", m), y = test::run_metric(dir + "/split.h5", m);
      ASSERT_EQ(x.size(), y.size()) << m;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!(std::isnan(x[i]) && std::isnan(y[i]))) {
          EXPECT_EQ(x[i], y[i]) << m << "[" << i << "]";
        }
      }
      ++compared;
    }
    EXPECT_GT(compared, 30);
    const auto lmin = test::run_metric(dir + "/straight.h5", "response_length_min"),
               lmax = test::run_metric(dir + "/straight.h5", "response_length_max");
    for (size_t i = 0; i < lmin.size(); ++i) EXPECT_LT(lmin[i], lmax[i]) << "lengths differ at step " << i;
    std::filesystem::remove(dir + "/straight.h5");
    std::filesystem::remove(dir + "/split.h5");
    std::filesystem::remove(run_checkpoint_path(dir + "/straight.h5"));
    std::filesystem::remove(run_checkpoint_path(dir + "/split.h5"));
  }
}

TEST(Lengths, FixedLengthTasksRejectAnotherLimit) {
  try {
    test::tiny_scenario({"rl.max_response_len=6"});
    FAIL() << "sort has answers of exactly 4 tokens";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rl.max_response_len = 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("task.eos = true"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(test::tiny_scenario({"rl.max_response_len=4"}));
  EXPECT_NO_THROW(test::tiny_scenario({"task.eos=true", "rl.max_response_len=9"}));
  try {
    test::tiny_scenario(bubble({"rl.overlong_buffer=12"}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rl.overlong_buffer = 12"), std::string::npos) << e.what();
  }
}

// The answer grades a run records agree with its reward and with each other: with the 0/1 reward
// on the response the step's reward is its exact share; with the final-answer reward it is its
// final share; every share lies in [0, 1], exact ≤ final and exact ≤ working, and a truncated
// response is malformed.
TEST(Lengths, AnswerGradesAgreeWithTheReward) {
  const std::string dir = test::tmp_dir("grades");
  for (const char* on : {"response", "final_answer"}) {
    // a warmed-up base sampled cold, so that some responses are right and the checks bite
    const Scenario s = test::tiny_scenario(bubble({"rl.steps=3", "rl.eval_every=1", "task.partial_credit=false",
                                                   "sft.steps=400", "sft.lr=3e-3", "rl.temperature=0.5",
                                                   std::string("task.reward_on=") + on}));
    const std::string out = dir + "/" + on + ".h5";
    ASSERT_EQ(run(s, out, dir).status, "complete") << on;
    const auto reward = test::run_metric(out, "reward_mean");
    const auto paid = test::run_metric(out, std::string(on) == "response" ? "rollout_exact" : "rollout_final");
    const auto exact = test::run_metric(out, "rollout_exact"), fin = test::run_metric(out, "rollout_final");
    const auto working = test::run_metric(out, "rollout_working");
    const auto malformed = test::run_metric(out, "rollout_malformed");
    const auto truncated = test::run_metric(out, "truncated_frac");
    EXPECT_GT(*std::max_element(paid.begin(), paid.end()), 0.0) << on << ": no response earned the reward";
    for (size_t t = 0; t < reward.size(); ++t) {
      EXPECT_DOUBLE_EQ(reward[t], paid[t]) << on << " step " << t;
      EXPECT_LE(exact[t], fin[t]);
      EXPECT_LE(exact[t], working[t]);
      EXPECT_GE(malformed[t], truncated[t]);
    }
    for (const char* m : {"eval_accuracy", "eval_final", "eval_working", "eval_partial", "eval_stop_early",
                          "eval_stop_late", "eval_truncated", "eval_malformed"}) {
      const auto v = test::run_metric(out, m);
      for (double x : v) EXPECT_TRUE(x >= 0.0 && x <= 1.0) << m << " = " << x;
      const auto base = test::run_metric(out, std::string(m) + "_base");
      EXPECT_TRUE(base[0] >= 0.0 && base[0] <= 1.0) << m << "_base";
    }
    const auto ev = test::run_metric(out, "eval_accuracy"), evf = test::run_metric(out, "eval_final");
    for (size_t t = 0; t < ev.size(); ++t) EXPECT_LE(ev[t], evf[t]);
  }
}

}  // namespace
}  // namespace moerl
