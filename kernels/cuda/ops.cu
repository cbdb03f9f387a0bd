// cuda/ops.cu — the CUDA backend's non-GEMM ops (cuda/ops.h) on host pointers: each call uploads
// its operands to per-thread scratch (buffer.h, one slot per live operand), launches, and downloads
// its outputs. Forward ops write their outputs with '='; backward ops accumulate with '+=' (the
// current output is uploaded and the kernel continues from it), as kernels/cpu does.
//
// Every formula is a MOERL_HD function of kernels/cuda/hd/ (tested on the CPU by tests/cuda_host);
// this file holds the launches and the parts that need a thread block:
//  * row reductions: one block of kRowThreads threads per row, the fixed chain + pairwise tree
//    order of hd/reduce.h (deterministic, batch-invariant);
//  * attention: one block per query row (att row order (b, h, i)); keys and output columns over
//    the threads; dk/dv accumulated per element over queries in ascending order (no atomics);
//  * embedding / RMSNorm weight gradients: one thread per (row, column) or column, rows added in
//    ascending order — the CPU's order, so bit-identical to it and reproducible (no atomics);
//  * top-k: one thread per row, rank scratch in global memory for the random tie-break.
// Nothing here uses atomics: every op is bit-reproducible run to run.
#include "kernels/cuda/ops.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/buffer.h"
#include "kernels/cuda/hd/adamw.h"
#include "kernels/cuda/hd/attention.h"
#include "kernels/cuda/hd/decode_split.h"
#include "kernels/cuda/hd/index.h"
#include "kernels/cuda/hd/mismatch.h"
#include "kernels/cuda/hd/moe.h"
#include "kernels/cuda/hd/policy_loss.h"
#include "kernels/cuda/hd/sampling.h"
#include "kernels/kv_cache.h"
#include "kernels/cuda/hd/reduce.h"
#include "kernels/cuda/hd/rmsnorm.h"
#include "kernels/cuda/hd/rope.h"
#include "kernels/cuda/hd/round.h"
#include "kernels/cuda/hd/router.h"
#include "kernels/cuda/hd/softmax.h"
#include "kernels/cuda/hd/swiglu.h"
#include "kernels/cuda/hd/topk.h"

namespace moerl::cuda {

namespace {

constexpr int kThreads = 256;  // element-wise kernels

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// ---- block reductions (hd/reduce.h step 2) ------------------------------------------------------
// Every thread of the block passes its partial and gets the row's result. blockDim.x ==
// kRowThreads; sh[kRowThreads] shared. Ends with a barrier, so sh may be reused at once.
__device__ float block_sum(float partial, float* sh) {
  const int t = threadIdx.x;
  sh[t] = partial;
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (t < half) hd_tree_fold_sum(sh, t, half);
  }
  __syncthreads();
  const float r = sh[0];
  __syncthreads();
  return r;
}
__device__ float block_max(float partial, float* sh) {
  const int t = threadIdx.x;
  sh[t] = partial;
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (t < half) hd_tree_fold_max(sh, t, half);
  }
  __syncthreads();
  const float r = sh[0];
  __syncthreads();
  return r;
}

// ---- KV cache decode compaction -----------------------------------------------------------------
// kcache [·, D, Tc], vcache [·, Tc, D]; element e < n·D·held of the keys, then n·held·D of the
// values: row i takes row from[i]'s (from[i] is i or >= n, so sources are never destinations).
__global__ void kv_cache_keep_kernel(float* kcache, float* vcache, const int32_t* from, int n, int D,
                                     int Tc, int held) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = static_cast<int64_t>(D) * held, block = static_cast<int64_t>(D) * Tc;
  if (e >= 2 * n * per_row) return;
  const bool keys = e < n * per_row;
  const int64_t r = keys ? e : e - n * per_row;
  const int i = static_cast<int>(r / per_row);
  const int f = from[i];
  if (f == i) return;
  const int64_t j = r % per_row;
  if (keys) {  // component d, position t
    const int64_t d = j / held, t = j % held;
    kcache[i * block + d * Tc + t] = kcache[f * block + d * Tc + t];
  } else {
    vcache[i * block + j] = vcache[f * block + j];
  }
}

// kcache [B, D, Tc] (keys transposed), vcache [B, Tc, D]; element e of k, v [B·T, D] (row b·T + t,
// component d) goes to position t0 + t of sequence b.
__global__ void kv_cache_write_kernel(float* kcache, float* vcache, const float* k, const float* v, int T,
                                      int D, int Tc, int t0, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t row = e / D, d = e % D, b = row / T, t = row % T;
  kcache[(b * D + d) * Tc + t0 + t] = k[e];
  vcache[(b * Tc + t0 + t) * D + d] = v[e];
}

// Row b of k, v [B, D] at position len[b] − 1 of sequence b (element e: row b = e / D).
__global__ void kv_cache_append_kernel(float* kcache, float* vcache, const float* k, const float* v,
                                       const int32_t* len, int D, int Tc, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t b = e / D, d = e % D, t = len[b] - 1;
  kcache[(b * D + d) * Tc + t] = k[e];
  vcache[(b * Tc + t) * D + d] = v[e];
}

// ---- storage glue (hd/round.h: the CPU's roundings bit for bit) --------------------------------
__global__ void round_format_kernel(float* x, int64_t n, Format f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = hd_round_to_format(x[i], f);
}
__global__ void add_round_kernel(float* out, const float* a, const float* b, int64_t n, Format f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = hd_round_to_format(hd_add(a[i], b[i]), f);
}
__global__ void divide_scalar_kernel(float* out, const float* x, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = hd_div(x[i], s);
}

// ---- MoE dispatch and combine (the CPU's orders and FMA chains: bit-identical) -----------------
// The plan: the stable counting sort by expert, in one thread (N·K slots in order: the CPU's
// grouping, hd/moe.h); offsets [E+1], fill [E] scratch.
__global__ void moe_plan_kernel(int32_t* row_token, int32_t* slot_row, int* offsets, int* fill, const int32_t* ids,
                                int NK, int K, int E) {
  hd_expert_offsets(offsets, ids, NK, E);
  hd_group_slots(slot_row, row_token, fill, ids, offsets, NK, K, E);
}
__global__ void moe_offsets_kernel(int* offsets, const int32_t* ids, int NK, int E) {
  hd_expert_offsets(offsets, ids, NK, E);
}
// one thread per token
__global__ void moe_combine_order_kernel(int32_t* order, const int32_t* slot_order, int N, int K, OrderKind kind,
                                         NoiseKey key) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  int o[64];
  hd_combine_order(o, slot_order ? slot_order + n * K : nullptr, K, kind, key.seed, key.layer, key.site,
                   noise_call(key), n);
  for (int k = 0; k < K; ++k) order[n * K + k] = o[k];
}
__global__ void moe_gather_kernel(float* xe, const float* h, const int32_t* row_token, int D, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n) xe[e] = h[static_cast<int64_t>(row_token[e / D]) * D + e % D];
}
// one thread per (token, component): the token's K terms in its order, one fma chain from 0
__global__ void moe_combine_kernel(float* y, const float* ye, const float* gate, const float* extra,
                                   const int32_t* slot_row, const int32_t* order, int K, int D, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t t = e / D, d = e % D;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int64_t s = t * K + order[t * K + j];
    acc = __fmaf_rn(gate[s], ye[static_cast<int64_t>(slot_row[s]) * D + d], acc);
  }
  if (extra) acc = hd_add(acc, extra[e]);
  y[e] = acc;
}
// one thread per (token, slot): its row of dye and its gate's gradient (fma chain over d from 0)
__global__ void moe_combine_backward_kernel(float* dye, float* dgate, const float* dy, const float* ye,
                                            const float* gate, const int32_t* slot_row, int K, int D, int64_t n) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const int64_t t = s / K, row = slot_row[s];
  const float g = gate[s];
  float dot = 0.0f;
  for (int d = 0; d < D; ++d) {
    const float x = dy[t * D + d];
    dye[row * D + d] = hd_mul(g, x);
    dot = __fmaf_rn(x, ye[row * D + d], dot);
  }
  dgate[s] = dot;
}
// one thread per (token, component): its K rows added in slot order
__global__ void moe_scatter_add_kernel(float* dh, const float* dxe, const int32_t* slot_row, int K, int D, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t t = e / D, d = e % D;
  float acc = dh[e];
  for (int k = 0; k < K; ++k) acc = hd_add(acc, dxe[static_cast<int64_t>(slot_row[t * K + k]) * D + d]);
  dh[e] = acc;
}

// ---- embedding ---------------------------------------------------------------------------------
// out[N,D], tokens[N], table[*,D]
__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* table,
                                         int N, int D) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(N) * D) return;
  const int64_t n = e / D, i = e % D;
  out[e] = table[static_cast<int64_t>(tokens[n]) * D + i];
}

// The distinct tokens' rows of a table in the device's memory: gather (rows[u] = table[uniq[u]]) or
// put back (table[uniq[u]] = rows[u]); copies.
__global__ void table_rows_kernel(float* dst, const float* src, const int32_t* uniq, int D, int64_t n, bool gather) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int64_t u = e / D, i = e % D, t = static_cast<int64_t>(uniq[u]) * D + i;
  if (gather) dst[e] = src[t];
  else dst[t] = src[e];
}

// rows[U,D] += the dout rows of each distinct token in ascending n: token u's rows are
// order[start[u] .. start[u+1]).
__global__ void embedding_backward_kernel(float* rows, const float* dout, const int32_t* order,
                                          const int32_t* start, int U, int D) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(U) * D) return;
  const int64_t u = e / D, i = e % D;
  float acc = rows[e];
  for (int k = start[u]; k < start[u + 1]; ++k)
    acc = hd_add(acc, dout[static_cast<int64_t>(order[k]) * D + i]);
  rows[e] = acc;
}

