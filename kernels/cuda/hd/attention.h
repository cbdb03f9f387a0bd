// hd/attention.h — causal attention's per-key and per-column pieces (ref/attention.cpp,
// cpu/attention.cpp). One query row over keys 0..L-1 (L = i + 1 in full sequences, len[b] when
// decoding), rows of k, v, q, dout at stride ld = H·Dh (hd/index.h):
//   s_j = (fma chain of q_d·k_jd over d = 0..Dh-1 from 0) · scale        hd_attn_score
//   m = max_j s_j;  e_j = exp(s_j − m);  sum = Σ e_j;  p_j = e_j / sum    (reduce.h, softmax.h)
//   out_d = fma chain of p_j·v_jd over j = 0..L-1 from 0                   hd_attn_pv
// The dot products and P·V chains run in the references' order (one thread per key, per column);
// only m and sum are block reductions.
// Backward for query row i (dq, dk, dv '+='):
//   dp_j = fma chain of dout_d·v_jd;  ds = Σ_j p_j·dp_j;  g_j = (p_j·(dp_j − ds))·scale
//   dq_i,d: the fma chain of g_j·k_jd over j continued from dq's value     hd_attn_pv(acc = dq)
//   dv_j,d / dk_j,d: fma chains over queries i = j..T-1 ascending of p_ij·dout_id / g_ij·q_id,
//   continued from dv / dk — the CPU's order of accumulation, per element  hd_attn_key_column
#pragma once

#include <cstdint>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

MOERL_HD float hd_attn_scale(int Dh) { return hd_div(1.0f, hd_sqrt(static_cast<float>(Dh))); }

// q·k as an fma chain over d from 0 (no scale).
MOERL_HD float hd_attn_dot(const float* q, const float* k, int Dh) {
  float acc = 0.0f;
  for (int d = 0; d < Dh; ++d) acc = hd_fma(q[d], k[d], acc);
  return acc;
}
MOERL_HD float hd_attn_score(const float* q, const float* k, int Dh, float scale) {
  return hd_mul(hd_attn_dot(q, k, Dh), scale);
}

// acc + Σ_{j<L} p_j·v[j·ld] as an fma chain in ascending j (v points at column d of key row 0).
MOERL_HD float hd_attn_pv(const float* p, const float* v, int64_t ld, int L, float acc) {
  for (int j = 0; j < L; ++j) acc = hd_fma(p[j], v[j * ld], acc);
  return acc;
}

// g_j from p_j, dp_j and ds = Σ p·dp.
MOERL_HD float hd_attn_dscore(float p, float dp, float ds, float scale) {
  return hd_mul(hd_mul(p, hd_sub(dp, ds)), scale);
}

// acc + Σ_{i=j}^{T-1} coef[i·T + j]·rows[i·ld] in ascending i: dv (coef = att, rows = dout) or dk
// (coef = g, rows = q) of key j, one column d; coef is the (b, h) block [T, T], rows point at
// column d of row (b, 0, h).
MOERL_HD float hd_attn_key_column(float acc, const float* coef, const float* rows, int64_t ld,
                                  int j, int T) {
  for (int i = j; i < T; ++i) acc = hd_fma(coef[static_cast<int64_t>(i) * T + j], rows[i * ld], acc);
  return acc;
}

}  // namespace moerl::cuda
