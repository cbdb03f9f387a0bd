// expf.cpp — the scalar exp_f32 of expf.h (the vectorised twins: kernels/cpu/expf_avx512-inl.h on AVX-512, kernels/cpu/expf-inl.h on the other vector targets).
#include "kernels/expf.h"

#include <cmath>
#include <cstring>

namespace moerl {

namespace {
double as_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
uint64_t as_u64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

float exp_f32(float x) {
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