// ---- RMSNorm -----------------------------------------------------------------------------------
// out[N,D], rstd[N], inp[N,D], weight[D]; one block per row.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                       const float* weight, int D, float eps) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const float* x = inp + n * D;
  const float ss = block_sum(hd_chain_sumsq(x, D, threadIdx.x, kRowThreads), sh);
  const float rs = hd_rmsnorm_rstd(ss, D, eps);
  float* y = out + n * D;
  for (int i = threadIdx.x; i < D; i += kRowThreads) y[i] = hd_rmsnorm_out(x[i], rs, weight[i]);
  if (threadIdx.x == 0) rstd[n] = rs;
}

// dinp[N,D] +=; one block per row.
__global__ void rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* rstd, int D) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const float *x = inp + n * D, *dy = dout + n * D;
  const float dot = block_sum(hd_rmsnorm_chain_gx(dy, weight, x, D, threadIdx.x, kRowThreads), sh);
  const float rs = rstd[n];
  const float coef = hd_rmsnorm_coef(dot, rs, D);
  float* dx = dinp + n * D;
  for (int i = threadIdx.x; i < D; i += kRowThreads)
    dx[i] = hd_add(dx[i], hd_rmsnorm_dx(dy[i], weight[i], x[i], rs, coef));
}

// dweight[D] +=; one thread per column, rows in order.
__global__ void rmsnorm_backward_dweight_kernel(float* dweight, const float* dout,
                                                const float* inp, const float* rstd, int N, int D) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= D) return;
  dweight[i] = hd_rmsnorm_dw_column(dweight[i], dout, inp, rstd, N, D, i);
}

// ---- RoPE --------------------------------------------------------------------------------------
// x[N,H,Dh] in place; one thread per (n, h, j < Dh/2).
__global__ void rope_kernel(float* x, const int32_t* pos, int N, int H, int Dh, float theta,
                            float sign) {
  const int half = Dh / 2;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(N) * H * half) return;
  const int j = static_cast<int>(e % half);
  const int64_t nh = e / half;
  hd_rope_pair(x, pos, static_cast<int>(nh / H), static_cast<int>(nh % H), j, H, Dh, theta, sign);
}

// ---- attention ---------------------------------------------------------------------------------
// One query row over keys 0..L-1 (hd/attention.h): p[L] gets the probabilities (scores on the
// way), out[Dh] the output. k, v point at key row 0 of this head, rows at stride ld.
__device__ void attention_row(float* out, float* p, const float* q, const float* k, const float* v,
                              int64_t ld, int L, int Dh, float scale, float* sh) {
  const int t = threadIdx.x;
  for (int j = t; j < L; j += kRowThreads) p[j] = hd_attn_score(q, k + j * ld, Dh, scale);
  const float m = block_max(hd_chain_max(p, L, t, kRowThreads), sh);  // own keys: no barrier
  for (int j = t; j < L; j += kRowThreads) p[j] = hd_softmax_exp(p[j], m);
  const float sum = block_sum(hd_chain_sum(p, L, t, kRowThreads), sh);
  for (int j = t; j < L; j += kRowThreads) p[j] = hd_softmax_prob(p[j], sum);
  __syncthreads();  // P·V reads every thread's p
  for (int d = t; d < Dh; d += kRowThreads) out[d] = hd_attn_pv(p, v + d, ld, L, 0.0f);
}

// out[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]; one block per att row (b, h, i).
__global__ void attention_forward_kernel(float* out, float* att, const float* q, const float* k,
                                         const float* v, int T, int H, int Dh, float scale) {
  __shared__ float sh[kRowThreads];
  const int64_t row = blockIdx.x;
  int b, h, i;
  att_row_split(row, H, T, &b, &h, &i);
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t at = idx_bthd(b, i, h, 0, T, H, Dh), key0 = idx_bthd(b, 0, h, 0, T, H, Dh);
  float* p = att + row * T;
  attention_row(out + at, p, q + at, k + key0, v + key0, ld, i + 1, Dh, scale, sh);
  for (int j = i + 1 + threadIdx.x; j < T; j += kRowThreads) p[j] = 0.0f;
}

// out,q[B, H*Dh], kcache,vcache[B, Tmax, H*Dh], len[B], p[B*H, Tmax] scratch; one block per (b, h).
__global__ void attention_decode_kernel(float* out, float* p, const float* q, const float* kcache,
                                        const float* vcache, const int32_t* len, int Tmax, int H,
                                        int Dh, float scale) {
  __shared__ float sh[kRowThreads];
  const int b = blockIdx.x / H, h = blockIdx.x % H;
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t at = static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh;
  const int64_t key0 = idx_bthd(b, 0, h, 0, Tmax, H, Dh);
  attention_row(out + at, p + static_cast<int64_t>(blockIdx.x) * Tmax, q + at, kcache + key0,
                vcache + key0, ld, len[b], Dh, scale, sh);
}

// The same over the resident cache of kernels/kv_cache.h: keys transposed, kT[B, H·Dh, Tmax] (key j's
// component d at (b·H·Dh + h·Dh + d)·Tmax + j), values vcache[B, Tmax, H·Dh]. Each score is the same
// fma chain over d as attention_row's (hd_attn_dot), the softmax and P·V the same: bit-identical
// to the row-layout kernel on the same keys.
__global__ void attention_decode_resident_kernel(float* out, float* p, const float* q, const float* kT,
                                                 const float* vcache, const int32_t* len, int Tmax, int H,
                                                 int Dh, float scale) {
  __shared__ float sh[kRowThreads];
  const int b = blockIdx.x / H, h = blockIdx.x % H, t = threadIdx.x;
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t at = static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh;
  const float* kb = kT + at * Tmax;  // component 0 of head h, position 0
  const float* vb = vcache + idx_bthd(b, 0, h, 0, Tmax, H, Dh);
  float* pr = p + static_cast<int64_t>(blockIdx.x) * Tmax;
  const int L = len[b];
  if (hd_decode_splits(L) > 0) return;  // a long row: the split kernels' (uniform per block)
  for (int j = t; j < L; j += kRowThreads) {
    float acc = 0.0f;
    for (int d = 0; d < Dh; ++d) acc = hd_fma(q[at + d], kb[static_cast<int64_t>(d) * Tmax + j], acc);
    pr[j] = hd_mul(acc, scale);
  }
  const float m = block_max(hd_chain_max(pr, L, t, kRowThreads), sh);
  for (int j = t; j < L; j += kRowThreads) pr[j] = hd_softmax_exp(pr[j], m);
  const float sum = block_sum(hd_chain_sum(pr, L, t, kRowThreads), sh);
  for (int j = t; j < L; j += kRowThreads) pr[j] = hd_softmax_prob(pr[j], sum);
  __syncthreads();
  for (int d = t; d < Dh; d += kRowThreads) out[at + d] = hd_attn_pv(pr, vb + d, ld, L, 0.0f);
}

// Split-position decode over the resident cache (hd/decode_split.h), pass 1: one block per
// (b, h, chunk s) of a row longer than kDecodeChunk; part[B·H, S_max, 2 + Dh] ← (m_s, l_s, o_s).
__global__ void attention_decode_split_kernel(float* part, const float* q, const float* kT, const float* vcache,
                                              const int32_t* len, int Tmax, int H, int Dh, float scale, int S_max) {
  __shared__ float sh[kRowThreads];
  __shared__ float pr[kDecodeChunk];
  const int bh = blockIdx.x, s = blockIdx.y, b = bh / H, h = bh % H, t = threadIdx.x;
  const int L = len[b];
  if (s >= hd_decode_splits(L)) return;  // uniform per block
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t at = static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh;
  const int j0 = s * kDecodeChunk, n = min(kDecodeChunk, L - j0);
  const float* kb = kT + at * Tmax + j0;
  const float* vb = vcache + idx_bthd(b, j0, h, 0, Tmax, H, Dh);
  for (int j = t; j < n; j += kRowThreads) {
    float acc = 0.0f;
    for (int d = 0; d < Dh; ++d) acc = hd_fma(q[at + d], kb[static_cast<int64_t>(d) * Tmax + j], acc);
    pr[j] = hd_mul(acc, scale);
  }
  const float m = block_max(hd_chain_max(pr, n, t, kRowThreads), sh);
  for (int j = t; j < n; j += kRowThreads) pr[j] = hd_softmax_exp(pr[j], m);
  const float l = block_sum(hd_chain_sum(pr, n, t, kRowThreads), sh);
  __syncthreads();  // P·V reads every thread's exponentials
  float* o = part + (static_cast<int64_t>(bh) * S_max + s) * (2 + Dh);
  if (t == 0) {
    o[0] = m;
    o[1] = l;
  }
  for (int d = t; d < Dh; d += kRowThreads) o[2 + d] = hd_attn_pv(pr, vb + d, ld, n, 0.0f);
}

// Pass 2: one thread per output element (b, h, d) of a long row: the chunks combined in order.
__global__ void attention_decode_combine_kernel(float* out, const float* part, const int32_t* len, int B, int H,
                                                int Dh, int S_max) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(B) * H * Dh) return;
  const int64_t bh = e / Dh;
  const int d = static_cast<int>(e % Dh), b = static_cast<int>(bh / H);
  const int S = hd_decode_splits(len[b]);
  if (S == 0) return;
  out[e] = hd_split_combine(part + bh * S_max * (2 + Dh), S, 2 + Dh, d);
}

