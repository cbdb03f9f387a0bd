// exp_f32 (kernels/expf.h) and its vector twin: under every SIMD target the vector kernel gives the
// scalar's bits on a sweep of
// every 61st float pattern plus the edges of each special range; the scalar equals the platform's
// std::exp(float) where that is glibc's expf (the transcribed algorithm) — checked on the same
// sweep, and skipped elsewhere. (An exhaustive run over all 2^32 patterns, done once, found no
// difference from Debian 12's glibc 2.36.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/expf.h"
#include "kernels/simd.h"

#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

namespace moerl {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

std::vector<float> sweep() {
  std::vector<float> xs;
  for (uint64_t u = 0; u < (1ull << 32); u += 61) xs.push_back(from_bits(static_cast<uint32_t>(u)));
  // around the thresholds of expf.h, both signs of zero, infinities, NaNs
  for (uint32_t edge : {0x42b17217u, 0xc2cff1b4u, 0xc2ce8ecfu, 0x42b00000u, 0xc2b00000u, 0x42affffeu})
    for (int d = -40; d <= 40; ++d) xs.push_back(from_bits(edge + static_cast<uint32_t>(d)));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x00000001u})
    xs.push_back(from_bits(u));
  return xs;
}

TEST(ExpF32, SpecialValues) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f32(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_EQ(exp_f32(89.0f), INFINITY);
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(exp_f32(-103.5f), from_bits(1));  // glibc's "may underflow" value, 2^-149
  // within one ulp of the double-precision exponential (glibc's bound: 0.502 ulp)
  for (float x : {-10.0f, -1.0f, -0.1f, 0.5f, 1.0f, 3.0f, 20.0f, 80.0f}) {
    const double want = std::exp(static_cast<double>(x));
    EXPECT_NEAR(exp_f32(x), want, std::fabs(want) * 1.2e-7) << x;
  }
}

TEST(ExpF32, VectorEqualsScalarAndScalarEqualsGlibc) {
  const std::vector<float> xs = sweep();
  size_t libm_diff = 0;
  const std::string saved = simd_target();
  std::vector<float> y(xs.size());
  for (const std::string& t : simd_targets_available()) {  // every target's vector kernel
    simd_select(t);
    cpu::exp_f32_array(y.data(), xs.data(), static_cast<int64_t>(xs.size()));
    size_t d = 0;
    for (size_t i = 0; i < xs.size(); ++i) d += !same(y[i], exp_f32(xs[i]));
    EXPECT_EQ(d, 0u) << "target " << t;
  }
  simd_select(saved);
#if defined(__GLIBC__) && defined(__x86_64__)
  // glibc picks its FMA expf at run time on CPUs with FMA and AVX2, whatever this file's flags
  if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2"))
    GTEST_SKIP() << "glibc runs its non-FMA expf on this CPU; exp_f32 keeps its own bits";
  for (float x : xs) libm_diff += !same(exp_f32(x), std::exp(x));
  EXPECT_EQ(libm_diff, 0u) << "glibc " << gnu_get_libc_version();
#else
  GTEST_SKIP() << "std::exp is not glibc's FMA expf here; exp_f32 keeps its own bits";
#endif
}

}  // namespace
}  // namespace moerl
