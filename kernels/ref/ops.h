// ref/ops.h — scalar reference kernels, kept forever. Plain loops, FP32 storage, the canonical
// "fixed" reduction order (sequential, index 0 upward, std::fma for multiply-accumulate where the
// fast kernels use FMA). Every fast kernel in kernels/cpu/ is tested against these.
//
// Conventions (llm.c): outputs first, then inputs, then weights, then sizes. Forward outputs are
// written with '='. Backward: input gradients and weight gradients are accumulated with '+='.
// Shapes use the letters of docs/notation.md: N rows (tokens), D model width, H heads, Dh head
// width, T sequence length, B sequences, V vocabulary, E experts, K top-k, F expert width.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace moerl::ref {

// out[M,N] = inp[M,K] · weight[N,K]ᵀ ; out[m][n] = fma chain over k = 0..K-1 starting from 0.
void matmul_forward(float* out, const float* inp, const float* weight, int M, int N, int K);
// dinp[M,K] += dout·weight ; dweight[N,K] += doutᵀ·inp   (either may be null)
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K);

// out[N,D] = table[tokens[n], :]
void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D);
// dtable[tokens[n], :] += dout[n, :]
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D);

// out[N,D] = inp / sqrt(mean(inp²) + eps) * weight ; rstd[N] saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D);

// Rotate-half RoPE applied in place to x[N, H, Dh] at positions pos[N]:
// for j < Dh/2 with θ_j = theta^(-2j/Dh): (x_j, x_{j+Dh/2}) ← (x_j c − x_{j+h} s, x_{j+h} c + x_j s).
void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta);
// Backward in place on dx (the rotation's transpose).
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta);

// Causal self-attention over B sequences of length T. q,k,v,out are [B*T, H*Dh] (row = token).
// att[B,H,T,T] saves the probabilities (upper triangle zero). Scale 1/sqrt(Dh).
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, int B, int T, int H, int Dh);
// One new query per sequence against a KV cache: q,out [B, H*Dh]; kcache [B, H*Dh, Tmax] (keys
// transposed), vcache [B, Tmax, H*Dh] (kernels/kv_cache.h); sequence b attends to positions
// 0..len[b]-1 (the new token's k,v already written at len[b]-1).
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh);
// Decode compaction of that cache: for i < n with from[i] != i, row i's first `held` positions
// of kcache [·, D, Tc] (per component d: held consecutive floats) and vcache [·, Tc, D] (held·D
// consecutive floats) become row from[i]'s. The caller guarantees from[i] is i or >= n.
void kv_cache_keep(float* kcache, float* vcache, const int32_t* from, int n, int D, int Tc, int held);

// The new positions into that cache: for b < B, t < T, kcache[b][d][t0 + t] = k[b·T + t][d] and
// vcache[b][t0 + t][d] = v[b·T + t][d] (k, v [B·T, D]); every other element is left as it is.
void kv_cache_write(float* kcache, float* vcache, const float* k, const float* v, int B, int T, int D,
                    int Tc, int t0);
// Row b of k, v [B, D] at position len[b] − 1 of sequence b (kv_cache_write with T = 1, each row
// at its own position).
void kv_cache_append(float* kcache, float* vcache, const float* k, const float* v, const int32_t* len, int B,
                     int D, int Tc);

// x[n] rounded in place to format f (round_to_format, element by element).
void round_format(float* x, int64_t n, Format f);
// out[n] = round_to_format(a[i] + b[i], f) (the sum in FP32); out may alias a or b.
void add_round(float* out, const float* a, const float* b, int64_t n, Format f);
// out[n] = x[i] / s (IEEE division, not a multiplication by 1/s); out may alias x.
void divide_scalar(float* out, const float* x, int64_t n, float s);

// Row-wise softmax and log-softmax of x[N,C] (max-subtracted).
void softmax_forward(float* out, const float* x, int N, int C);
void log_softmax_forward(float* out, const float* x, int N, int C);
// dx[N,C] += softmax backward given the forward output y and dy.
void softmax_backward(float* dx, const float* dy, const float* y, int N, int C);

// out[N,F] = silu(gate) * up
void swiglu_forward(float* out, const float* gate, const float* up, int N, int F);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F);

// Top-k of scores[N,E] per row, ids/vals [N,K] sorted by descending score; equal scores are
// ordered by the tie rule (random: drawn from Stream::topk_tie with key.call + row as entity).
void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key);

// The router after its scores (reference §7.1): out[n] = 1 / (1 + exp(−x[n]));
void sigmoid_forward(float* out, const float* x, int64_t n);
// out[n, c] = x[n, c] + bias[c];
void add_bias_rows(float* out, const float* x, const float* bias, int N, int C);
// gate[N, K] of the ids[N, K]: softmax scoring renormalised, the softmax of the k selected logits
// z (max-subtracted); otherwise the scores at the ids, over their sum when scoring is sigmoid,
// renormalised and K > 1. logp[N, K] (null: skipped) = z[at] − logsumexp(z[n]) (at null: ids).
void router_gate_forward(float* gate, float* logp, const float* z, const float* scores, const int32_t* ids,
                         const int32_t* at, int N, int E, int K, bool softmax_scoring, bool norm_topk);