// Backward, pass 1 — per query row (b, h, i): g[B,H,T,T] (row's keys 0..i) and dq +=.
__global__ void attention_backward_query_kernel(float* dq, float* g, const float* dout,
                                                const float* att, const float* k, const float* v,
                                                int T, int H, int Dh, float scale) {
  __shared__ float sh[kRowThreads];
  const int64_t row = blockIdx.x;
  int b, h, i;
  att_row_split(row, H, T, &b, &h, &i);
  const int L = i + 1, t = threadIdx.x;
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t at = idx_bthd(b, i, h, 0, T, H, Dh), key0 = idx_bthd(b, 0, h, 0, T, H, Dh);
  const float* p = att + row * T;
  float* gr = g + row * T;
  for (int j = t; j < L; j += kRowThreads) gr[j] = hd_attn_dot(dout + at, v + key0 + j * ld, Dh);
  const float ds = block_sum(hd_chain_dot(p, gr, L, t, kRowThreads), sh);  // own keys
  for (int j = t; j < L; j += kRowThreads) gr[j] = hd_attn_dscore(p[j], gr[j], ds, scale);
  __syncthreads();  // dq reads every thread's g
  for (int d = t; d < Dh; d += kRowThreads)
    dq[at + d] = hd_attn_pv(gr, k + key0 + d, ld, L, dq[at + d]);
}

// Backward, pass 2 — per element (b, j, h, d) of dk, dv: queries i = j..T-1 in order.
__global__ void attention_backward_key_kernel(float* dk, float* dv, const float* g,
                                              const float* att, const float* dout, const float* q,
                                              int B, int T, int H, int Dh) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<int64_t>(B) * T * H * Dh) return;
  int b, j, h, d;
  bthd_split(e, T, H, Dh, &b, &j, &h, &d);
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int64_t blk = idx_att(b, h, 0, 0, H, T), col0 = idx_bthd(b, 0, h, d, T, H, Dh);
  dv[e] = hd_attn_key_column(dv[e], att + blk, dout + col0, ld, j, T);
  dk[e] = hd_attn_key_column(dk[e], g + blk, q + col0, ld, j, T);
}

// ---- softmax / log-prob ------------------------------------------------------------------------
// out[N,C], x[N,C]; one block per row.
__global__ void softmax_forward_kernel(float* out, const float* x, int C) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const float* xr = x + n * C;
  float* y = out + n * C;
  const float m = block_max(hd_chain_max(xr, C, t, kRowThreads), sh);
  for (int j = t; j < C; j += kRowThreads) y[j] = hd_softmax_exp(xr[j], m);
  const float sum = block_sum(hd_chain_sum(y, C, t, kRowThreads), sh);  // own elements
  for (int j = t; j < C; j += kRowThreads) y[j] = hd_softmax_prob(y[j], sum);
}

__global__ void log_softmax_forward_kernel(float* out, const float* x, int C) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const float* xr = x + n * C;
  const float m = block_max(hd_chain_max(xr, C, t, kRowThreads), sh);
  const float lse = hd_log(block_sum(hd_chain_sum_exp(xr, m, C, t, kRowThreads), sh));
  float* y = out + n * C;
  for (int j = t; j < C; j += kRowThreads) y[j] = hd_log_softmax(xr[j], m, lse);
}

// dx[N,C] +=, dy[N,C], y[N,C]
__global__ void softmax_backward_kernel(float* dx, const float* dy, const float* y, int C) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const float *g = dy + n * C, *p = y + n * C;
  const float dot = block_sum(hd_chain_dot(p, g, C, t, kRowThreads), sh);
  float* d = dx + n * C;
  for (int j = t; j < C; j += kRowThreads) d[j] = hd_add(d[j], hd_softmax_dx(p[j], g[j], dot));
}

// logp[N], logits[N,V], targets[N]
__global__ void logprob_forward_kernel(float* logp, const float* logits, const int32_t* targets,
                                       int V) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const int32_t tgt = targets[n];
  if (tgt < 0) {  // uniform over the block: no thread reaches a barrier
    if (t == 0) logp[n] = 0.0f;
    return;
  }
  const float* x = logits + n * V;
  const float m = block_max(hd_chain_max(x, V, t, kRowThreads), sh);
  const float sum = block_sum(hd_chain_sum_exp(x, m, V, t, kRowThreads), sh);
  if (t == 0) logp[n] = hd_logprob(x[tgt], m, sum);
}

// dlogits[N,V] +=, dlogp[N], logits[N,V], targets[N]
__global__ void logprob_backward_kernel(float* dlogits, const float* dlogp, const float* logits,
                                        const int32_t* targets, int V) {
  __shared__ float sh[kRowThreads];
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const int32_t tgt = targets[n];
  if (tgt < 0) return;  // uniform over the block
  const float* x = logits + n * V;
  const float m = block_max(hd_chain_max(x, V, t, kRowThreads), sh);
  const float sum = block_sum(hd_chain_sum_exp(x, m, V, t, kRowThreads), sh);
  const float gl = dlogp[n];
  float* d = dlogits + n * V;
  for (int j = t; j < V; j += kRowThreads)
    d[j] = hd_add(d[j], hd_logprob_dlogit(gl, j == tgt, x[j], m, sum));
}

// ---- element-wise ------------------------------------------------------------------------------
__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = hd_swiglu_forward(gate[i], up[i]);
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                       const float* gate, const float* up, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float dg = dgate[i], du = dup[i];
  hd_swiglu_backward(&dg, &du, dout[i], gate[i], up[i]);
  dgate[i] = dg;
  dup[i] = du;
}

__global__ void adamw_kernel(float* w, float* m, float* v, const float* g, int64_t n, float clip,
                             float beta1, float beta2, double bc1, double bc2, float lr,
                             float decay, float eps) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) hd_adamw_element(w + i, m + i, v + i, g[i], clip, beta1, beta2, bc1, bc2, lr, decay, eps);
}

// ---- the router after its scores (hd/router.h) --------------------------------------------------
__global__ void sigmoid_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = hd_sigmoid(x[i]);
}
__global__ void add_bias_rows_kernel(float* out, const float* x, const float* bias, int C, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = hd_add(x[i], bias[i % C]);
}
// one thread per row
__global__ void router_gate_kernel(float* gate, float* logp, const float* z, const float* scores, const int32_t* ids,
                                   const int32_t* at, int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  hd_router_gate_row(gate + n * K, logp ? logp + n * K : nullptr, z + n * E, scores + n * E, ids + n * K,
                     (at ? at : ids) + n * K, E, K, softmax_scoring, norm_topk);
}
// one thread per row; dp [N, E] scratch
__global__ void router_gate_backward_kernel(float* dz, float* dp, const float* scores, const int32_t* ids,
                                            const float* gate, const float* dgate, int N, int E, int K,
                                            bool softmax_scoring, bool norm_topk) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  for (int e = 0; e < E; ++e) dz[n * E + e] = 0.0f;
  hd_router_gate_backward_row(dz + n * E, dp + n * E, scores + n * E, ids + n * K, gate + n * K, dgate + n * K, E,
                              K, softmax_scoring, norm_topk);
}

// ---- the gradient clip's sum of squares ------------------------------------------------------------
// One block of kRowThreads per range: thread t sums the squares of elements t, t + kRowThreads, …
// in FP64, then a fixed pairwise tree over the threads: part[r]. Deterministic; not the CPU's
// serial order.
__global__ void sum_squares_ranges_kernel(double* part, const float* x, const int64_t* begin, const int64_t* end) {
  __shared__ double sh[kRowThreads];
  const int r = blockIdx.x, t = threadIdx.x;
  double acc = 0.0;
  for (int64_t j = begin[r] + t; j < end[r]; j += kRowThreads) {
    const double v = x[j];
    acc = hd_dadd(acc, hd_dmul(v, v));
  }
  sh[t] = acc;
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    __syncthreads();
    if (t < half) sh[t] = hd_dadd(sh[t], sh[t + half]);
  }
  if (t == 0) part[r] = sh[0];
}
// sq[0] = the ranges' sums in order (one thread)
__global__ void sum_in_order_kernel(double* sq, const double* part, int n) {
  double acc = 0.0;
  for (int r = 0; r < n; ++r) acc = hd_dadd(acc, part[r]);
  sq[0] = acc;
}

// ---- the rollout's sampler and the mismatch metrics (hd/sampling.h, hd/mismatch.h) ---------------
// One thread per row (rows are few and V is the vocabulary: the row functions are serial, FP64).
// w [N, V] doubles and order [N, V] ints: sample_rows's scratch.
__global__ void sample_rows_kernel(int32_t* tokens, float* logp, float* entropy, const float* logits,
                                   const float* lp, const double* uniform, double* w, int* order, int N, int V,
                                   float temperature, float top_p) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t nv = n * V;
  const int32_t t = hd_sample_row(logits + nv, V, temperature, top_p, uniform ? uniform[n] : 0.0,
                                  w ? w + nv : nullptr, order ? order + nv : nullptr);
  tokens[n] = t;
  logp[n] = lp[nv + t];
  entropy[n] = static_cast<float>(hd_entropy_row(lp + nv, V));
}
// one thread per (row, component)
__global__ void scatter_rows_kernel(float* dst, const float* src, const int32_t* dst_row, int C, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const int32_t r = dst_row[e / C];
  if (r >= 0) dst[static_cast<int64_t>(r) * C + e % C] = src[e];
}
__global__ void kl_rows_kernel(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
                               const int32_t* b_row, const int32_t* targets, int N, int V) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  hd_kl_row(kl + n, log_ratio + n, a + static_cast<int64_t>(a_row[n]) * V, b + static_cast<int64_t>(b_row[n]) * V,
            targets[n], V);
}
__global__ void logit_stats_rows_kernel(double* stdev, double* margin, const float* logits, const int32_t* rows,
                                        int N, int V, float tau) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  hd_logit_stats_row(stdev + n, margin + n, logits + static_cast<int64_t>(rows[n]) * V, V, tau);
}

