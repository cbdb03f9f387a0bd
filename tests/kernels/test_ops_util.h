// test_ops_util.h — shared helpers of the test_ops_*.cpp suites: seeded inputs, bitwise and
// tolerance comparisons, and the central finite-difference gradient check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/rng.h"

namespace moerl::test_ops {

// The decode cache's keys (kernels/kv_cache.h: [B, D, Tmax]) of row-major keys [B, Tmax, D].
inline std::vector<float> keys_transposed(const std::vector<float>& rows, int B, int Tmax, int D) {
  std::vector<float> kT(rows.size());
  kcache_from_rows(kT.data(), rows.data(), B, Tmax, D);
  return kT;
}

// printf-style label for assertion messages (string operator+ chains trip GCC 12's -Wrestrict).
inline std::string label(const char* fmt, ...) {
  char buf[256];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

inline constexpr float kEps = std::numeric_limits<float>::epsilon() / 2;  // 2^-24, fp32 unit roundoff

// n standard normals (times `scale`) from the data stream at coordinates (tag, a, b).
inline std::vector<float> normals(size_t n, uint64_t tag, uint64_t a = 0, uint64_t b = 0,
                                  float scale = 1.0f) {
  Rng rng(rng_derive(1234, static_cast<uint64_t>(Stream::data), {tag, a, b}));
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.normal();
  return v;
}

// Number of positions where a and b differ in bits (so −0 ≠ +0 and NaN payloads count).
inline size_t bit_diffs(const float* a, const float* b, size_t n) {
  size_t diffs = 0;
  for (size_t i = 0; i < n; ++i) diffs += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return diffs;
}
inline size_t bit_diffs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return bit_diffs(a.data(), b.data(), std::min(a.size(), b.size()));
}

// Expects got == ref bit for bit; reports the first mismatch.
inline void expect_bits(const std::vector<float>& ref, const std::vector<float>& got,
                        const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::memcmp(&ref[i], &got[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": first bit mismatch at " << i << ": ref " << ref[i] << " got "
                    << got[i] << " (" << bit_diffs(ref, got) << " of " << ref.size() << " differ)";
      return;
    }
  }
}

// Expects |got − ref| ≤ abs + |ref|·rel everywhere; reports the worst excess.
inline void expect_close(const std::vector<float>& ref, const std::vector<float>& got, double abs,
                         double rel, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    double tol = abs + std::fabs(static_cast<double>(ref[i])) * rel;
    if (!(err <= tol) && (err - tol > worst || worst == 0.0)) {
      worst = std::isnan(err) ? 1e300 : err - tol;
      at = i;
    }
  }
  EXPECT_EQ(worst, 0.0) << what << ": at " << at << " ref " << ref[at] << " got " << got[at]
                        << " (abs " << abs << ", rel " << rel << ")";
}

// Σ w_i·y_i in double: the scalar objective of the finite-difference checks.
inline double weighted_sum(const std::vector<float>& w, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(w[i]) * y[i];
  return s;
}

// Central finite differences of J at up to `samples` seeded coordinates of x, compared with the
// analytic gradient `grad` (same length as x):  |fd − grad| ≤ rel·|grad| + abs.
// The step actually taken is (x+h) − (x−h) as rounded in float, so rounding of x±h does not bias
// the quotient. J must read x (it is perturbed in place and restored).
// Why these numbers (callers pass h = 1e-3, rel = 1e-2 and an abs floor ~1e-3): the truncation
// error of a central difference is O(h²·J''') ≈ 1e-6 for O(1) curvature; the float rounding of
// the outputs that depend on x_i is ~6e-8·Σ|w·y| per evaluation, divided by 2h = 2e-3 it gives
// ~1e-4 — both far under the tolerance, while a wrong term in a backward is an O(1) relative error.
inline void check_grad(std::vector<float>& x, const std::vector<float>& grad,
                       const std::function<double()>& J, const std::string& what, int samples = 48,
                       float h = 1e-3f, double rel = 1e-2, double abs = 1e-3) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  Rng rng(rng_derive(99, static_cast<uint64_t>(Stream::data), {x.size(), grad.size()}));
  const size_t n = x.size();
  const bool all = n <= static_cast<size_t>(samples);
  const int count = all ? static_cast<int>(n) : samples;
  int failures = 0;
  for (int s = 0; s < count; ++s) {
    size_t i = all ? static_cast<size_t>(s) : rng.below(n);
    const float x0 = x[i];
    const float xp = x0 + h, xm = x0 - h;
    x[i] = xp;
    const double jp = J();
    x[i] = xm;
    const double jm = J();
    x[i] = x0;
    const double fd = (jp - jm) / (static_cast<double>(xp) - xm);
    const double tol = rel * std::fabs(grad[i]) + abs;
    if (!(std::fabs(fd - grad[i]) <= tol) && failures++ < 5)
      ADD_FAILURE() << what << ": d/dx[" << i << "] analytic " << grad[i] << " fd " << fd;
  }
  EXPECT_EQ(failures, 0) << what;
}

}  // namespace moerl::test_ops
