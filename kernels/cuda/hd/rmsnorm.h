// hd/rmsnorm.h — RMSNorm's per-row and per-element formulas (ref/rmsnorm.cpp's operation
// sequence; the sums themselves are block reductions, hd/reduce.h):
//   rstd = 1 / sqrt(ss / D + eps);  out_i = (x_i · rstd) · w_i
//   coef = dot · (r·r·r) / D with dot = Σ (dy_j·w_j)·x_j;  dx_i += (dy_i·w_i)·r − coef·x_i
//   dw_i += dy_i · (x_i · r)   (rows in order n = 0..N-1)
#pragma once

#include "kernels/cuda/hd/reduce.h"

namespace moerl::cuda {

MOERL_HD float hd_rmsnorm_rstd(float ss, int D, float eps) {
  return hd_div(1.0f, hd_sqrt(hd_add(hd_div(ss, static_cast<float>(D)), eps)));
}
MOERL_HD float hd_rmsnorm_out(float x, float rstd, float w) { return hd_mul(hd_mul(x, rstd), w); }

// Thread t's chain of Σ (dy_j·w_j)·x_j over its terms (step 1 of hd/reduce.h).
MOERL_HD float hd_rmsnorm_chain_gx(const float* dy, const float* w, const float* x, int D, int t,
                                   int T) {
  float acc = 0.0f;
  for (int i = t; i < D; i += T) acc = hd_fma(hd_mul(dy[i], w[i]), x[i], acc);
  return acc;
}
MOERL_HD float hd_rmsnorm_coef(float dot, float rstd, int D) {
  return hd_div(hd_mul(dot, hd_mul(hd_mul(rstd, rstd), rstd)), static_cast<float>(D));
}
// The term added to dx_i.
MOERL_HD float hd_rmsnorm_dx(float dy, float w, float x, float rstd, float coef) {
  return hd_sub(hd_mul(hd_mul(dy, w), rstd), hd_mul(coef, x));
}
// dw_i after adding rows 0..N-1 of column i to acc (the column's current value).
MOERL_HD float hd_rmsnorm_dw_column(float acc, const float* dout, const float* inp,
                                    const float* rstd, int N, int D, int i) {
  for (int64_t n = 0; n < N; ++n)
    acc = hd_add(acc, hd_mul(dout[n * D + i], hd_mul(inp[n * D + i], rstd[n])));
  return acc;
}

}  // namespace moerl::cuda