// ---- the RL policy loss (hd/policy_loss.h) --------------------------------------------------------
// One thread per sequence, its totals in part[i, kLossTotals]; then one thread sums the rows'
// totals in row order (the maximum for the last).
__global__ void policy_loss_rows_kernel(float* dlogp, double* part, float* ratio, float* weight, float* term,
                                        const float* logp_new, const int32_t* new_row, const float* logp_old,
                                        const float* logp_rollout, const float* mask, const float* logp_ref,
                                        const int32_t* seq, const float* advantages, const float* gamma,
                                        const double* scale, int S, int R, PolicyLossParams p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= S) return;
  double* acc = part + i * kLossTotals;
  for (int k = 0; k < kLossTotals; ++k) acc[k] = 0.0;
  const int64_t at = static_cast<int64_t>(seq[i]) * R, mine = i * R, row = new_row[i];
  hd_policy_loss_row(dlogp + row, ratio ? ratio + mine : nullptr, weight ? weight + mine : nullptr,
                     term ? term + mine : nullptr, acc, logp_new + row, logp_old + at, logp_rollout + at, mask + at,
                     logp_ref ? logp_ref + at : nullptr, gamma ? gamma + mine : nullptr,
                     static_cast<double>(advantages[seq[i]]), scale[i], R, p);
}
__global__ void policy_loss_totals_kernel(double* totals, const double* part, int S) {
  double acc[kLossTotals] = {};
  for (int i = 0; i < S; ++i) {
    for (int k = 0; k < kLossRatioMaxNegAdv; ++k) acc[k] = hd_dadd(acc[k], part[i * kLossTotals + k]);
    acc[kLossRatioMaxNegAdv] = hd_dmax(acc[kLossRatioMaxNegAdv], part[i * kLossTotals + kLossRatioMaxNegAdv]);
  }
  for (int k = 0; k < kLossTotals; ++k) totals[k] = acc[k];
}

// ---- top-k -------------------------------------------------------------------------------------
// ids[N,K], vals[N,K], scores[N,E]; rank, perm [N,E] scratch (random mode only). One thread per row.
__global__ void topk_kernel(int32_t* ids, float* vals, const float* scores, int* rank, int* perm,
                            int N, int E, int K, TieBreak tie, NoiseKey key) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  int* rk = nullptr;
  if (tie == TieBreak::random) {
    rk = rank + n * E;
    hd_topk_random_ranks(rk, perm + n * E, E, key, n);
  }
  hd_topk_row(ids + n * K, vals + n * K, scores + n * E, E, K, tie, rk);
}

// Launches and checks; the grid must be non-empty.
template <class... P, class... A>
void launch(void (*kernel)(P...), int64_t blocks, int threads, A... args) {
  if (blocks <= 0) return;
  if (blocks > 0x7fffffffLL) throw std::invalid_argument("cuda ops: grid too large");
  kernel<<<static_cast<unsigned>(blocks), threads>>>(args...);
  MOERL_CUDA_LAUNCHED();
}

int64_t elems(int64_t a, int64_t b) { return a * b; }

}  // namespace

// ---- host entry points ---------------------------------------------------------------------------

// out[N,D], tokens[N], table[V,D] — only rows 0..max(tokens) are uploaded.
void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) {
  if (N <= 0 || D <= 0) return;
  const auto [lo, hi] = std::minmax_element(tokens, tokens + N);
  if (*lo < 0) throw std::invalid_argument("cuda::embedding_forward: negative token id");
  const int64_t rows = static_cast<int64_t>(*hi) + 1;
  const int32_t* d_tok = scratch_upload(0, tokens, sz(N));
  const float* d_table = scratch_upload(1, table, sz(rows * D));
  float* d_out = static_cast<float*>(device_scratch(2, sz(elems(N, D)) * sizeof(float)));
  launch(embedding_forward_kernel, grid_for(elems(N, D), kThreads), kThreads, d_out, d_tok,
         d_table, N, D);
  download(out, d_out, sz(elems(N, D)));
}

// dtable[V,D] +=, dout[N,D], tokens[N] — the distinct tokens' rows are gathered, updated on the
// device (each element: its rows in ascending n, as the CPU) and scattered back.
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) {
  if (N <= 0 || D <= 0) return;
  std::vector<int32_t> order(sz(N));  // n sorted by (token, n)
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  if (tokens[order[0]] < 0) throw std::invalid_argument("cuda::embedding_backward: negative token id");
  std::vector<int32_t> uniq, start;
  for (int k = 0; k < N; ++k) {
    if (k == 0 || tokens[order[k]] != tokens[order[k - 1]]) {
      uniq.push_back(tokens[order[k]]);
      start.push_back(k);
    }
  }
  start.push_back(N);
  const int U = static_cast<int>(uniq.size());
  const int64_t n_rows = elems(U, D);
  const float* d_dout = dev_in(1, dout, sz(elems(N, D)));
  const int32_t* d_order = scratch_upload(2, order.data(), order.size());
  const int32_t* d_start = scratch_upload(3, start.data(), start.size());
  if (is_device_pointer(dtable)) {  // the resident gradients: the rows gathered and put back on the device
    const int32_t* d_uniq = scratch_upload(4, uniq.data(), uniq.size());
    float* d_rows = static_cast<float*>(device_scratch(0, sz(n_rows) * sizeof(float)));
    launch(table_rows_kernel, grid_for(n_rows, kThreads), kThreads, d_rows, static_cast<const float*>(dtable), d_uniq,
           D, n_rows, true);
    launch(embedding_backward_kernel, grid_for(n_rows, kThreads), kThreads, d_rows, d_dout, d_order, d_start, U, D);
    launch(table_rows_kernel, grid_for(n_rows, kThreads), kThreads, dtable, static_cast<const float*>(d_rows), d_uniq,
           D, n_rows, false);
    return;
  }
  std::vector<float> rows(sz(n_rows));
  for (int u = 0; u < U; ++u)
    std::copy_n(dtable + static_cast<int64_t>(uniq[u]) * D, D, rows.begin() + static_cast<int64_t>(u) * D);
  float* d_rows = scratch_upload(0, rows.data(), rows.size());
  launch(embedding_backward_kernel, grid_for(n_rows, kThreads), kThreads, d_rows, d_dout,
         d_order, d_start, U, D);
  download(rows.data(), d_rows, rows.size());
  for (int u = 0; u < U; ++u)
    std::copy_n(rows.begin() + static_cast<int64_t>(u) * D, D, dtable + static_cast<int64_t>(uniq[u]) * D);
}

// out[N,D], rstd[N], inp[N,D], weight[D]. ctx: interface parity (the device order is fixed).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps, const ReduceCtx& /*ctx*/) {
  if (N <= 0 || D <= 0) return;
  const float* d_inp = scratch_upload(0, inp, sz(elems(N, D)));
  const float* d_w = scratch_upload(1, weight, sz(D));
  float* d_out = static_cast<float*>(device_scratch(2, sz(elems(N, D)) * sizeof(float)));
  float* d_rstd = static_cast<float*>(device_scratch(3, sz(N) * sizeof(float)));
  launch(rmsnorm_forward_kernel, N, kRowThreads, d_out, d_rstd, d_inp, d_w, D, eps);
  download(out, d_out, sz(elems(N, D)));
  download(rstd, d_rstd, sz(N));
}

// dinp[N,D] +=, dweight[D] += (either may be null), dout[N,D], inp[N,D], weight[D], rstd[N]
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D) {
  if (N <= 0 || D <= 0) return;
  const float* d_dout = scratch_upload(0, dout, sz(elems(N, D)));
  const float* d_inp = scratch_upload(1, inp, sz(elems(N, D)));
  const float* d_rstd = scratch_upload(2, rstd, sz(N));
  if (dinp) {
    const float* d_w = scratch_upload(3, weight, sz(D));
    float* d_dinp = scratch_upload(4, dinp, sz(elems(N, D)));
    launch(rmsnorm_backward_dinp_kernel, N, kRowThreads, d_dinp, d_dout, d_inp, d_w, d_rstd, D);
    download(dinp, d_dinp, sz(elems(N, D)));
  }
  if (dweight) {
    float* d_dw = scratch_upload(5, dweight, sz(D));
    launch(rmsnorm_backward_dweight_kernel, grid_for(D, kThreads), kThreads, d_dw, d_dout, d_inp,
           d_rstd, N, D);
    download(dweight, d_dw, sz(D));
  }
}

namespace {
void rope_rotate(float* x, const int32_t* pos, int N, int H, int Dh, float theta, float sign) {
  const int64_t pairs = static_cast<int64_t>(N) * H * (Dh / 2);
  if (pairs <= 0) return;
  const int64_t n_el = static_cast<int64_t>(N) * H * Dh;
  float* d_x = scratch_upload(0, x, sz(n_el));
  const int32_t* d_pos = scratch_upload(1, pos, sz(N));
  launch(rope_kernel, grid_for(pairs, kThreads), kThreads, d_x, d_pos, N, H, Dh, theta, sign);
  download(x, d_x, sz(n_el));
}
}  // namespace

// x[N,H,Dh] in place, pos[N]
void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(x, pos, N, H, Dh, theta, 1.0f);
}
// dx[N,H,Dh] in place (transformed, not accumulated), pos[N]
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(dx, pos, N, H, Dh, theta, -1.0f);
}

