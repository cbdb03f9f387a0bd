// Router-side stabilisers: their formulas as pure functions, their switches (off by default, and
// each one changing the run when on), end to end on the tiny scenario.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "store/h5io.h"
#include "rl_fixture.h"
#include "sim/rl/router_stabilisers.h"
#include "sim/jobs/run.h"

namespace moerl {
namespace {

TEST(Stabilisers, RampSchedules) {
  EXPECT_DOUBLE_EQ(ramp_weight(RampSchedule::constant, 0.3, 7, 10), 0.3);
  EXPECT_DOUBLE_EQ(ramp_weight(RampSchedule::linear, 0.3, 5, 10), 0.15);
  EXPECT_DOUBLE_EQ(ramp_weight(RampSchedule::sigmoid, 0.3, 5, 10), 0.15);  // centred mid-run
  EXPECT_LT(ramp_weight(RampSchedule::sigmoid, 0.3, 0, 10), 0.3 * 0.01);
  EXPECT_GT(ramp_weight(RampSchedule::sigmoid, 0.3, 10, 10), 0.3 * 0.99);
}

TEST(Stabilisers, SurgeryRemovesOnlyTheConflictingComponent) {
  const float pol[3] = {1.0f, 0.0f, 0.0f};
  float conflict[3] = {-2.0f, 1.0f, 0.5f};
  EXPECT_TRUE(surgery_project(conflict, pol, 3));
  EXPECT_FLOAT_EQ(conflict[0], 0.0f);  // now orthogonal to the policy gradient
  EXPECT_FLOAT_EQ(conflict[1], 1.0f);
  EXPECT_FLOAT_EQ(conflict[2], 0.5f);
  float agree[3] = {2.0f, 1.0f, 0.0f};
  EXPECT_FALSE(surgery_project(agree, pol, 3));
  EXPECT_FLOAT_EQ(agree[0], 2.0f);
}

TEST(Stabilisers, RouterTemperatureRule) {
  RouterTemperatureRule r;  // 75 % utilisation, monopoly 50 %, ×0.9 / ×1.1
  const int64_t spread[4] = {10, 10, 10, 10}, idle[4] = {20, 20, 0, 0}, mono[4] = {70, 10, 10, 10};
  EXPECT_FLOAT_EQ(router_temperature_update(1.0f, spread, 4, r), 1.0f);
  EXPECT_FLOAT_EQ(router_temperature_update(1.0f, idle, 4, r), 0.9f);
  EXPECT_FLOAT_EQ(router_temperature_update(1.0f, mono, 4, r), 1.1f);
}

TEST(Stabilisers, OffByDefault) {
  const RlConfig c;
  EXPECT_EQ(c.router_kl_coef, 0.0f);
  EXPECT_EQ(c.calib_coef, 0.0f);
  EXPECT_FALSE(c.grad_surgery);
  EXPECT_EQ(c.router_temp_every, 0);
  EXPECT_EQ(c.rollout_staleness, 0);
  EXPECT_FALSE(c.shared_prefix_routing);
  EXPECT_FALSE(c.freeze_router);
}

TEST(Stabilisers, EachSwitchRunsAndChangesTheRun) {
  const auto dir = std::filesystem::temp_directory_path() / ("moerl_test_stab_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto run = [&](const std::string& name, std::vector<std::string> sets) {
    sets.push_back("task.partial_credit=true");  // nonzero advantages from a random policy
    sets.push_back("model.load_balance=aux_loss");
    RunOptions o;
    o.out = (dir / (name + ".h5")).string();
    o.cache_dir = (dir / "cache").string();
    o.progress = false;
    EXPECT_EQ(run_rl(test::tiny_scenario(sets), o).status, "complete") << name;
    return o.out;
  };
  const std::string base = run("base", {});
  const std::string kl = run("kl", {"rl.router_kl_coef=0.5"});
  const std::string calib = run("calib", {"rl.calib_coef=0.5", "rl.calib_schedule=linear", "rl.calib_every=2"});
  const std::string surgery = run("surgery", {"rl.grad_surgery=true", "model.aux_loss_coef=1"});
  // every expert is busy here; a 1 % monopoly threshold makes the rule fire on every step
  const std::string temp = run("temp", {"rl.router_temp_every=1", "rl.router_temp_monopoly=0.01"});
  for (const std::string& f : {kl, calib, surgery, temp})
    EXPECT_NE(test::run_metric(f, "loss"), test::run_metric(base, "loss")) << f;  // the switch changes the run
  const auto lam = test::run_metric(calib, "calib_lambda");  // linear ramp on steps 0 and 2 of 3
  EXPECT_EQ(lam[0], 0.0);
  EXPECT_EQ(lam[1], 0.0);
  EXPECT_NEAR(lam[2], 0.5 * 2.0 / 3.0, 1e-6);
  for (double x : test::run_metric(surgery, "surgery_frac")) EXPECT_TRUE(x >= 0.0 && x <= 1.0);
  const auto tau = test::run_metric(temp, "router_temperature_mean");  // ×1.1 after each of the 3 steps
  EXPECT_NEAR(tau.back(), 1.1 * 1.1 * 1.1, 1e-5);
  for (double x : test::run_metric(base, "surgery_frac")) EXPECT_EQ(x, 0.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moerl