// dz[N, E] = the gate weights' gradient w.r.t. z given dgate[N, K] ('=').
void router_gate_backward(float* dz, const float* scores, const int32_t* ids, const float* gate, const float* dgate,
                          int N, int E, int K, bool softmax_scoring, bool norm_topk);

// logp[N] = log_softmax(logits[N,V])[targets[n]] ; targets < 0 give logp 0 (ignored).
void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V);
// dlogits[N,V] += dlogp[n] · (onehot(target) − softmax(logits))   (rows with target < 0 skipped)
void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                      const int32_t* targets, int N, int V);

// The rollout's sampler per row: tokens[n] drawn by inverse CDF from softmax(logits[n] / T) in
// FP64 (weights exp((x − max)/T), top_p < 1 keeping the heaviest tokens, equal ones in index
// order, until their mass reaches top_p of the total) with uniform[n]; T = 0: the lowest index of
// the maximum. logp[n] = lp[n, tokens[n]], entropy[n] = −Σ exp(lp)·lp in FP64.
void sample_rows(int32_t* tokens, float* logp, float* entropy, const float* logits, const float* lp,
                 const double* uniform, int N, int V, float temperature, float top_p);
// dst[dst_row[n]] = src[n], rows of C (dst_row[n] < 0: skipped).
void scatter_rows(float* dst, const float* src, const int32_t* dst_row, int N, int C);
// Rows a[a_row[n]], b[b_row[n]] of V, each log-softmaxed in FP64: kl[n] = Σ p_a (la − lb) over
// p_a > 0, log_ratio[n] = lb − la at targets[n].
void kl_rows(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
             const int32_t* b_row, const int32_t* targets, int N, int V);
// Of x = logits[rows[n]] / tau in FP64: stdev[n] = population standard deviation, margin[n] =
// largest − second largest (0 when V = 1).
void logit_stats_rows(double* stdev, double* margin, const float* logits, const int32_t* rows, int N, int V,
                      float tau);

// The dispatch plan: the N·K (token, slot) rows of ids[N, K] sorted stably by expert — row r of
// the grouped buffer holds slot i = n·K + k: row_token[r] = n, slot_row[i] = r;
void moe_plan(int32_t* row_token, int32_t* slot_row, const int32_t* ids, int N, int K, int E);
// offsets[e] = the number of the N·K ids below e, e = 0..E (offsets[E] = N·K).
void moe_offsets(int32_t* offsets, const int32_t* ids, int N, int K, int E);
// order[n, ·]: slot_order's row (null: 0..K−1), reversed (order kind reversed), or shuffled by
// Rng(rng_derive3(key.seed, combine_order, key.layer, key.site, key.call + n)) (split_k).
void moe_combine_order(int32_t* order, const int32_t* slot_order, int N, int K, const ReduceCtx& ctx);
// The MoE dispatch and combine over the expert-grouped buffer's N·K rows (models/dispatcher.h):
// xe[r] = h[row_token[r]] (r < rows; h [N, D]);
void moe_gather(float* xe, const float* h, const int32_t* row_token, int N, int rows, int D);
// y[n] = fma chain from 0 over j of gate[n, o]·ye[slot_row[n, o]] with o = order[n, j], then
// + extra[n] when extra is non-null ('=');
void moe_combine(float* y, const float* ye, const float* gate, const float* extra, const int32_t* slot_row,
                 const int32_t* order, int N, int K, int D);
// dye[slot_row[n, k]] = gate[n, k]·dy[n], dgate[n, k] = fma chain over d from 0 of dy[n]·ye[...] ('=');
void moe_combine_backward(float* dye, float* dgate, const float* dy, const float* ye, const float* gate,
                          const int32_t* slot_row, int N, int K, int D);
// dh[n] += dxe[slot_row[n, k]] for k = 0..K-1 in turn.
void moe_scatter_add(float* dh, const float* dxe, const int32_t* slot_row, int N, int K, int D);

// Σ x_j² in FP64, j over [begin[r], end[r]) in order: sq[r] per range (per_range), or sq[0] over
// all ranges one after the other, one accumulator.
void sum_squares(double* sq, const float* x, const int64_t* begin, const int64_t* end, int n_ranges, bool per_range);

// One AdamW update of n parameters, in place, element-wise: with g' = g·clip,
//   m = β1·m + (1 − β1)·g';  v = β2·v + ((1 − β2)·g')·g'     (FP32)
//   w = w − decay·w;  w = w − (float)(lr·(m/bc1) / (sqrt(v/bc2) + eps))   (the step in double)
void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps);

}  // namespace moerl::ref
