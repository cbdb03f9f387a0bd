// ref/rope.cpp — rotate-half rotary position embedding, scalar reference. Both directions work in
// place: forward rotates x by +angle, backward rotates dx by −angle (the rotation's transpose).
//
// Angles are computed in double and rounded once: inv_freq_j = theta^(−2j/Dh), angle = pos·inv_freq_j,
// c = float(cos angle), s = float(sin angle). The rotation itself is float:
//   (a, b) ← (a·c − b·s, b·c + a·s)      [forward]
//   (a, b) ← (a·c + b·s, b·c − a·s)      [backward]
#include <cmath>

#include "kernels/ref/ops.h"

namespace moerl::ref {

namespace {
void rope_rotate(float* x, const int32_t* pos, int N, int H, int Dh, float theta, float sign) {
  const int half = Dh / 2;
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < half; ++j) {
      double inv_freq = std::pow(static_cast<double>(theta), -2.0 * j / Dh);
      double angle = static_cast<double>(pos[n]) * inv_freq;
      float c = static_cast<float>(std::cos(angle));
      float s = sign * static_cast<float>(std::sin(angle));
      for (int h = 0; h < H; ++h) {
        float* xh = x + (static_cast<int64_t>(n) * H + h) * Dh;
        float a = xh[j], b = xh[j + half];
        xh[j] = a * c - b * s;
        xh[j + half] = b * c + a * s;
      }
    }
  }
}
}  // namespace

// x[N,H,Dh] in place, pos[N]
void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(x, pos, N, H, Dh, theta, 1.0f);
}

// dx[N,H,Dh] in place (not accumulated: the gradient is transformed), pos[N]
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(dx, pos, N, H, Dh, theta, -1.0f);
}

}  // namespace moerl::ref
