// test_precision_fast.cpp — the vector roundings of precision.cpp (round_array and the scaled
// quantisation of quantize_matrix) against the scalar round_to_format, bit for bit: NaN payloads
// and the sign of zero included (test_precision.cpp's `same` treats all NaNs alike).
//
// E4M3 and BF16 take arithmetic shortcuts in the vector path (E4M3: saturate, then add and
// subtract a power-of-two-derived constant; BF16: integer rounding without the subnormal and
// overflow cases). These tests sweep the ranges where the shortcuts could go wrong: every
// midpoint of every binade (normal and subnormal), the saturation and overflow boundaries, zeros,
// FP32 subnormals, infinities and NaNs with payloads — and dense runs of consecutive patterns.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

// Both signs of: every multiple of 2^(e−M−1) for a few steps around each representable value of
// a format with M fraction bits (so every midpoint and its FP32 neighbours), binades e_lo..e_hi.
std::vector<float> boundary_values(int M, int e_lo, int e_hi) {
  std::vector<float> v;
  for (int e = e_lo; e <= e_hi; ++e)
    for (int m = 0; m < (2 << M); ++m) {  // 2^(M+1) half-steps per binade
      const float mid = std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(2 << M), e);
      const uint32_t b = bits_of(mid);
      for (int d = -3; d <= 3; ++d) {
        v.push_back(float_of(b + d));
        v.push_back(-float_of(b + d));
      }
    }
  return v;
}

std::vector<float> special_values() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, 448.0f, -448.0f, 464.0f, -464.0f,
                          480.0f, 1e30f, -1e30f, 3.3895e38f, -3.3895e38f, 3.40282347e38f,
                          1e-45f, -1e-45f, 1.17549435e-38f, 5.9e-39f};
  // NaNs: quiet and signalling, both signs, with low payload bits
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FA5A5A5u, 0xFFC00001u, 0xFF812345u, 0x7FFFFFFFu})
    v.push_back(float_of(nan));
  return v;
}

void expect_round_array_exact(const std::vector<float>& x, Format f) {
  std::vector<float> y = x;
  round_array(y.data(), static_cast<int64_t>(y.size()), f);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(bits_of(y[i]), bits_of(round_to_format(x[i], f)))
        << format_name(f) << " x bits 0x" << std::hex << bits_of(x[i]);
}

TEST(PrecisionFast, E4m3RoundArrayAtEveryMidpoint) {
  // binades −12 (far below the subnormal range, 2^−9 spacing) .. 9 (above the saturation at 448)
  std::vector<float> x = boundary_values(3, -12, 9);
  for (float v : special_values()) x.push_back(v);
  expect_round_array_exact(x, Format::fp8_e4m3);
}

TEST(PrecisionFast, Bf16RoundArrayAtEveryMidpoint) {
  std::vector<float> x = boundary_values(7, -130, -120);  // FP32 subnormals and the smallest normals
  const std::vector<float> top = boundary_values(7, 125, 127);  // up to the overflow to inf
  x.insert(x.end(), top.begin(), top.end());
  const std::vector<float> mid = boundary_values(7, -2, 2);
  x.insert(x.end(), mid.begin(), mid.end());
  for (float v : special_values()) x.push_back(v);
  expect_round_array_exact(x, Format::bf16);
}

// Dense runs of consecutive bit patterns (every pattern in each run), spread over all exponents
// and both signs.
TEST(PrecisionFast, RoundArrayDenseRuns) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 512; ++hi)  // sign + exponent field
    for (uint32_t lo = 0; lo < 4096; ++lo)
      x.push_back(float_of((hi << 23) | (lo * 2047u % (1u << 23))));
  expect_round_array_exact(x, Format::fp8_e4m3);
  expect_round_array_exact(x, Format::bf16);
}

// quantize_matrix's vector path (x / scale, round, · scale) against the same steps in scalar
// code, for row and 1×B block scales over rows whose magnitudes span many binades; NaN, inf and
// zeros inside the groups, and groups whose amax is 0 (scale 1), inf or NaN-only.
TEST(PrecisionFast, ScaledQuantisationMatchesScalarBitForBit) {
  const int rows = 64, cols = 256;
  Rng rng(rng_derive(11, static_cast<uint64_t>(Stream::data), {6}));
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i) {
    const int e = static_cast<int>(rng.below(40)) - 20;  // each row in its own range
    for (int j = 0; j < cols; ++j) {
      float v = std::ldexp(rng.normal(), e);
      if (rng.below(50) == 0) v = std::ldexp(v, -30);  // far below the group's FP8 range
      x[static_cast<size_t>(i) * cols + j] = v;
    }
  }
  const std::vector<float> sp = special_values();
  for (size_t k = 0; k < sp.size(); ++k) x[(k * 997) % x.size()] = sp[k];
  for (int j = 0; j < 128; ++j) x[static_cast<size_t>(3) * cols + j] = 0.0f;   // amax 0
  for (int j = 0; j < 128; ++j) x[static_cast<size_t>(5) * cols + j] = NAN;    // NaN only
  x[static_cast<size_t>(7) * cols + 9] = INFINITY;                              // amax inf
  for (Format f : {Format::fp8_e4m3, Format::bf16, Format::fp8_e5m2}) {
    for (Scaling s : {Scaling::row, Scaling::block}) {
      const int gc = s == Scaling::row ? 1 : cols / 128;
      std::vector<float> out(x.size()), scales(static_cast<size_t>(rows) * gc);
      quantize_matrix(out.data(), scales.data(), x.data(), rows, cols, f, s, 1, 128);
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) {
          const size_t at = static_cast<size_t>(i) * cols + j;
          const float scale = scales[static_cast<size_t>(i) * gc + (s == Scaling::row ? 0 : j / 128)];
          const float want = round_to_format(x[at] / scale, f) * scale;
          ASSERT_EQ(bits_of(out[at]), bits_of(want))
              << format_name(f) << " " << scaling_name(s) << " row " << i << " col " << j
              << " x bits 0x" << std::hex << bits_of(x[at]);
        }
    }
  }
}

}  // namespace
}  // namespace moerl
