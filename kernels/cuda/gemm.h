// gemm.h — the CUDA backend's linear layer y = x·Wᵀ (W is [N, K], as kernels/linear.h), on HOST
// pointers, with the GPU's real low-precision arithmetic:
//  * fp32:     cuBLAS SGEMM-class GEMM with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32);
//  * bf16/fp16: operands converted on the device (RNE, __float2bfloat16_rn / __float2half_rn),
//              tensor-core GEMM with FP32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F);
//  * fp8_e4m3 / fp8_e5m2 with scales (tensor | row | block 1×B activations, B×B weights):
//              operands scaled and converted on the device (satfinite), cuBLASLt FP8 GEMM on
//              Hopper-class devices (sm_89+) with the tensor cores' own limited-precision
//              accumulation; row scales applied in FP32 after the GEMM, block scales by one FP8 GEMM
//              per K-block whose FP32 partials are scaled and summed (DeepSeek-V3's promotion).
//              Devices without FP8 GEMMs fall back to the emulation's rounding + FP32 GEMM and say
//              so in gemm_describe().
//  * gemm_order split_k:S: S GEMMs over K-chunks into FP32 partials, combined in the ReduceCtx's
//    order (fixed / reversed / the same seeded permutation as the CPU) — or, with ctx.atomics, by
//    atomicAdd in hardware order (real nondeterminism). accum_bits / promote_every are the CPU
//    emulation's knobs and are ignored here: the hardware's accumulator is what is measured.
// Backward: FP32 (straight-through the quantisation, as on the CPU), '+=' into dinp / dweight.
// Throws std::runtime_error on CUDA/cuBLAS errors, std::invalid_argument on bad sizes.
#pragma once

#include <string>

#include "kernels/linear.h"

namespace moerl::cuda {

// Quantises W[N, K] to nm.format with nm.weight_scaling on the device and keeps it there
// (out->device); out->data stays empty. out->N, K, format are set.
void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                        const LinearNumerics& nm);
void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                    const LinearNumerics& nm);
void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w, const int* offsets,
                            int E, const LinearNumerics& nm);
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K);
void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const int* offsets, int E, int N, int K);

// Which GEMM paths this device runs ("cuBLAS 13.0; FP8 via cuBLASLt (sm_90)" or the fallback).
std::string gemm_describe();
// Achieved TFLOP/s of an n×n×n GEMM in `format` on device-resident operands (no transfers),
// fastest of repeated calls over min_seconds: the GPU ceiling for `moerl bench`.
double gemm_measure_tflops(int n, Format format, double min_seconds);

}  // namespace moerl::cuda
