// Load balancing in the warm-up and during RL: the expert bias's update rule and its use in SFT,
// the balance statistics, and the RL switches rl.aux_loss and rl.bias_update (each changes exactly
// what it names).
#include <gtest/gtest.h>

#include <cmath>

#include "models/params.h"
#include "models/router.h"
#include "rl_fixture.h"
#include "sim/jobs/sft.h"
#include "sim/rl/trainer.h"
#include "sim/tasks/task.h"

namespace moerl {
namespace {

TEST(Balancing, BiasMovesTowardTheUnderloadedExperts) {
  // two layers of four experts; layer 0's mean load is 5, layer 1's is 2
  const int64_t load[] = {10, 0, 5, 5, 2, 2, 2, 2};
  std::vector<float> bias(8, 0.5f);
  router_bias_update(bias.data(), load, 2, 4, 0.25f);
  const float want[] = {0.25f, 0.75f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};  // sign(mean − n): −, +, 0, 0
  for (int i = 0; i < 8; ++i) EXPECT_EQ(bias[i], want[i]) << i;
}

TEST(Balancing, LoadStatisticsByHand) {
  // layer 0: {4, 0, 2, 2}: mean 2, population std sqrt((4 + 4 + 0 + 0) / 4) = sqrt 2, max/mean 2, one dead
  // layer 1: {3, 3, 3, 3}: cv 0, max/mean 1
  const int64_t load[] = {4, 0, 2, 2, 3, 3, 3, 3};
  const ExpertLoadStats st = expert_load_stats(load, 2, 4);
  EXPECT_DOUBLE_EQ(st.cv, std::sqrt(2.0) / 2.0 / 2.0);
  EXPECT_DOUBLE_EQ(st.max_over_mean, 2.0);
  EXPECT_EQ(st.dead, 1);
}

// The tiny scenario's model with a selection bias, warmed up for a few steps.
Scenario biased_scenario(std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), {"model.scoring=sigmoid", "model.expert_bias=true", "model.bias_update_rate=0.01",
                             "model.load_balance=aux_loss", "task.partial_credit=true"});
  return test::tiny_scenario(sets);
}

TEST(Balancing, WarmUpUpdatesTheBiasAndReportsTheHeldOutLoad) {
  const Scenario s = biased_scenario();
  Model m(s.model);
  params_init(&m.params(), s.model, 1);
  const auto task = task_create(s.task);
  SftConfig sft = s.sft;
  sft.steps = 6;
  const SftReport rep = sft_train(&m, sft, *task, 1, 32, {});
  // every step moves every bias by ±u or 0: after 6 steps each is a multiple of u within 6u
  int moved = 0;
  for (float b : m.expert_bias()) {
    EXPECT_LE(std::fabs(b), 6 * 0.01f + 1e-6f);
    moved += b != 0.0f;
  }
  EXPECT_GT(moved, 0);
  ASSERT_TRUE(rep.has_load);
  EXPECT_TRUE(std::isfinite(rep.load_cv));
  EXPECT_GE(rep.load_max_over_mean, 1.0);
  EXPECT_GE(rep.dead_experts, 0);
  EXPECT_LE(rep.dead_experts, s.model.n_layers * s.model.n_experts);
  // without the bias the warm-up leaves it empty, and the report still measures the load
  Scenario plain = test::tiny_scenario();
  Model d(plain.model);
  params_init(&d.params(), plain.model, 1);
  SftConfig sft0 = plain.sft;
  sft0.steps = 2;
  EXPECT_TRUE(sft_train(&d, sft0, *task, 1, 16, {}).has_load);
}

// Three RL steps of `s` from one initialisation: the step metrics and the final bias.
struct Trained {
  RunResults res;
  std::vector<float> bias0, bias;
};
Trained train(const Scenario& s) {
  Model m(s.model);
  params_init(&m.params(), s.model, 1);
  for (size_t i = 0; i < m.expert_bias().size(); ++i) m.expert_bias()[i] = 0.01f * static_cast<float>(i % 3);
  Trained t;
  t.bias0 = m.expert_bias();
  RlTrainer trainer(test::rl_setup(s), &m);
  for (int i = 0; i < s.rl.steps; ++i) trainer.step(i, &t.res);
  t.bias = m.expert_bias();
  return t;
}

TEST(Balancing, AuxLossSwitchTurnsOffOnlyTheBalanceLoss) {
  const Trained on = train(biased_scenario());
  const Trained off = train(biased_scenario({"rl.aux_loss=false"}));
  for (double x : *on.res.series("aux_loss")) EXPECT_GT(x, 0.0);
  for (double x : *off.res.series("aux_loss")) EXPECT_EQ(x, 0.0);
  // the first step's rollout and π_old are the same policy's: only the update differs
  EXPECT_EQ(on.res.series("reward_mean")->front(), off.res.series("reward_mean")->front());
  EXPECT_NE(*on.res.series("grad_norm"), *off.res.series("grad_norm"));
}

TEST(Balancing, BiasUpdateSwitchFreezesTheBias) {
  const Trained moving = train(biased_scenario());
  const Trained frozen = train(biased_scenario({"rl.bias_update=false"}));
  EXPECT_EQ(frozen.bias, frozen.bias0);
  EXPECT_NE(moving.bias, moving.bias0);
  // the balance loss is untouched by the bias switch
  for (double x : *frozen.res.series("aux_loss")) EXPECT_GT(x, 0.0);
}

}  // namespace
}  // namespace moerl
