// Router drift (sim/rl/router_drift.h): the probe's routing against the base policy's, counted by
// an independent set comparison; a run records it at its evaluations and resumes it bit-identically.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "models/params.h"
#include "sim/rl/router_drift.h"
#include "sim/tasks/task.h"
#include "tests/rl/rl_fixture.h"

namespace moerl {
namespace {

// The share of own (position, layer) routes of layer l whose expert set differs, by std::set.
double drift_by_sets(const RouterProbe& p, const std::vector<int32_t>& a, int l, int K) {
  int64_t moved = 0, total = 0;
  for (int s = 0; s < p.B(); ++s)
    for (int t = 0; t < p.lengths[s]; ++t) {
      const size_t at = ((static_cast<size_t>(l) * p.B() + s) * p.T + t) * K;
      const std::set<int32_t> x(a.begin() + at, a.begin() + at + K), y(p.base_ids.begin() + at, p.base_ids.begin() + at + K);
      moved += x != y;
      ++total;
    }
  return static_cast<double>(moved) / total;
}

TEST(RouterDrift, ZeroOnTheBaseAndOnlyDownstreamOfAChangedRouter) {
  const Scenario s = test::tiny_scenario({"model.n_layers=3", "model.n_experts=8"});
  const auto task = task_create(s.task);
  Model model(s.model);
  params_init(&model.params(), s.model, 11);
  const NumericsProfile prof = s.profile("fp32-ref");
  RouterProbe probe = router_probe_make(*task, 5, 6, ModelParallel{});
  ASSERT_EQ(probe.B(), 6);
  for (int b = 0; b < probe.B(); ++b) {
    EXPECT_GT(probe.lengths[b], task->prompt_len());  // prompt and the reference answer
    EXPECT_LE(probe.lengths[b], probe.T);
  }
  probe.base_ids = router_probe_route(model, probe, prof);
  const int L = s.model.n_layers, K = s.model.top_k;
  for (double d : router_probe_drift(probe, router_probe_route(model, probe, prof), L, K, ModelParallel{}))
    EXPECT_EQ(d, 0.0);
  // negate layer 1's router: its choices move (the bottom experts become the top), layer 0's cannot
  const ParamInfo& info = model.params().info("layers.1.moe.router");
  float* w = model.params().get("layers.1.moe.router");
  for (int64_t i = 0; i < info.size; ++i) w[i] = -w[i];
  model.invalidate_packed_weights();
  const std::vector<int32_t> ids = router_probe_route(model, probe, prof);
  const std::vector<double> drift = router_probe_drift(probe, ids, L, K, ModelParallel{});
  EXPECT_EQ(drift[0], 0.0);
  EXPECT_GT(drift[1], 0.9);  // top-2 of 8 negated: the new set shares no expert unless ties
  for (int l = 0; l < L; ++l) EXPECT_DOUBLE_EQ(drift[l], drift_by_sets(probe, ids, l, K)) << "layer " << l;
}

TEST(RouterDrift, RecordedAtEvaluationsAndResumedBitIdentically) {
  const std::string dir = test::tmp_dir("router_drift");
  const Scenario s = test::tiny_scenario({"rl.drift_probes=8", "rl.eval_every=2", "rl.steps=4",
                                          "rl.checkpoint_every=1", "optim.lr=3e-2", "task.partial_credit=true"});
  test::run_quiet(s, dir + "/full.h5", dir);
  const std::vector<double> full = test::run_metric(dir + "/full.h5", "router_drift");
  ASSERT_EQ(full.size(), 4u);
  EXPECT_TRUE(std::isnan(full[0]) && std::isnan(full[2]));  // no evaluation at steps 1 and 3
  EXPECT_GT(full[3], 0.0);  // the large step moves the router's choices
  EXPECT_LE(full[3], 1.0);
  const std::vector<double> lmax = test::run_metric(dir + "/full.h5", "router_drift_layer_max");
  EXPECT_GE(lmax[3], full[3]);
  test::QuietRun half;
  half.max_steps = 3;
  test::run_quiet(s, dir + "/resumed.h5", dir, half);
  test::QuietRun rest;
  rest.resume = true;
  test::run_quiet(s, dir + "/resumed.h5", dir, rest);
  const std::vector<double> resumed = test::run_metric(dir + "/resumed.h5", "router_drift");
  ASSERT_EQ(resumed.size(), full.size());
  for (size_t i = 1; i < full.size(); i += 2) EXPECT_EQ(resumed[i], full[i]) << "step " << i + 1;
}

TEST(RouterDrift, RefusesANegativeCount) {
  EXPECT_THROW(test::tiny_scenario({"rl.drift_probes=-1"}), std::invalid_argument);
}

}  // namespace
}  // namespace moerl