// out[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]. ctx: interface parity (fixed device order).
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh, const ReduceCtx& /*ctx*/) {
  const int64_t rows = static_cast<int64_t>(B) * H * T;
  if (rows <= 0 || Dh <= 0) return;
  const int64_t n_act = static_cast<int64_t>(B) * T * H * Dh, n_att = rows * T;
  const float* d_q = scratch_upload(0, q, sz(n_act));
  const float* d_k = scratch_upload(1, k, sz(n_act));
  const float* d_v = scratch_upload(2, v, sz(n_act));
  float* d_out = static_cast<float*>(device_scratch(3, sz(n_act) * sizeof(float)));
  float* d_att = static_cast<float*>(device_scratch(4, sz(n_att) * sizeof(float)));
  launch(attention_forward_kernel, rows, kRowThreads, d_out, d_att, d_q, d_k, d_v, T, H, Dh,
         hd_attn_scale(Dh));
  download(out, d_out, sz(n_act));
  download(att, d_att, sz(n_att));
}

// dq,dk,dv[B*T, H*Dh] +=, dout[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, int B, int T, int H,
                        int Dh) {
  const int64_t rows = static_cast<int64_t>(B) * H * T;
  if (rows <= 0 || Dh <= 0) return;
  const int64_t n_act = static_cast<int64_t>(B) * T * H * Dh, n_att = rows * T;
  const float* d_dout = scratch_upload(0, dout, sz(n_act));
  const float* d_att = scratch_upload(1, att, sz(n_att));
  const float* d_q = scratch_upload(2, q, sz(n_act));
  const float* d_k = scratch_upload(3, k, sz(n_act));
  const float* d_v = scratch_upload(4, v, sz(n_act));
  float* d_dq = scratch_upload(5, dq, sz(n_act));
  float* d_dk = scratch_upload(6, dk, sz(n_act));
  float* d_dv = scratch_upload(7, dv, sz(n_act));
  // g[B,H,T,T]: only entries j ≤ i are written and read.
  float* d_g = static_cast<float*>(device_scratch(8, sz(n_att) * sizeof(float)));
  const float scale = hd_attn_scale(Dh);
  launch(attention_backward_query_kernel, rows, kRowThreads, d_dq, d_g, d_dout, d_att, d_k, d_v,
         T, H, Dh, scale);
  launch(attention_backward_key_kernel, grid_for(n_act, kThreads), kThreads, d_dk, d_dv,
         static_cast<const float*>(d_g), d_att, d_dout, d_q, B, T, H, Dh);
  download(dq, d_dq, sz(n_act));
  download(dk, d_dk, sz(n_act));
  download(dv, d_dv, sz(n_act));
}

// out,q[B, H*Dh], kcache[B, H*Dh, Tmax] (keys transposed), vcache[B, Tmax, H*Dh]
// (kernels/kv_cache.h), len[B] in 1..Tmax. Only the valid positions 0..len[b]-1 of each sequence
// are uploaded; the keys go up as rows (the device kernel reads [B, Tmax, H*Dh], as the forward's
// k). ctx: interface parity (fixed device order).
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh, const ReduceCtx& /*ctx*/) {
  if (B <= 0 || H <= 0 || Dh <= 0) return;
  // len where the kernels read it (the generation's, checked by the model when it sent them), or
  // a host array checked here
  const bool host_len = !is_device_pointer(len);
  for (int b = 0; host_len && b < B; ++b)
    if (len[b] < 1 || len[b] > Tmax)
      throw std::invalid_argument("cuda::attention_decode: len[" + std::to_string(b) + "] = " +
                                  std::to_string(len[b]) + " outside 1.." + std::to_string(Tmax));
  const int64_t ld = static_cast<int64_t>(H) * Dh, n_q = static_cast<int64_t>(B) * ld;
  if (is_device_pointer(kcache) && is_device_pointer(vcache)) {
    // The generation's cache, resident (models/generation.cpp): nothing of it crosses.
    const float* d_q = dev_in(2, q, sz(n_q));
    const int32_t* d_len = dev_in(3, len, sz(B));
    float* d_out = dev_out(4, out, sz(n_q));
    float* d_p = static_cast<float*>(device_scratch(5, sz(elems(static_cast<int64_t>(B) * H, Tmax)) * sizeof(float)));
    launch(attention_decode_resident_kernel, static_cast<int64_t>(B) * H, kRowThreads, d_out, d_p, d_q, kcache,
           vcache, d_len, Tmax, H, Dh, hd_attn_scale(Dh));
    // Rows longer than kDecodeChunk: split over positions, then combined (hd/decode_split.h); each
    // block sees its own row's length, so with device lengths the grid covers the longest possible.
    const int S_max = hd_decode_splits(host_len ? *std::max_element(len, len + B) : Tmax);
    if (S_max > 0) {
      float* d_part = static_cast<float*>(
          device_scratch(6, sz(static_cast<int64_t>(B) * H * S_max * (2 + Dh)) * sizeof(float)));
      attention_decode_split_kernel<<<dim3(static_cast<unsigned>(B * H), static_cast<unsigned>(S_max)), kRowThreads>>>(
          d_part, d_q, kcache, vcache, d_len, Tmax, H, Dh, hd_attn_scale(Dh), S_max);
      MOERL_CUDA_LAUNCHED();
      launch(attention_decode_combine_kernel, grid_for(n_q, kThreads), kThreads, d_out,
             static_cast<const float*>(d_part), d_len, B, H, Dh, S_max);
    }
    finish_out(out, static_cast<const float*>(d_out), sz(n_q));
    return;
  }
  if (!host_len) throw std::invalid_argument("cuda::attention_decode: a host cache with device lengths");
  const int64_t n_cache = static_cast<int64_t>(B) * Tmax * ld;
  float* d_k = static_cast<float*>(device_scratch(0, sz(n_cache) * sizeof(float)));
  float* d_v = static_cast<float*>(device_scratch(1, sz(n_cache) * sizeof(float)));
  std::vector<float> krows(sz(n_cache));
  kcache_to_rows(krows.data(), kcache, len, B, Tmax, static_cast<int>(ld));
  for (int b = 0; b < B; ++b) {
    const int64_t at = static_cast<int64_t>(b) * Tmax * ld;
    const size_t bytes = sz(static_cast<int64_t>(len[b]) * ld) * sizeof(float);
    MOERL_CUDA_CHECK(cudaMemcpy(d_k + at, krows.data() + at, bytes, cudaMemcpyHostToDevice));
    MOERL_CUDA_CHECK(cudaMemcpy(d_v + at, vcache + at, bytes, cudaMemcpyHostToDevice));
  }
  const float* d_q = scratch_upload(2, q, sz(n_q));
  const int32_t* d_len = scratch_upload(3, len, sz(B));
  float* d_out = static_cast<float*>(device_scratch(4, sz(n_q) * sizeof(float)));
  float* d_p = static_cast<float*>(device_scratch(5, sz(elems(static_cast<int64_t>(B) * H, Tmax)) * sizeof(float)));
  launch(attention_decode_kernel, static_cast<int64_t>(B) * H, kRowThreads, d_out, d_p, d_q,
         static_cast<const float*>(d_k), static_cast<const float*>(d_v), d_len, Tmax, H, Dh,
         hd_attn_scale(Dh));
  download(out, d_out, sz(n_q));
}

// out[N,C], x[N,C]
void softmax_forward(float* out, const float* x, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const float* d_x = dev_in(0, x, sz(elems(N, C)));
  float* d_out = dev_out(1, out, sz(elems(N, C)));
  launch(softmax_forward_kernel, N, kRowThreads, d_out, d_x, C);
  finish_out(out, static_cast<const float*>(d_out), sz(elems(N, C)));
}

// out[N,C], x[N,C]
void log_softmax_forward(float* out, const float* x, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const float* d_x = dev_in(0, x, sz(elems(N, C)));
  float* d_out = dev_out(1, out, sz(elems(N, C)));
  launch(log_softmax_forward_kernel, N, kRowThreads, d_out, d_x, C);
  finish_out(out, static_cast<const float*>(d_out), sz(elems(N, C)));
}

// dx[N,C] +=, dy[N,C], y[N,C]
void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const float* d_dy = scratch_upload(0, dy, sz(elems(N, C)));
  const float* d_y = scratch_upload(1, y, sz(elems(N, C)));
  float* d_dx = scratch_upload(2, dx, sz(elems(N, C)));
  launch(softmax_backward_kernel, N, kRowThreads, d_dx, d_dy, d_y, C);
  download(dx, d_dx, sz(elems(N, C)));
}

// out[N,F], gate[N,F], up[N,F]
void swiglu_forward(float* out, const float* gate, const float* up, int N, int F) {
  const int64_t n = elems(N, F);
  if (N <= 0 || F <= 0) return;
  const float* d_g = scratch_upload(0, gate, sz(n));
  const float* d_u = scratch_upload(1, up, sz(n));
  float* d_out = static_cast<float*>(device_scratch(2, sz(n) * sizeof(float)));
  launch(swiglu_forward_kernel, grid_for(n, kThreads), kThreads, d_out, d_g, d_u, n);
  download(out, d_out, sz(n));
}

// dgate[N,F] +=, dup[N,F] +=, dout[N,F], gate[N,F], up[N,F]
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F) {
  const int64_t n = elems(N, F);
  if (N <= 0 || F <= 0) return;
  const float* d_dout = scratch_upload(0, dout, sz(n));
  const float* d_g = scratch_upload(1, gate, sz(n));
  const float* d_u = scratch_upload(2, up, sz(n));
  float* d_dg = scratch_upload(3, dgate, sz(n));
  float* d_du = scratch_upload(4, dup, sz(n));
  launch(swiglu_backward_kernel, grid_for(n, kThreads), kThreads, d_dg, d_du, d_dout, d_g, d_u, n);
  download(dgate, d_dg, sz(n));
  download(dup, d_du, sz(n));
}

