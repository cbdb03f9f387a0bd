// ops.h — the CUDA backend's non-GEMM ops: same semantics, argument order and '=' / '+='
// conventions as kernels/cpu/ops.h, on HOST pointers (each call uploads its operands to per-thread
// device scratch, launches, and downloads its outputs; see buffer.h). FP32 arithmetic on the
// device; the per-element and per-row math is in kernels/cuda/hd/*.h (MOERL_HD), shared with the
// host tests.
//
// Numerics on the device, against the CPU kernels:
//  * reductions (RMSNorm sum of squares, softmax denominators, P·V, dot products) are done by one
//    thread block per row with a fixed tree order: deterministic run to run and batch-invariant,
//    but not the sequential order of the CPU reference, so results agree within FP32 rounding
//    (tolerance abs + |ref|·D·eps(fp32)), not bit for bit. ctx.order / ctx.key are accepted for
//    interface parity; only the key's seed-driven parts that decide *which* element wins (top-k
//    random tie-break) are honoured exactly, through the same counter-based stream as the CPU.
//  * expf / logf are the device's IEEE-accurate expf/logf (not --use_fast_math).
// Throws std::runtime_error on any CUDA error.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace moerl::cuda {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D);
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps, const ReduceCtx& ctx);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D);

void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta);
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta);

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

void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps);

}  // namespace moerl::cuda
