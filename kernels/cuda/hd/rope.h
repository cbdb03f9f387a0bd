// hd/rope.h — rotate-half RoPE of one (position, pair j): the angle in double rounded once to
// float cos/sin, then the FP32 rotation (ref/rope.cpp, cpu/rope.cpp):
//   inv_freq = theta^(−2j/Dh), angle = pos·inv_freq, c = float(cos angle), s = sign·float(sin angle)
//   (a, b) ← (a·c − b·s, b·c + a·s)        sign +1 forward, −1 backward
// On the device pow/cos/sin are CUDA's double functions (≤ 2 ulp in double): the float c, s equal
// the host's except when the double lands within a few ulp of a float rounding boundary.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

MOERL_HD void hd_rope_cos_sin(float* c, float* s, int32_t pos, int j, int Dh, float theta) {
  const double inv_freq = pow(static_cast<double>(theta), -2.0 * j / Dh);
  const double angle = static_cast<double>(pos) * inv_freq;
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
}

// Rotates the pair (*a, *b) = (x_j, x_{j+Dh/2}) by c, s (s already carrying the sign).
MOERL_HD void hd_rope_rotate(float* a, float* b, float c, float s) {
  const float x = *a, y = *b;
  *a = hd_sub(hd_mul(x, c), hd_mul(y, s));
  *b = hd_add(hd_mul(y, c), hd_mul(x, s));
}

// The whole pair step: x[N, H, Dh] in place at (n, h, j), sign ±1.
MOERL_HD void hd_rope_pair(float* x, const int32_t* pos, int n, int h, int j, int H, int Dh,
                           float theta, float sign) {
  float c, s;
  hd_rope_cos_sin(&c, &s, pos[n], j, Dh, theta);
  float* xh = x + (static_cast<int64_t>(n) * H + h) * Dh;
  hd_rope_rotate(xh + j, xh + j + Dh / 2, c, hd_mul(sign, s));
}

}  // namespace moerl::cuda