// ids[N,K], vals[N,K], scores[N,E]
void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key) {
  if (N <= 0 || K <= 0) return;
  if (K > E) throw std::invalid_argument("cuda::topk_forward: K > E");
  const float* d_s = dev_in(0, scores, sz(elems(N, E)));
  int32_t* d_ids = dev_out(1, ids, sz(elems(N, K)));
  float* d_vals = dev_out(2, vals, sz(elems(N, K)));
  int* d_rank = nullptr;
  int* d_perm = nullptr;
  if (tie == TieBreak::random) {
    d_rank = static_cast<int*>(device_scratch(3, sz(elems(N, E)) * sizeof(int)));
    d_perm = static_cast<int*>(device_scratch(4, sz(elems(N, E)) * sizeof(int)));
  }
  constexpr int kRowsPerBlock = 64;
  launch(topk_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_ids, d_vals, d_s, d_rank,
         d_perm, N, E, K, tie, key);
  finish_out(ids, static_cast<const int32_t*>(d_ids), sz(elems(N, K)));
  finish_out(vals, static_cast<const float*>(d_vals), sz(elems(N, K)));
}

void sigmoid_forward(float* out, const float* x, int64_t n) {
  if (n <= 0) return;
  const float* d_x = dev_in(0, x, sz(n));
  float* d_out = dev_out(1, out, sz(n));
  launch(sigmoid_kernel, grid_for(n, kThreads), kThreads, d_out, d_x, n);
  finish_out(out, static_cast<const float*>(d_out), sz(n));
}

void add_bias_rows(float* out, const float* x, const float* bias, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const int64_t n = elems(N, C);
  const float* d_x = dev_in(0, x, sz(n));
  const float* d_b = dev_in(1, bias, sz(C));
  float* d_out = dev_out(2, out, sz(n));
  launch(add_bias_rows_kernel, grid_for(n, kThreads), kThreads, d_out, d_x, d_b, C, n);
  finish_out(out, static_cast<const float*>(d_out), sz(n));
}

void router_gate_forward(float* gate, float* logp, const float* z, const float* scores, const int32_t* ids,
                         const int32_t* at, int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (N <= 0 || K <= 0) return;
  const int64_t ne = elems(N, E), nk = elems(N, K);
  const float* d_z = dev_in(0, z, sz(ne));
  const float* d_s = dev_in(1, scores, sz(ne));
  const int32_t* d_ids = dev_in(2, ids, sz(nk));
  const int32_t* d_at = dev_in(3, at, sz(nk));
  float* d_g = dev_out(4, gate, sz(nk));
  float* d_lp = logp ? dev_out(5, logp, sz(nk)) : nullptr;
  constexpr int kRowsPerBlock = 64;
  launch(router_gate_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_g, d_lp, d_z, d_s, d_ids, d_at, N, E, K,
         softmax_scoring, norm_topk);
  finish_out(gate, static_cast<const float*>(d_g), sz(nk));
  if (logp) finish_out(logp, static_cast<const float*>(d_lp), sz(nk));
}

void router_gate_backward(float* dz, const float* scores, const int32_t* ids, const float* gate, const float* dgate,
                          int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (N <= 0 || E <= 0) return;
  const int64_t ne = elems(N, E), nk = elems(N, K);
  const float* d_s = dev_in(0, scores, sz(ne));
  const int32_t* d_ids = dev_in(1, ids, sz(nk));
  const float* d_g = dev_in(2, gate, sz(nk));
  const float* d_dg = dev_in(3, dgate, sz(nk));
  float* d_dp = static_cast<float*>(device_scratch(4, sz(ne) * sizeof(float)));
  float* d_dz = dev_out(5, dz, sz(ne));
  constexpr int kRowsPerBlock = 64;
  launch(router_gate_backward_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_dz, d_dp, d_s, d_ids, d_g, d_dg,
         N, E, K, softmax_scoring, norm_topk);
  finish_out(dz, static_cast<const float*>(d_dz), sz(ne));
}

// 1 + the largest of the row indices rows[N] (host), for a host array read at those rows; rows
// in the device's memory with a host array is not a path of the models.
int64_t rows_extent(const int32_t* rows, int N, const char* op) {
  if (is_device_pointer(rows))
    throw std::invalid_argument(std::string("cuda::") + op + ": host rows addressed by device indices");
  int64_t hi = -1;
  for (int n = 0; n < N; ++n) hi = std::max<int64_t>(hi, rows[n]);
  return hi + 1;
}

// tokens, logp, entropy [N]; logits, lp [N, V]; uniform [N] (read unless temperature is 0)
void sample_rows(int32_t* tokens, float* logp, float* entropy, const float* logits, const float* lp,
                 const double* uniform, int N, int V, float temperature, float top_p) {
  if (N <= 0 || V <= 0) return;
  const int64_t nv = elems(N, V);
  const float* d_x = dev_in(0, logits, sz(nv));
  const float* d_lp = dev_in(1, lp, sz(nv));
  const double* d_u = temperature != 0.0f ? dev_in(2, uniform, sz(N)) : nullptr;
  double* d_w = temperature != 0.0f ? static_cast<double*>(device_scratch(3, sz(nv) * sizeof(double))) : nullptr;
  int* d_o = temperature != 0.0f && top_p < 1.0f ? static_cast<int*>(device_scratch(4, sz(nv) * sizeof(int))) : nullptr;
  int32_t* d_t = dev_out(5, tokens, sz(N));
  float* d_lpt = dev_out(6, logp, sz(N));
  float* d_h = dev_out(7, entropy, sz(N));
  constexpr int kRowsPerBlock = 64;
  launch(sample_rows_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_t, d_lpt, d_h, d_x, d_lp, d_u, d_w, d_o, N,
         V, temperature, top_p);
  finish_out(tokens, static_cast<const int32_t*>(d_t), sz(N));
  finish_out(logp, static_cast<const float*>(d_lpt), sz(N));
  finish_out(entropy, static_cast<const float*>(d_h), sz(N));
}

// dst [·, C] (the backend's memory), src [N, C], dst_row [N]
void scatter_rows(float* dst, const float* src, const int32_t* dst_row, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const int64_t n = elems(N, C);
  const float* d_src = dev_in(0, src, sz(n));
  const int32_t* d_rows = dev_in(1, dst_row, sz(N));
  // a host dst (tests): its rows up to the largest index go up and come back
  const size_t held = is_device_pointer(dst) ? 0 : sz(elems(rows_extent(dst_row, N, "scatter_rows"), C));
  float* d_dst = held ? dev_in(2, dst, held) : dst;
  launch(scatter_rows_kernel, grid_for(n, kThreads), kThreads, d_dst, d_src, d_rows, C, n);
  if (held) finish_out(dst, static_cast<const float*>(d_dst), held);
}

// kl, log_ratio, a_row, b_row, targets [N]; a, b in the device's memory (rows a_row / b_row of V)
void kl_rows(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
             const int32_t* b_row, const int32_t* targets, int N, int V) {
  if (N <= 0 || V <= 0) return;
  // host rows (tests): up to the largest index go up
  const float* d_a = is_device_pointer(a) ? a : dev_in(5, a, sz(elems(rows_extent(a_row, N, "kl_rows"), V)));
  const float* d_b = is_device_pointer(b) ? b : dev_in(6, b, sz(elems(rows_extent(b_row, N, "kl_rows"), V)));
  const int32_t* d_ar = dev_in(0, a_row, sz(N));
  const int32_t* d_br = dev_in(1, b_row, sz(N));
  const int32_t* d_t = dev_in(2, targets, sz(N));
  double* d_kl = dev_out(3, kl, sz(N));
  double* d_lr = dev_out(4, log_ratio, sz(N));
  constexpr int kRowsPerBlock = 64;
  launch(kl_rows_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_kl, d_lr, d_a, d_b, d_ar, d_br, d_t, N, V);
  finish_out(kl, static_cast<const double*>(d_kl), sz(N));
  finish_out(log_ratio, static_cast<const double*>(d_lr), sz(N));
}

// stdev, margin, rows [N]; logits in the device's memory (rows `rows` of V)
void logit_stats_rows(double* stdev, double* margin, const float* logits, const int32_t* rows, int N, int V,
                      float tau) {
  if (N <= 0 || V <= 0) return;
  const float* d_x =
      is_device_pointer(logits) ? logits : dev_in(3, logits, sz(elems(rows_extent(rows, N, "logit_stats_rows"), V)));
  const int32_t* d_r = dev_in(0, rows, sz(N));
  double* d_s = dev_out(1, stdev, sz(N));
  double* d_m = dev_out(2, margin, sz(N));
  constexpr int kRowsPerBlock = 64;
  launch(logit_stats_rows_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_s, d_m, d_x, d_r, N, V, tau);
  finish_out(stdev, static_cast<const double*>(d_s), sz(N));
  finish_out(margin, static_cast<const double*>(d_m), sz(N));
}

// logp[N], logits[N,V], targets[N]
void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V) {
  if (N <= 0 || V <= 0) return;
  const float* d_x = scratch_upload(0, logits, sz(elems(N, V)));
  const int32_t* d_t = scratch_upload(1, targets, sz(N));
  float* d_lp = static_cast<float*>(device_scratch(2, sz(N) * sizeof(float)));
  launch(logprob_forward_kernel, N, kRowThreads, d_lp, d_x, d_t, V);
  download(logp, d_lp, sz(N));
}

