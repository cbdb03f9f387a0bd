// A short RL run with run.backend = cuda (rollout, π_old recompute, training, AdamW all on the
// GPU): it completes with finite metrics, and two runs with the deterministic GPU path are
// bit-identical; a profile with atomics is accepted on cuda and still finite.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "../rl/rl_fixture.h"
#include "gpu_test.h"
#include "sim/jobs/run.h"

namespace moerl {
namespace {

std::string run_to(const Scenario& s, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("moerl_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  RunOptions o;
  o.out = (dir / (name + ".h5")).string();
  o.cache_dir = (dir / "cache").string();
  o.progress = false;
  const RunSummary sum = run_rl(s, o);
  EXPECT_EQ(sum.status, "complete") << name;
  return o.out;
}

TEST(RlGpu, ShortRunOnCudaIsFiniteAndReproducible) {
  MOERL_REQUIRE_GPU();
  const Scenario s = test::tiny_scenario({"run.backend=cuda"});
  const std::string a = run_to(s, "a"), b = run_to(s, "b");
  for (const char* m : {"reward_mean", "kl_rollout_train", "loss", "grad_norm"}) {
    const std::vector<double> va = test::run_metric(a, m), vb = test::run_metric(b, m);
    ASSERT_EQ(va.size(), 3u) << m;
    for (double x : va) EXPECT_TRUE(std::isfinite(x)) << m;
    EXPECT_EQ(va, vb) << m << ": the deterministic GPU path must repeat bit for bit";
  }
}

TEST(RlGpu, AtomicsProfileRunsOnCuda) {
  MOERL_REQUIRE_GPU();
  const Scenario s = test::tiny_scenario(
      {"run.backend=cuda", "profile.atom.base=fp8-rollout", "profile.atom.gemm_order=split_k:4",
       "profile.atom.atomics=true", "engines.rollout=atom"});
  const std::string a = run_to(s, "atom");
  for (double x : test::run_metric(a, "kl_rollout_train")) EXPECT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace moerl
