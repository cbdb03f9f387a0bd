// cpu/gemm_backward.h — the two products of the linear layer's backward (linear.h), with the
// reduction order of ref::matmul_backward: every gradient element is one FP32 FMA chain from 0.0f
// over the reduced index in increasing order, added once to the existing value. So the results
// equal the scalar reference bit for bit, for any shape and any number of threads (a chain never
// crosses a task; blocking only decides which chains run side by side). Private to kernels/; the
// model calls linear.h. Both outputs are accumulated with '+='.
//
// No packing: the "weight panel" of either product is already row-major with 32 consecutive
// output columns per reduction step (W's rows for dinp, inp's rows for dweight), so the register
// tile (6 rows × 32 columns) reads it in place; x is read with a stride (dout's rows for dinp,
// dout's columns for dweight, i.e. the transposed operand without a transposed copy).
#pragma once

#include <cstdint>

namespace moerl::cpu {

// dinp[M, K] += dout[M, N] · weight[N, K]      (chain over n = 0..N-1)
void gemm_backward_input(float* dinp, const float* dout, const float* weight, int M, int N, int K);
// dweight[N, K] += dout[M, N]ᵀ · inp[M, K]     (chain over m = 0..M-1)
void gemm_backward_weight(float* dweight, const float* dout, const float* inp, int M, int N, int K);

// The grouped (per-expert) forms: expert e owns rows offsets[e]..offsets[e+1]-1 of dout/inp/dinp;
// weight and dweight are [E, N, K] contiguous. Experts run in parallel; an expert with no rows
// leaves its dweight untouched.
void gemm_backward_input_grouped(float* dinp, const float* dout, const float* weight,
                                 const int* offsets, int E, int N, int K);
void gemm_backward_weight_grouped(float* dweight, const float* dout, const float* inp,
                                  const int* offsets, int E, int N, int K);

}  // namespace moerl::cpu
