// Tasks: answers are right (checked by independent arithmetic), streams are seeded and split,
// rewards exact and partial; AdamW and the schedule against hand-computed steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "sim/step/optimizer.h"
#include "sim/tasks/task.h"

namespace moerl {
namespace {

TEST(Tasks, SortAndReverseAnswers) {
  for (const char* name : {"sort", "reverse"}) {
    TaskConfig c;
    c.name = name; c.length = 7; c.base = 13;
    const auto t = task_create(c);
    EXPECT_EQ(t->prompt_len(), 8);
    EXPECT_EQ(t->max_answer_len(), 7);
    EXPECT_EQ(t->eos(), -1);  // fixed length unless task.eos
    EXPECT_EQ(t->vocab_size(), 14);
    std::vector<int32_t> p(8), a(7);
    for (int i = 0; i < 50; ++i) {
      t->example(p.data(), a.data(), 1, 0, i);
      EXPECT_EQ(p[7], 13);  // separator
      std::vector<int32_t> v(p.begin(), p.begin() + 7);
      for (int x : v) EXPECT_TRUE(x >= 0 && x < 13);
      if (std::string(name) == "sort") std::sort(v.begin(), v.end());
      else std::reverse(v.begin(), v.end());
      EXPECT_EQ(v, a);
    }
  }
}

TEST(Tasks, ModAddAnswersMatchIntegerArithmetic) {
  TaskConfig c;
  c.name = "modadd"; c.length = 3; c.base = 10;
  const auto t = task_create(c);
  std::vector<int32_t> p(t->prompt_len()), a(t->max_answer_len());
  for (int i = 0; i < 100; ++i) {
    t->example(p.data(), a.data(), 2, 0, i);
    const int x = p[0] * 100 + p[1] * 10 + p[2], y = p[4] * 100 + p[5] * 10 + p[6];
    const int s = (x + y) % 1000;
    EXPECT_EQ(p[3], 10);
    EXPECT_EQ(p[7], 11);
    EXPECT_EQ((std::vector<int32_t>{s / 100, s / 10 % 10, s % 10}), a) << x << "+" << y;
  }
}

TEST(Tasks, StreamsAreSeededAndSplitsDisjoint) {
  TaskConfig c;
  c.length = 8; c.base = 20;
  const auto t = task_create(c);
  std::vector<int32_t> p1(9), p2(9), a(8);
  t->example(p1.data(), a.data(), 5, 0, 3);
  t->example(p2.data(), a.data(), 5, 0, 3);
  EXPECT_EQ(p1, p2);
  std::set<std::vector<int32_t>> train, eval;
  for (int i = 0; i < 200; ++i) {
    t->example(p1.data(), a.data(), 5, 0, i);
    train.insert(p1);
    t->example(p2.data(), a.data(), 5, 1, i);
    eval.insert(p2);
  }
  int overlap = 0;
  for (const auto& e : eval) overlap += train.count(e);
  EXPECT_EQ(overlap, 0);  // 20^8 prompts: a collision would mean the splits share a stream
  t->example(p2.data(), a.data(), 6, 0, 3);
  t->example(p1.data(), a.data(), 5, 0, 3);
  EXPECT_NE(p1, p2);
}

TEST(Tasks, RewardExactAndPartial) {
  TaskConfig c;
  c.length = 4;
  const auto t = task_create(c);
  const int32_t ans[] = {1, 2, 3, 4}, half[] = {1, 2, 0, 0}, all[] = {1, 2, 3, 4};
  EXPECT_EQ(t->reward(ans, 4, all, 4, false), 1.0f);
  EXPECT_EQ(t->reward(ans, 4, half, 4, false), 0.0f);
  EXPECT_EQ(t->reward(ans, 4, half, 4, true), 0.5f);
}

TEST(Tasks, EosAppendsTheEndTokenToFixedTasks) {
  for (const char* name : {"sort", "reverse", "modadd"}) {
    TaskConfig c;
    c.name = name; c.length = 5; c.base = 10; c.eos = true;
    const auto t = task_create(c);
    TaskConfig plain = c;
    plain.eos = false;
    const auto u = task_create(plain);
    EXPECT_EQ(t->max_answer_len(), u->max_answer_len() + 1) << name;
    EXPECT_EQ(t->vocab_size(), u->vocab_size() + 1) << name;
    EXPECT_EQ(t->eos(), u->vocab_size()) << name;  // the next id after the task's own
    std::vector<int32_t> p(t->prompt_len()), a(t->max_answer_len()), q(u->prompt_len()), b(u->max_answer_len());
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(t->example(p.data(), a.data(), 3, 0, i), t->max_answer_len());
      u->example(q.data(), b.data(), 3, 0, i);
      EXPECT_EQ(p, q);  // the same prompts and answers, EOS after them
      EXPECT_TRUE(std::equal(b.begin(), b.end(), a.begin())) << name;
      EXPECT_EQ(a.back(), t->eos());
    }
  }
}

// One bubble-sort pass, written independently of the task: the largest value moves right.
std::vector<int32_t> bubble_pass(std::vector<int32_t> x) {
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i - 1] > x[i]) std::swap(x[i - 1], x[i]);
  return x;
}

