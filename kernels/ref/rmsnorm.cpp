// ref/rmsnorm.cpp — RMSNorm, scalar reference in the canonical fixed order.
// Forward writes out and rstd with '='; backward accumulates dinp and dweight with '+='.
//
// Operation sequence (the fast kernel repeats it exactly under ReduceCtx{}):
//   ss   = fma chain of x_i·x_i over i = 0..D-1 starting from 0
//   rstd = 1 / sqrt(ss / D + eps)
//   out_i = (x_i · rstd) · w_i
#include <cmath>

#include "kernels/ref/ops.h"

namespace moerl::ref {

// out[N,D], rstd[N], inp[N,D], weight[D]
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * D;
    float* y = out + static_cast<int64_t>(n) * D;
    float ss = 0.0f;
    for (int i = 0; i < D; ++i) ss = std::fma(x[i], x[i], ss);
    float r = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
    for (int i = 0; i < D; ++i) y[i] = (x[i] * r) * weight[i];
    rstd[n] = r;
  }
}

// dinp[N,D] +=, dweight[D] +=, dout[N,D], inp[N,D], weight[D], rstd[N]
// With g_i = dy_i·w_i and r = rstd:  dx_i = g_i·r − (r³/D)·x_i·Σ_j g_j x_j ;  dw_i = Σ_n dy_i·x_i·r.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D) {
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<int64_t>(n) * D;
    const float* dy = dout + static_cast<int64_t>(n) * D;
    float r = rstd[n];
    if (dinp) {
      float* dx = dinp + static_cast<int64_t>(n) * D;
      float dot = 0.0f;  // Σ g_j x_j, fma chain j = 0..D-1
      for (int i = 0; i < D; ++i) dot = std::fma(dy[i] * weight[i], x[i], dot);
      float coef = dot * (r * r * r) / static_cast<float>(D);
      for (int i = 0; i < D; ++i) dx[i] += (dy[i] * weight[i]) * r - coef * x[i];
    }
    if (dweight) {
      for (int i = 0; i < D; ++i) dweight[i] += dy[i] * (x[i] * r);  // rows in order n = 0..N-1
    }
  }
}

}  // namespace moerl::ref