// dlogits[N,V] +=, dlogp[N], logits[N,V], targets[N]
void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                      const int32_t* targets, int N, int V) {
  if (N <= 0 || V <= 0) return;
  const float* d_g = scratch_upload(0, dlogp, sz(N));
  const float* d_x = scratch_upload(1, logits, sz(elems(N, V)));
  const int32_t* d_t = scratch_upload(2, targets, sz(N));
  float* d_dl = scratch_upload(3, dlogits, sz(elems(N, V)));
  launch(logprob_backward_kernel, N, kRowThreads, d_dl, d_g, d_x, d_t, V);
  download(dlogits, d_dl, sz(elems(N, V)));
}

void kv_cache_keep(float* kcache, float* vcache, const int32_t* from, int n, int D, int Tc, int held) {
  if (n <= 0 || held <= 0 || D <= 0) return;
  if (held > Tc) throw std::invalid_argument("cuda::kv_cache_keep: held " + std::to_string(held) + " > Tc " + std::to_string(Tc));
  // A host cache (not the generation's resident one) crosses whole: the rows up to the largest
  // source, up and back.
  int64_t rows = n;
  if (!is_device_pointer(kcache) || !is_device_pointer(vcache)) {
    std::vector<int32_t> f(sz(n));
    if (is_device_pointer(from)) download(f.data(), from, sz(n));
    else std::copy(from, from + n, f.begin());
    rows = std::max<int64_t>(n, 1 + *std::max_element(f.begin(), f.end()));
  }
  const size_t cache = sz(rows * static_cast<int64_t>(D) * Tc);
  float* d_k = dev_in(0, kcache, cache);
  float* d_v = dev_in(1, vcache, cache);
  const int32_t* d_from = dev_in(2, from, sz(n));
  launch(kv_cache_keep_kernel, grid_for(2 * static_cast<int64_t>(n) * D * held, kThreads), kThreads, d_k, d_v,
         d_from, n, D, Tc, held);
  finish_out(kcache, static_cast<const float*>(d_k), cache);
  finish_out(vcache, static_cast<const float*>(d_v), cache);
}

// kcache [B, D, Tc], vcache [B, Tc, D] at positions t0.., from k, v [B·T, D]. The generation's
// resident cache is written by one kernel; a host cache (the harness's) is a copy on the host.
void kv_cache_write(float* kcache, float* vcache, const float* k, const float* v, int B, int T, int D, int Tc,
                    int t0) {
  if (B <= 0 || T <= 0 || D <= 0) return;
  if (t0 < 0 || t0 + T > Tc)
    throw std::invalid_argument("cuda::kv_cache_write: positions " + std::to_string(t0) + ".." +
                                std::to_string(t0 + T - 1) + " outside the cache's " + std::to_string(Tc));
  const int64_t n = static_cast<int64_t>(B) * T * D;
  if (is_device_pointer(kcache) && is_device_pointer(vcache)) {
    const float* d_k = dev_in(0, k, sz(n));
    const float* d_v = dev_in(1, v, sz(n));
    launch(kv_cache_write_kernel, grid_for(n, kThreads), kThreads, kcache, vcache, d_k, d_v, T, D, Tc, t0, n);
    return;
  }
  std::vector<float> hk(sz(n)), hv(sz(n));
  if (is_device_pointer(k)) download(hk.data(), k, sz(n)); else std::copy(k, k + n, hk.begin());
  if (is_device_pointer(v)) download(hv.data(), v, sz(n)); else std::copy(v, v + n, hv.begin());
  std::vector<float> kc, vc;  // a device cache beside a host one: through the host
  const size_t cache = sz(static_cast<int64_t>(B) * D * Tc);
  float* K = kcache;
  float* V = vcache;
  if (is_device_pointer(kcache)) { kc.resize(cache); download(kc.data(), static_cast<const float*>(kcache), cache); K = kc.data(); }
  if (is_device_pointer(vcache)) { vc.resize(cache); download(vc.data(), static_cast<const float*>(vcache), cache); V = vc.data(); }
  for (int64_t e = 0; e < n; ++e) {
    const int64_t row = e / D, d = e % D, b = row / T, t = row % T;
    K[(b * D + d) * Tc + t0 + t] = hk[sz(e)];
    V[(b * Tc + t0 + t) * D + d] = hv[sz(e)];
  }
  if (!kc.empty()) MOERL_CUDA_CHECK(cudaMemcpy(kcache, kc.data(), cache * sizeof(float), cudaMemcpyHostToDevice));
  if (!vc.empty()) MOERL_CUDA_CHECK(cudaMemcpy(vcache, vc.data(), cache * sizeof(float), cudaMemcpyHostToDevice));
}

// The resident cache (a decode step's) by one kernel whose every argument stays the same from step
// to step; a host cache (the harness's) row by row through kv_cache_write's host path.
void kv_cache_append(float* kcache, float* vcache, const float* k, const float* v, const int32_t* len, int B, int D,
                     int Tc) {
  if (B <= 0 || D <= 0) return;
  const int64_t n = static_cast<int64_t>(B) * D;
  if (is_device_pointer(kcache) && is_device_pointer(vcache)) {
    const float* d_k = dev_in(0, k, sz(n));
    const float* d_v = dev_in(1, v, sz(n));
    const int32_t* d_len = dev_in(2, len, sz(B));
    launch(kv_cache_append_kernel, grid_for(n, kThreads), kThreads, kcache, vcache, d_k, d_v, d_len, D, Tc, n);
    return;
  }
  std::vector<int32_t> hlen(sz(B));
  if (is_device_pointer(len)) download(hlen.data(), len, sz(B)); else std::copy(len, len + B, hlen.begin());
  const size_t Du = static_cast<size_t>(D), Tcu = static_cast<size_t>(Tc);
  for (int b = 0; b < B; ++b) {
    if (hlen[sz(b)] < 1 || hlen[sz(b)] > Tc)
      throw std::invalid_argument("cuda::kv_cache_append: sequence " + std::to_string(b) + " at length " +
                                  std::to_string(hlen[sz(b)]) + " outside 1.." + std::to_string(Tc));
    const size_t bu = static_cast<size_t>(b);
    kv_cache_write(kcache + bu * Du * Tcu, vcache + bu * Tcu * Du, k + bu * Du, v + bu * Du, 1, 1, D, Tc,
                   hlen[sz(b)] - 1);
  }
}

void round_format(float* x, int64_t n, Format f) {
  if (n <= 0 || f == Format::fp32) return;
  float* d = dev_in(0, x, sz(n));
  launch(round_format_kernel, grid_for(n, kThreads), kThreads, d, n, f);
  finish_out(x, static_cast<const float*>(d), sz(n));
}

// out = round(a + b); out may alias a or b (element-wise: each element read before it is written).
void add_round(float* out, const float* a, const float* b, int64_t n, Format f) {
  if (n <= 0) return;
  const float* d_a = dev_in(0, a, sz(n));
  const float* d_b = dev_in(1, b, sz(n));
  float* d_out = dev_out(2, out, sz(n));
  launch(add_round_kernel, grid_for(n, kThreads), kThreads, d_out, d_a, d_b, n, f);
  finish_out(out, static_cast<const float*>(d_out), sz(n));
}

void divide_scalar(float* out, const float* x, int64_t n, float s) {
  if (n <= 0) return;
  const float* d_x = dev_in(0, x, sz(n));
  float* d_out = dev_out(1, out, sz(n));
  launch(divide_scalar_kernel, grid_for(n, kThreads), kThreads, d_out, d_x, n, s);
  finish_out(out, static_cast<const float*>(d_out), sz(n));
}

void moe_plan(int32_t* row_token, int32_t* slot_row, const int32_t* ids, int N, int K, int E) {
  if (N <= 0 || K <= 0) return;
  const int64_t nk = static_cast<int64_t>(N) * K;
  const int32_t* d_ids = dev_in(0, ids, sz(nk));
  int* d_off = static_cast<int*>(device_scratch(1, (sz(E) + 1) * sizeof(int)));
  int* d_fill = static_cast<int*>(device_scratch(2, sz(std::max(E, 1)) * sizeof(int)));
  int32_t* d_rt = dev_out(3, row_token, sz(nk));
  int32_t* d_sr = dev_out(4, slot_row, sz(nk));
  launch(moe_plan_kernel, 1, 1, d_rt, d_sr, d_off, d_fill, d_ids, static_cast<int>(nk), K, E);
  finish_out(row_token, static_cast<const int32_t*>(d_rt), sz(nk));
  finish_out(slot_row, static_cast<const int32_t*>(d_sr), sz(nk));
}

void moe_offsets(int32_t* offsets, const int32_t* ids, int N, int K, int E) {
  if (E < 0) return;
  const int64_t nk = N > 0 && K > 0 ? static_cast<int64_t>(N) * K : 0;
  const int32_t* d_ids = dev_in(0, ids, sz(nk));
  int32_t* d_off = dev_out(1, offsets, sz(E) + 1);
  launch(moe_offsets_kernel, 1, 1, d_off, d_ids, static_cast<int>(nk), E);  // one thread: E + NK steps
  finish_out(offsets, static_cast<const int32_t*>(d_off), sz(E) + 1);
}

void moe_combine_order(int32_t* order, const int32_t* slot_order, int N, int K, const ReduceCtx& ctx) {
  if (N <= 0 || K <= 0) return;
  if (K > 64) throw std::invalid_argument("cuda::moe_combine_order: K > 64");
  const int64_t nk = static_cast<int64_t>(N) * K;
  const int32_t* d_so = dev_in(0, slot_order, sz(nk));
  int32_t* d_o = dev_out(1, order, sz(nk));
  constexpr int kRowsPerBlock = 64;
  launch(moe_combine_order_kernel, grid_for(N, kRowsPerBlock), kRowsPerBlock, d_o, d_so, N, K, ctx.order.kind, ctx.key);
  finish_out(order, static_cast<const int32_t*>(d_o), sz(nk));
}