TEST(Tasks, BubbleWritesEveryPassUntilSorted) {
  TaskConfig c;
  c.name = "bubble"; c.length = 6; c.base = 10;
  const auto t = task_create(c);
  const int n = 6, sep = 10, eos = 11;
  EXPECT_EQ(t->eos(), eos);
  EXPECT_EQ(t->vocab_size(), 12);
  EXPECT_EQ(t->prompt_len(), 7);
  EXPECT_EQ(t->max_answer_len(), 5 * 7);  // at most n − 1 passes of n + 1 tokens
  std::vector<int32_t> p(t->prompt_len()), a(t->max_answer_len());
  std::set<int> lengths;
  for (int i = 0; i < 300; ++i) {
    const int len = t->example(p.data(), a.data(), 4, 0, i);
    ASSERT_EQ(len % (n + 1), 0);
    lengths.insert(len);
    std::vector<int32_t> x(p.begin(), p.begin() + n);
    const int passes = len / (n + 1);
    for (int k = 0; k < passes; ++k) {
      x = bubble_pass(x);
      EXPECT_TRUE(std::equal(x.begin(), x.end(), a.begin() + k * (n + 1))) << "example " << i << " pass " << k;
      const bool last = k + 1 == passes;
      EXPECT_EQ(a[k * (n + 1) + n], last ? eos : sep);
      EXPECT_EQ(std::is_sorted(x.begin(), x.end()), last) << "the answer stops at the first sorted pass";
    }
    EXPECT_TRUE(t->well_formed(a.data(), len));
    EXPECT_EQ(t->reward(a.data(), len, a.data(), len, false), 1.0f);
  }
  EXPECT_GE(lengths.size(), 4u) << "the answer's length depends on the problem";
}

TEST(Tasks, EosRewardsNeedTheAnswersFormAndLength) {
  TaskConfig c;
  c.name = "bubble"; c.length = 3; c.base = 10; c.partial_credit = true;
  const auto t = task_create(c);
  // "2 1 0 |" → "1 0 2 | 0 1 2 <eos>"
  const int32_t ans[] = {1, 0, 2, 10, 0, 1, 2, 11};
  const int32_t one_wrong[] = {1, 0, 2, 10, 0, 2, 2, 11};
  const int32_t short_pass[] = {1, 0, 2, 11};      // well formed, stops a pass early
  const int32_t no_eos[] = {1, 0, 2, 10, 0, 1, 2, 10};  // truncated: never ended
  const int32_t bad_sep[] = {1, 0, 10, 2, 0, 1, 2, 11};  // separator inside a pass
  EXPECT_EQ(t->reward(ans, 8, ans, 8, true), 1.0f);
  EXPECT_FLOAT_EQ(t->reward(ans, 8, one_wrong, 8, true), 7.0f / 8);
  EXPECT_EQ(t->reward(ans, 8, one_wrong, 8, false), 0.0f);
  EXPECT_FLOAT_EQ(t->reward(ans, 8, short_pass, 4, true), 3.0f / 8);  // equal positions / longer length
  EXPECT_EQ(t->reward(ans, 8, no_eos, 8, true), 0.0f);
  EXPECT_EQ(t->reward(ans, 8, bad_sep, 8, true), 0.0f);
  EXPECT_FALSE(t->well_formed(no_eos, 8));
  EXPECT_FALSE(t->well_formed(bad_sep, 8));
  const int32_t eos_early[] = {11, 0, 2, 11};
  EXPECT_FALSE(t->well_formed(eos_early, 4));
}

