// hd_compose.h — whole ops composed on the CPU from the MOERL_HD functions of kernels/cuda/hd/,
// in the order kernels/cuda/ops.cu's kernels run them (per-thread chains, then the tree of
// hd/reduce.h; one call per row, element or pair where the device runs one thread or block).
// On the host they compute what the GPU computes up to the device's transcendental functions;
// ops without those (RMSNorm, softmax backward, attention backward) give the GPU's bits exactly.
// Used by tests/cuda_host (against kernels/ref) and tests/gpu (against the device).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/hd/attention.h"
#include "kernels/cuda/hd/index.h"
#include "kernels/cuda/hd/reduce.h"
#include "kernels/cuda/hd/rmsnorm.h"
#include "kernels/cuda/hd/rope.h"
#include "kernels/cuda/hd/softmax.h"
#include "kernels/cuda/hd/topk.h"

namespace moerl::hd_compose {

using namespace moerl::cuda;

// ---- RMSNorm (rmsnorm_forward_kernel, rmsnorm_backward_*_kernel) --------------------------------
inline void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int D,
                            float eps) {
  float part[kRowThreads];
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * D;
    for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_sumsq(x, D, t, kRowThreads);
    const float rs = hd_rmsnorm_rstd(hd_tree_sum(part, kRowThreads), D, eps);
    for (int i = 0; i < D; ++i) out[n * D + i] = hd_rmsnorm_out(x[i], rs, w[i]);
    rstd[n] = rs;
  }
}
// dinp +=, dweight += (either may be null).
inline void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* w, const float* rstd, int N, int D) {
  float part[kRowThreads];
  for (int64_t n = 0; dinp && n < N; ++n) {
    const float *x = inp + n * D, *dy = dout + n * D;
    for (int t = 0; t < kRowThreads; ++t) part[t] = hd_rmsnorm_chain_gx(dy, w, x, D, t, kRowThreads);
    const float coef = hd_rmsnorm_coef(hd_tree_sum(part, kRowThreads), rstd[n], D);
    for (int i = 0; i < D; ++i)
      dinp[n * D + i] = hd_add(dinp[n * D + i], hd_rmsnorm_dx(dy[i], w[i], x[i], rstd[n], coef));
  }
  for (int i = 0; dweight && i < D; ++i)
    dweight[i] = hd_rmsnorm_dw_column(dweight[i], dout, inp, rstd, N, D, i);
}

// ---- RoPE (rope_kernel: one pair per thread) ----------------------------------------------------
inline void rope(float* x, const int32_t* pos, int N, int H, int Dh, float theta, float sign) {
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < Dh / 2; ++j) hd_rope_pair(x, pos, n, h, j, H, Dh, theta, sign);
}

// ---- softmax backward (softmax_backward_kernel) -------------------------------------------------
inline void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    const float dot = hd_row_dot(y + n * C, dy + n * C, C);
    for (int j = 0; j < C; ++j)
      dx[n * C + j] = hd_add(dx[n * C + j], hd_softmax_dx(y[n * C + j], dy[n * C + j], dot));
  }
}

// ---- attention (attention_row, attention_*_kernel) ----------------------------------------------
// One query over keys 0..L-1 (k, v at key row 0 of the head, rows at stride ld).
inline void attention_row(float* out, float* p, const float* q, const float* k, const float* v,
                          int64_t ld, int L, int Dh) {
  const float scale = hd_attn_scale(Dh);
  for (int j = 0; j < L; ++j) p[j] = hd_attn_score(q, k + j * ld, Dh, scale);
  const float m = hd_row_max(p, L);
  for (int j = 0; j < L; ++j) p[j] = hd_softmax_exp(p[j], m);
  const float sum = hd_row_sum(p, L);
  for (int j = 0; j < L; ++j) p[j] = hd_softmax_prob(p[j], sum);
  for (int d = 0; d < Dh; ++d) out[d] = hd_attn_pv(p, v + d, ld, L, 0.0f);
}

inline void attention_forward(float* out, float* att, const float* q, const float* k,
                              const float* v, int B, int T, int H, int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  for (int64_t row = 0; row < static_cast<int64_t>(B) * H * T; ++row) {
    int b, h, i;
    att_row_split(row, H, T, &b, &h, &i);
    const int64_t at = idx_bthd(b, i, h, 0, T, H, Dh), key0 = idx_bthd(b, 0, h, 0, T, H, Dh);
    float* p = att + row * T;
    attention_row(out + at, p, q + at, k + key0, v + key0, ld, i + 1, Dh);
    for (int j = i + 1; j < T; ++j) p[j] = 0.0f;
  }
}

// dq, dk, dv +=; g[B,H,T,T] receives d(score)·scale of entries j ≤ i (pass 1's output).
inline void attention_backward(float* dq, float* dk, float* dv, float* g, const float* dout,
                               const float* att, const float* q, const float* k, const float* v,
                               int B, int T, int H, int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = hd_attn_scale(Dh);
  for (int64_t row = 0; row < static_cast<int64_t>(B) * H * T; ++row) {  // pass 1
    int b, h, i;
    att_row_split(row, H, T, &b, &h, &i);
    const int L = i + 1;
    const int64_t at = idx_bthd(b, i, h, 0, T, H, Dh), key0 = idx_bthd(b, 0, h, 0, T, H, Dh);
    const float* p = att + row * T;
    float* gr = g + row * T;
    for (int j = 0; j < L; ++j) gr[j] = hd_attn_dot(dout + at, v + key0 + j * ld, Dh);
    const float ds = hd_row_dot(p, gr, L);
    for (int j = 0; j < L; ++j) gr[j] = hd_attn_dscore(p[j], gr[j], ds, scale);
    for (int d = 0; d < Dh; ++d) dq[at + d] = hd_attn_pv(gr, k + key0 + d, ld, L, dq[at + d]);
  }
  for (int64_t e = 0; e < static_cast<int64_t>(B) * T * H * Dh; ++e) {  // pass 2
    int b, j, h, d;
    bthd_split(e, T, H, Dh, &b, &j, &h, &d);
    const int64_t blk = idx_att(b, h, 0, 0, H, T), col0 = idx_bthd(b, 0, h, d, T, H, Dh);
    dv[e] = hd_attn_key_column(dv[e], att + blk, dout + col0, ld, j, T);
    dk[e] = hd_attn_key_column(dk[e], g + blk, q + col0, ld, j, T);
  }
}

// ---- top-k (topk_kernel: one row per thread) ----------------------------------------------------
inline void topk(int32_t* ids, float* vals, const float* scores, int N, int E, int K, TieBreak tie,
                 const NoiseKey& key) {
  std::vector<int> rank(E), perm(E);
  for (int64_t n = 0; n < N; ++n) {
    if (tie == TieBreak::random) hd_topk_random_ranks(rank.data(), perm.data(), E, key, n);
    hd_topk_row(ids + n * K, vals + n * K, scores + n * E, E, K, tie, rank.data());
  }
}

}  // namespace moerl::hd_compose
