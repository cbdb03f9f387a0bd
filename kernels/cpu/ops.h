// cpu/ops.h — fast CPU kernels (TBB threads; SIMD per target, kernels/simd.h), same
// semantics and argument order as kernels/ref/ops.h. Kernels whose reduction order the profile
// controls take a ReduceCtx: with ReduceCtx{} (fixed, batch-invariant) they give the same bits
// as the reference; with other orders they agree with it within abs + |ref|·K·eps(fp32).
//
// Batch invariance: the result of a row never depends on how many rows are in the call unless
// ctx.batch_invariant is false (then reduce_effective_split(ctx, rows, width) chunks are used).
// Full-sequence attention and KV-cache decoding share one per-row routine, so under the same
// ctx they give bit-identical outputs for the same query/keys.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace moerl::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D);
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps, const ReduceCtx& ctx);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D);

void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta);
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta);

// ctx orders the key-dimension reductions (softmax denominator and P·V); the per-row entity of the
// noise stream is (ctx.key.call, sequence b within the call, query position, head), so decode and
// full forward draw alike for the same key.call and batch slot (see cpu/attention.cpp).
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh, const ReduceCtx& ctx);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, int B, int T, int H, int Dh);
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh, const ReduceCtx& ctx);

void softmax_forward(float* out, const float* x, int N, int C);
void log_softmax_forward(float* out, const float* x, int N, int C);
void softmax_backward(float* dx, const float* dy, const float* y, int N, int C);

void swiglu_forward(float* out, const float* gate, const float* up, int N, int F);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F);

void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key);

void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V);
void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                      const int32_t* targets, int N, int V);

// y[n] = exp_f32(x[n]) element-wise by the target's vector kernel (kernels/expf.h's bits).
void exp_f32_array(float* y, const float* x, int64_t n);

// One AdamW update of n parameters, in place, element-wise: with g' = g·clip,
//   m = β1·m + (1 − β1)·g';  v = β2·v + ((1 − β2)·g')·g'     (FP32)
//   w = w − decay·w;  w = w − (float)(lr·(m/bc1) / (sqrt(v/bc2) + eps))   (the step in double)
void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps);

}  // namespace moerl::cpu
