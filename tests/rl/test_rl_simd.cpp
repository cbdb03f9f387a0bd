// An RL run's metrics and final weights do not depend on the SIMD target the CPU kernels run on
// (kernels/simd.h): the tiny scenario with the emulated FP8 rollout and BF16 train engines (every
// precision path: scaled rounding, the limited accumulator, split-K orders, attention, SwiGLU,
// AdamW) under the best target and under the portable one, compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/simd.h"
#include "store/h5io.h"
#include "rl_fixture.h"
#include "sim/io/model_io.h"
#include "sim/jobs/run.h"

namespace moerl {
namespace {

TEST(RlSimd, MetricsAreBitIdenticalAcrossTargets) {
  const std::vector<std::string> targets = simd_targets_available();
  ASSERT_GE(targets.size(), 2u);  // the best target and the portable "scalar" one at least
  const std::string first = targets.front(), last = targets.back();
  const auto dir = std::filesystem::temp_directory_path() / ("moerl_test_simd_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Scenario s = test::tiny_scenario({"rl.steps=2", "rl.eval_every=2", "engines.rollout=fp8-rollout",
                                          "engines.train=bf16-train"});
  const std::string saved = simd_target();
  for (const std::string& t : {first, last}) {
    simd_select(t);
    RunOptions o;
    o.out = (dir / (t + ".h5")).string();
    o.cache_dir = (dir / "cache").string();
    o.progress = false;
    EXPECT_EQ(run_rl(s, o).status, "complete") << t;
  }
  simd_select(saved);
  const std::string a = (dir / (first + ".h5")).string(), b = (dir / (last + ".h5")).string();
  int compared = 0;
  for (const std::string& name : H5File::open(a).datasets_below("metrics")) {
    const std::string m = name.substr(8);
    if (m.rfind("time_", 0) == 0) continue;  // wall-clock times differ, nothing else may
    const auto x = test::run_metric(a, m), y = test::run_metric(b, m);
    ASSERT_EQ(x.size(), y.size()) << m;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!(std::isnan(x[i]) && std::isnan(y[i]))) {
        EXPECT_EQ(x[i], y[i]) << m << "[" << i << "] " << first << " vs " << last;
      }
    }
    ++compared;
  }
  EXPECT_GT(compared, 10);
  const auto ma = model_load_checkpoint(run_checkpoint_path(a));
  const auto mb = model_load_checkpoint(run_checkpoint_path(b));
  EXPECT_EQ(ma->params().data(), mb->params().data()) << first << " vs " << last;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moerl
