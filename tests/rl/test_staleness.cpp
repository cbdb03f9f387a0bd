// Policy staleness (metric staleness_kl): the k3 of π_old/π_θ over the response tokens of a step's
// last mini-batch. With one mini-batch π_θ is π_old up to the train engine's batch variance; with
// several, the earlier updates move π_θ away from it.
#include <gtest/gtest.h>

#include <cmath>

#include "models/params.h"
#include "rl_fixture.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

std::vector<double> staleness(const std::vector<std::string>& sets) {
  const Scenario s = test::tiny_scenario(sets);
  Model m(s.model);
  params_init(&m.params(), s.model, 1);
  RlTrainer trainer(test::rl_setup(s), &m);
  RunResults res;
  for (int i = 0; i < s.rl.steps; ++i) trainer.step(i, &res);
  return *res.series("staleness_kl");
}

TEST(Staleness, GrowsWithTheUpdatesBeforeTheLastMinibatch) {
  const std::vector<std::string> common = {"task.partial_credit=true", "optim.lr=3e-2"};
  std::vector<std::string> one = common, four = common;
  one.push_back("rl.minibatches=1");
  four.push_back("rl.minibatches=4");
  const std::vector<double> on = staleness(one), off = staleness(four);
  ASSERT_EQ(on.size(), 3u);
  ASSERT_EQ(off.size(), 3u);
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_GE(on[i], 0.0);
    EXPECT_LT(on[i], 1e-6) << i;  // π_θ is π_old, but for batch variance
    EXPECT_GT(off[i], 1e-5) << i;  // three updates of lr 3e-2 before the last mini-batch
  }
}

}  // namespace
}  // namespace moerl
