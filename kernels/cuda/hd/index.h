// hd/index.h — index arithmetic of the attention and KV-cache layouts (element offsets, int64).
//   activations q, k, v, out, dq, …   [B, T, H, Dh]   = rows [B·T, H·Dh] (row = token)
//   KV cache                          [B, Tmax, H, Dh] = [B, Tmax, D] with D = H·Dh
//   attention probabilities att       [B, H, T, T]     (query i, key j; zero for j > i)
//   decode query / output             [B, H, Dh]       = [B, D]
// The CUDA kernels number their row blocks as att rows: row = (b·H + h)·T + i.
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace moerl::cuda {

// Element (b, t, h, d) of a [B, T, H, Dh] tensor (T = Tmax for the KV cache).
MOERL_HD int64_t idx_bthd(int b, int t, int h, int d, int T, int H, int Dh) {
  return ((static_cast<int64_t>(b) * T + t) * H + h) * Dh + d;
}
// Element (b, h, i, j) of att [B, H, T, T].
MOERL_HD int64_t idx_att(int b, int h, int i, int j, int H, int T) {
  return ((static_cast<int64_t>(b) * H + h) * T + i) * T + j;
}
// Row (b, h, i) of att, and back.
MOERL_HD int64_t att_row(int b, int h, int i, int H, int T) {
  return (static_cast<int64_t>(b) * H + h) * T + i;
}
MOERL_HD void att_row_split(int64_t row, int H, int T, int* b, int* h, int* i) {
  *i = static_cast<int>(row % T);
  const int64_t bh = row / T;
  *h = static_cast<int>(bh % H);
  *b = static_cast<int>(bh / H);
}
// Element e of a [B, T, H, Dh] tensor → (b, t, h, d); inverse of idx_bthd.
MOERL_HD void bthd_split(int64_t e, int T, int H, int Dh, int* b, int* t, int* h, int* d) {
  *d = static_cast<int>(e % Dh);
  e /= Dh;
  *h = static_cast<int>(e % H);
  e /= H;
  *t = static_cast<int>(e % T);
  *b = static_cast<int>(e / T);
}

}  // namespace moerl::cuda