// grade() tells the working from the answer: bubble's final answer is its last pass (the sorted
// list) and EOS, whatever the passes before it.
TEST(Tasks, GradeSeparatesTheWorkingFromTheFinalAnswer) {
  TaskConfig c;
  c.name = "bubble"; c.length = 3; c.base = 10;
  const auto t = task_create(c);
  // "2 1 0 |" → "1 0 2 | 0 1 2 <eos>"
  const int32_t ans[] = {1, 0, 2, 10, 0, 1, 2, 11};
  const int32_t right[] = {1, 0, 2, 10, 0, 1, 2, 11};
  const int32_t bad_working[] = {0, 1, 2, 10, 0, 1, 2, 11};  // wrong first pass, right answer
  const int32_t bad_answer[] = {1, 0, 2, 10, 0, 2, 1, 11};   // right first pass, wrong answer
  const int32_t early[] = {1, 0, 2, 11};                        // stops a pass early
  const int32_t late[] = {1, 0, 2, 10, 0, 1, 2, 10, 0, 1, 2, 11};  // one pass too many
  const int32_t malformed[] = {1, 0, 10, 2, 0, 1, 2, 11};
  AnswerGrade g = t->grade(ans, 8, right, 8);
  EXPECT_TRUE(g.well_formed && g.exact && g.final_correct && g.working_correct);
  EXPECT_EQ(g.stop, 0);
  EXPECT_EQ(g.partial, 1.0f);
  g = t->grade(ans, 8, bad_working, 8);
  EXPECT_TRUE(g.final_correct);
  EXPECT_FALSE(g.exact || g.working_correct);
  EXPECT_FLOAT_EQ(g.partial, 6.0f / 8);
  g = t->grade(ans, 8, bad_answer, 8);
  EXPECT_FALSE(g.exact || g.final_correct || g.working_correct);
  EXPECT_FLOAT_EQ(g.partial, 6.0f / 8);
  g = t->grade(ans, 8, early, 4);
  EXPECT_TRUE(g.working_correct);  // every token it wrote is the reference's
  EXPECT_FALSE(g.exact || g.final_correct);
  EXPECT_EQ(g.stop, -1);
  g = t->grade(ans, 8, late, 12);
  EXPECT_TRUE(g.final_correct);  // ends on the sorted list, one pass late
  EXPECT_FALSE(g.exact);
  EXPECT_TRUE(g.working_correct);  // its passes are the reference's; it only goes on
  EXPECT_EQ(g.stop, 1);
  EXPECT_FLOAT_EQ(g.partial, 7.0f / 12);
  g = t->grade(ans, 8, malformed, 8);
  EXPECT_FALSE(g.well_formed || g.exact || g.final_correct || g.working_correct);
  EXPECT_EQ(g.partial, 0.0f);
  // The reward on the final answer alone: the working is not graded.
  EXPECT_EQ(t->reward(ans, 8, bad_working, 8, false, RewardOn::final_answer), 1.0f);
  EXPECT_EQ(t->reward(ans, 8, late, 12, false, RewardOn::final_answer), 1.0f);
  EXPECT_EQ(t->reward(ans, 8, bad_answer, 8, false, RewardOn::final_answer), 0.0f);
  EXPECT_FLOAT_EQ(t->reward(ans, 8, bad_answer, 8, true, RewardOn::final_answer), 2.0f / 4);
  EXPECT_EQ(t->reward(ans, 8, early, 4, false, RewardOn::final_answer), 0.0f);
  EXPECT_EQ(t->reward(ans, 8, malformed, 8, true, RewardOn::final_answer), 0.0f);
  // A fixed-length task has no working apart from its answer: final == exact.
  TaskConfig s;
  s.name = "sort"; s.length = 4;
  const auto st = task_create(s);
  const int32_t sorted[] = {0, 1, 2, 3}, off[] = {0, 1, 3, 2};
  EXPECT_TRUE(st->grade(sorted, 4, sorted, 4).final_correct);
  g = st->grade(sorted, 4, off, 4);
  EXPECT_FALSE(g.final_correct || g.exact || g.working_correct);
  EXPECT_FLOAT_EQ(g.partial, 0.5f);
  // ... and with answers ending at EOS a longer response is junk before the answer, not working:
  // the final-answer reward and grade are the exact ones (docs/metrics.md)
  s.eos = true;
  const auto se = task_create(s);
  const int32_t e = se->eos(), ans_e[] = {0, 1, 2, 3, e}, junk[] = {3, 3, 0, 1, 2, 3, e}, whole[] = {0, 1, 2, 3, e};
  EXPECT_EQ(se->reward(ans_e, 5, junk, 7, false, RewardOn::final_answer), 0.0f);
  EXPECT_EQ(se->reward(ans_e, 5, junk, 7, true, RewardOn::final_answer),
            se->reward(ans_e, 5, junk, 7, true, RewardOn::response));
  EXPECT_EQ(se->reward(ans_e, 5, whole, 5, false, RewardOn::final_answer), 1.0f);
  g = se->grade(ans_e, 5, junk, 7);
  EXPECT_TRUE(g.well_formed);
  EXPECT_FALSE(g.final_correct || g.exact);
  EXPECT_TRUE(se->grade(ans_e, 5, whole, 5).final_correct);
}