void moe_gather(float* xe, const float* h, const int32_t* row_token, int N, int rows, int D) {
  if (rows <= 0 || D <= 0) return;
  const int64_t n = static_cast<int64_t>(rows) * D;
  const float* d_h = dev_in(0, h, sz(static_cast<int64_t>(N) * D));
  const int32_t* d_rt = dev_in(1, row_token, sz(rows));
  float* d_xe = dev_out(2, xe, sz(n));
  launch(moe_gather_kernel, grid_for(n, kThreads), kThreads, d_xe, d_h, d_rt, D, n);
  finish_out(xe, static_cast<const float*>(d_xe), sz(n));
}

void moe_combine(float* y, const float* ye, const float* gate, const float* extra, const int32_t* slot_row,
                 const int32_t* order, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  const int64_t n = static_cast<int64_t>(N) * D, nk = static_cast<int64_t>(N) * K;
  const float* d_ye = dev_in(0, ye, sz(nk * D));
  const float* d_g = dev_in(1, gate, sz(nk));
  const float* d_x = dev_in(2, extra, sz(n));
  const int32_t* d_sr = dev_in(3, slot_row, sz(nk));
  const int32_t* d_o = dev_in(4, order, sz(nk));
  float* d_y = dev_out(5, y, sz(n));
  launch(moe_combine_kernel, grid_for(n, kThreads), kThreads, d_y, d_ye, d_g, d_x, d_sr, d_o, K, D, n);
  finish_out(y, static_cast<const float*>(d_y), sz(n));
}

void moe_combine_backward(float* dye, float* dgate, const float* dy, const float* ye, const float* gate,
                          const int32_t* slot_row, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  const int64_t nk = static_cast<int64_t>(N) * K;
  const float* d_dy = dev_in(0, dy, sz(static_cast<int64_t>(N) * D));
  const float* d_ye = dev_in(1, ye, sz(nk * D));
  const float* d_g = dev_in(2, gate, sz(nk));
  const int32_t* d_sr = dev_in(3, slot_row, sz(nk));
  float* d_dye = dev_out(4, dye, sz(nk * D));
  float* d_dg = dev_out(5, dgate, sz(nk));
  launch(moe_combine_backward_kernel, grid_for(nk, kThreads), kThreads, d_dye, d_dg, d_dy, d_ye, d_g, d_sr, K, D, nk);
  finish_out(dye, static_cast<const float*>(d_dye), sz(nk * D));
  finish_out(dgate, static_cast<const float*>(d_dg), sz(nk));
}

void moe_scatter_add(float* dh, const float* dxe, const int32_t* slot_row, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  const int64_t n = static_cast<int64_t>(N) * D, nk = static_cast<int64_t>(N) * K;
  float* d_dh = dev_in(0, dh, sz(n));
  const float* d_dxe = dev_in(1, dxe, sz(nk * D));
  const int32_t* d_sr = dev_in(2, slot_row, sz(nk));
  launch(moe_scatter_add_kernel, grid_for(n, kThreads), kThreads, d_dh, d_dxe, d_sr, K, D, n);
  finish_out(dh, static_cast<const float*>(d_dh), sz(n));
}

// w[n], m[n], v[n] updated; g[n]
// dlogp, logp_new: packed rows new_row[i] + t; logp_old, logp_rollout, mask, logp_ref: rows seq[i]
// of R; advantages [*] at seq[i]; gamma, ratio, weight, term [S, R]; scale [S]; totals [kLossTotals].
// Host arrays (tests) go up to the largest row addressed; dlogp goes up too, as the op writes only
// the masked tokens of it.
void policy_loss_rows(float* dlogp, double* totals, float* ratio, float* weight, float* term, const float* logp_new,
                      const int32_t* new_row, const float* logp_old, const float* logp_rollout, const float* mask,
                      const float* logp_ref, const int32_t* seq, const float* advantages, const float* gamma,
                      const double* scale, int S, int R, const PolicyLossParams& p) {
  if (S <= 0 || R <= 0) return;
  const size_t n_new = is_device_pointer(new_row) ? 0 : sz(rows_extent(new_row, S, "policy_loss_rows") - 1 + R);
  const size_t n_seq = is_device_pointer(seq) ? 0 : sz(rows_extent(seq, S, "policy_loss_rows"));
  const auto need = [&](const void* x, size_t n, const char* what) {
    if (x && !is_device_pointer(x) && n == 0)
      throw std::invalid_argument(std::string("cuda::policy_loss_rows: host ") + what + " addressed by device rows");
  };
  need(logp_new, n_new, "logp_new");
  need(dlogp, n_new, "dlogp");
  need(logp_old, n_seq, "logp_old");
  need(logp_rollout, n_seq, "logp_rollout");
  need(mask, n_seq, "mask");
  need(advantages, n_seq, "advantages");
  if (p.kl_coef > 0.0f) need(logp_ref, n_seq, "logp_ref");
  const size_t SR = sz(elems(S, R));
  float* d_dlogp = dev_in(0, dlogp, n_new);
  const float* d_new = dev_in(1, logp_new, n_new);
  const int32_t* d_new_row = dev_in(2, new_row, sz(S));
  const float* d_old = dev_in(3, logp_old, sz(elems(n_seq, R)));
  const float* d_roll = dev_in(4, logp_rollout, sz(elems(n_seq, R)));
  const float* d_mask = dev_in(5, mask, sz(elems(n_seq, R)));
  const float* d_ref = p.kl_coef > 0.0f ? dev_in(6, logp_ref, sz(elems(n_seq, R))) : nullptr;
  const int32_t* d_seq = dev_in(7, seq, sz(S));
  const float* d_adv = dev_in(8, advantages, n_seq);
  const float* d_gamma = dev_in(9, gamma, SR);
  const double* d_scale = dev_in(10, scale, sz(S));
  float* d_ratio = ratio ? dev_out(11, ratio, SR) : nullptr;
  float* d_weight = weight ? dev_out(12, weight, SR) : nullptr;
  float* d_term = term ? dev_out(13, term, SR) : nullptr;
  double* d_part = static_cast<double*>(device_scratch(14, sz(elems(S, kLossTotals)) * sizeof(double)));
  double* d_totals = dev_out(15, totals, sz(kLossTotals));
  constexpr int kRowsPerBlock = 64;
  launch(policy_loss_rows_kernel, grid_for(S, kRowsPerBlock), kRowsPerBlock, d_dlogp, d_part, d_ratio, d_weight,
         d_term, d_new, d_new_row, d_old, d_roll, d_mask, d_ref, d_seq, d_adv, d_gamma, d_scale, S, R, p);
  launch(policy_loss_totals_kernel, 1, 1, d_totals, static_cast<const double*>(d_part), S);
  if (n_new) finish_out(dlogp, static_cast<const float*>(d_dlogp), n_new);
  if (ratio) finish_out(ratio, static_cast<const float*>(d_ratio), SR);
  if (weight) finish_out(weight, static_cast<const float*>(d_weight), SR);
  if (term) finish_out(term, static_cast<const float*>(d_term), SR);
  finish_out(totals, static_cast<const double*>(d_totals), sz(kLossTotals));
}

void sum_squares(double* sq, const float* x, const int64_t* begin, const int64_t* end, int n_ranges, bool per_range) {
  if (n_ranges <= 0) return;
  const int64_t* d_b = dev_in(0, begin, sz(n_ranges));
  const int64_t* d_e = dev_in(1, end, sz(n_ranges));
  const float* d_x = x;
  if (!is_device_pointer(x)) {  // a host array (tests): up to the largest end goes up
    if (is_device_pointer(end)) throw std::invalid_argument("cuda::sum_squares: a host array addressed by device ranges");
    int64_t hi = 0;
    for (int r = 0; r < n_ranges; ++r) hi = std::max(hi, end[r]);
    d_x = dev_in(2, x, sz(hi));
  }
  double* d_part = static_cast<double*>(device_scratch(3, sz(n_ranges) * sizeof(double)));
  launch(sum_squares_ranges_kernel, static_cast<unsigned>(n_ranges), kRowThreads, d_part, d_x, d_b, d_e);
  const size_t n_out = per_range ? sz(n_ranges) : 1;
  double* d_sq = dev_out(4, sq, n_out);
  if (per_range) {
    if (d_sq != d_part)
      MOERL_CUDA_CHECK(cudaMemcpyAsync(d_sq, d_part, n_out * sizeof(double), cudaMemcpyDeviceToDevice, cudaStreamPerThread));
  } else {
    launch(sum_in_order_kernel, 1, 1, d_sq, static_cast<const double*>(d_part), n_ranges);
  }
  finish_out(sq, static_cast<const double*>(d_sq), n_out);
}

void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps) {
  if (n <= 0) return;
  // Each array where it lies: the moments are device-resident in a run (sim/optimizer.cpp).
  float* d_w = dev_in(0, w, sz(n));
  float* d_m = dev_in(1, m, sz(n));
  float* d_v = dev_in(2, v, sz(n));
  const float* d_g = dev_in(3, g, sz(n));
  launch(adamw_kernel, grid_for(n, kThreads), kThreads, d_w, d_m, d_v, d_g, n, clip, beta1, beta2,
         bc1, bc2, lr, decay, eps);
  finish_out(w, d_w, sz(n));
  finish_out(m, d_m, sz(n));
  finish_out(v, d_v, sz(n));
}

}  // namespace moerl::cuda
