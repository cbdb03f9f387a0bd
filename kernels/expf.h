// expf.h — e^x in FP32 with bits fixed by this file, not by the platform's libm: the algorithm of
// glibc's expf (glibc ≥ 2.28, sysdeps/ieee754/flt-32/e_expf.c by Szabolcs Nagy, as built with FMA
// on x86-64: Debian 12's __expf_fma), transcribed operation by operation, with its table and
// polynomial constants. On such a glibc it returns exactly std::exp(float) for every input (checked
// over a sweep of all 2^32 patterns in tests/kernels/test_expf.cpp); elsewhere it stays the same
// function, so the scalar references and the vectorised kernels agree everywhere.
//
// Algorithm (double precision inside; N = 32):
//   z  = fma(N/ln2, x, 1.5·2^52);  k = bits(z);  kd = z − 1.5·2^52       (k = round(x·N/ln2))
//   r  = fma(N/ln2, x, −kd)                                              (|r| ≤ 1/2)
//   s  = asdouble(T[k mod N] + (k << 47))                                 (2^(k/N))
//   y  = fma(fma(r, C0, C1), r·r, fma(r, C2, 1)) · s ;  return (float) y (round to nearest)
// for |x| < 88 (bits(x) >> 20 & 0x7ff < 0x42b); beyond that: −inf → 0, ±inf / NaN → x + x,
// x > 0x1.62e42ep6 → +inf, x < −0x1.9fe368p6 → 0, x < −0x1.9d1d9ep6 → 2^−149 (glibc's
// "may underflow" value), otherwise the main path.
//
// Defined here (static inline: each translation unit keeps its own copy, compiled for the code it
// is inlined into), so that every kernel compiled for an instruction set with FMA (each Highway
// target of kernels/cpu/) turns its std::fma into the instruction instead of a call into libm —
// the same bits either way (an FMA has one rounding wherever it runs). Not `inline` with external
// linkage: the linker could then keep a copy compiled for AVX-512 for every caller.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moerl {

namespace expf_detail {
inline constexpr uint64_t kInvLn2N = 0x40471547652b82feull;  // N/ln2 = 32/ln 2
inline constexpr uint64_t kShift = 0x4338000000000000ull;    // 1.5·2^52
inline constexpr uint64_t kC0 = 0x3ebc6af84b912394ull;
inline constexpr uint64_t kC1 = 0x3f2ebfce50fac4f3ull;
inline constexpr uint64_t kC2 = 0x3f962e42ff0c52d6ull;
// T[i] = bits(2^(i/32)) − (i << 47)
inline constexpr uint64_t kTable[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};
inline constexpr uint32_t kMainTop = 0x42b;  // (bits >> 20) & 0x7ff below this: main path

static inline double as_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
static inline uint64_t as_u64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
static inline float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace expf_detail

static inline float exp_f32(float x) {
  using namespace expf_detail;
  uint32_t ux;
  std::memcpy(&ux, &x, 4);
  if (((ux >> 20) & 0x7ff) >= kMainTop) {
    if (ux == 0xff800000u) return 0.0f;                 // −inf
    if (((ux >> 20) & 0x7ff) >= 0x7f8) return x + x;    // +inf, NaN
    if (x > as_float(0x42b17217u)) return INFINITY;     // overflow
    if (x < as_float(0xc2cff1b4u)) return 0.0f;         // underflow
    if (x < as_float(0xc2ce8ecfu)) return as_float(1);  // "may underflow": 2^-149
  }
  const double xd = static_cast<double>(x);
  const double inv = as_double(kInvLn2N), shift = as_double(kShift);
  const double z = std::fma(inv, xd, shift);
  const uint64_t ki = as_u64(z);
  const double kd = z - shift;
  const double r = std::fma(inv, xd, -kd);
  const double s = as_double(kTable[ki & 31] + (ki << 47));
  const double z2 = std::fma(r, as_double(kC0), as_double(kC1));
  const double r2 = r * r;
  double y = std::fma(r, as_double(kC2), 1.0);
  y = std::fma(z2, r2, y);
  y = y * s;
  return static_cast<float>(y);
}

}  // namespace moerl