TEST(Tasks, BadConfigNamesKeyAndValue) {
  TaskConfig c;
  c.name = "parity";
  try { task_create(c); FAIL(); } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("task.name = parity"), std::string::npos);
  }
}

TEST(Optimizer, AdamWFirstStepsMatchHandComputation) {
  ModelConfig cfg;
  cfg.vocab_size = 4; cfg.d_model = 2; cfg.n_layers = 1; cfg.n_heads = 1; cfg.n_experts = 0;
  cfg.top_k = 1; cfg.d_ff = 2;
  ParamStore w(cfg), g(cfg);
  for (size_t i = 0; i < w.data().size(); ++i) { w.data()[i] = 0.5f; g.data()[i] = (i % 2) ? 0.1f : -0.2f; }
  OptimConfig oc;
  oc.lr = 0.01f; oc.weight_decay = 0.1f; oc.grad_clip = 0.0f;
  AdamW opt(oc, w);
  opt.step(&w, &g, oc.lr, 0);
  // step 1: m̂ = g, v̂ = g², update = lr·g/(|g| + eps) = ±lr; decay lr·wd·w on matrices only
  const ParamInfo& emb = w.info("embed");
  EXPECT_NEAR(w.data()[emb.offset], 0.5f - 0.01f * 0.1f * 0.5f + 0.01f, 1e-6);
  const ParamInfo& norm = w.info("final_norm");
  EXPECT_NEAR(w.data()[norm.offset], 0.5f + 0.01f, 1e-6);  // no decay on norm weights
}

TEST(Optimizer, ClipFreezeAndSchedule) {
  ModelConfig cfg;
  cfg.vocab_size = 4; cfg.d_model = 2; cfg.n_layers = 1; cfg.n_heads = 1; cfg.n_experts = 2;
  cfg.top_k = 1; cfg.d_ff = 2;
  ParamStore w(cfg), g(cfg);
  std::fill(g.data().begin(), g.data().end(), 1.0f);
  OptimConfig oc;
  oc.grad_clip = 1.0f;
  AdamW opt(oc, w);
  opt.freeze(".moe.router");
  const std::vector<float> before = w.data();
  const double norm = opt.step(&w, &g, 0.1f, 0);
  const int64_t frozen = w.info("layers.0.moe.router").size;
  EXPECT_NEAR(norm, std::sqrt(static_cast<double>(w.size() - frozen)), 1e-9);  // frozen excluded
  const ParamInfo& r = w.info("layers.0.moe.router");
  for (int64_t j = r.offset; j < r.offset + r.size; ++j) EXPECT_EQ(w.data()[j], before[j]);
  OptimConfig s;
  s.lr = 1.0f; s.warmup_steps = 4; s.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(optim_lr_at(s, 0, 104), 0.25f);
  EXPECT_FLOAT_EQ(optim_lr_at(s, 3, 104), 1.0f);
  EXPECT_FLOAT_EQ(optim_lr_at(s, 4, 104), 1.0f);
  EXPECT_NEAR(optim_lr_at(s, 54, 104), 0.55f, 1e-6);  // halfway down the cosine
  EXPECT_NEAR(optim_lr_at(s, 104, 104), 0.1f, 1e-6);
}

}  // namespace
}  // namespace moerl
