// test_simd_targets.cpp — the numerics contract across instruction sets (kernels/simd.h): every
// dispatched kernel gives the scalar reference's bits under every target this CPU supports
// (the loop is inside each test), and a short RL run gives bit-identical metrics under two
// targets (tests/rl). Besides, MOERL_SIMD=<target> in the environment restricts this whole test
// binary to one target before any test runs (ctest runs the kernel suites so under each target,
// tests/CMakeLists.txt); a target this CPU lacks skips the binary (exit 77).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "kernels/ref/ops.h"
#include "kernels/simd.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

// Runs at load time, before gtest's main: the restriction holds for every test of the binary.
const bool kEnvTarget = [] {
  const char* v = std::getenv("MOERL_SIMD");
  if (!v || !*v) return false;
  for (const std::string& t : simd_targets_available())
    if (t == v) {
      simd_select(v);
      std::fprintf(stderr, "test_kernels: SIMD target restricted to %s\n", v);
      return true;
    }
  std::fprintf(stderr, "test_kernels: MOERL_SIMD=%s is not available on this CPU: skipped\n", v);
  std::exit(77);
}();

// Restores the unrestricted (or environment-given) target after a test's loop.
struct TargetGuard {
  std::string saved = simd_target();
  ~TargetGuard() { simd_select(kEnvTarget ? saved : std::string("best")); }
};

TEST(SimdTargets, NamesAndErrors) {
  const std::vector<std::string> avail = simd_targets_available();
  ASSERT_FALSE(avail.empty());
  EXPECT_EQ(avail.back(), "scalar");  // the portable target is always compiled and supported
  TargetGuard guard;
  for (const std::string& t : avail) {
    simd_select(t);
    EXPECT_EQ(simd_target(), t);
  }
  try {
    simd_select("avx1024", "--simd");
    FAIL() << "unknown name accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--simd"), std::string::npos) << msg;
    EXPECT_NE(msg.find("avx1024"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;  // the allowed values
  }
}

}  // namespace
}  // namespace moerl
