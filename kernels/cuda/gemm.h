// gemm.h — the CUDA backend's linear layer y = x·Wᵀ (W is [N, K], as kernels/linear.h), on HOST
// pointers, with the GPU's real low-precision arithmetic. Forward writes out with '='; backward
// accumulates with '+='.
//  * fp32:     cublasGemmEx with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32);
//  * bf16/fp16: operands converted on the device (RNE, __float2bfloat16_rn / __float2half_rn),
//              tensor-core GEMM with FP32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F);
//  * fp8_e4m3 / fp8_e5m2 with scales (tensor | row | block 1×B activations, B×B weights):
//              scales computed on the device exactly as the CPU's (bit for bit), operands divided
//              by them and converted (E4M3 saturating, E5M2 overflowing to inf, as the emulation),
//              cuBLASLt FP8 GEMM (TN, FP32 output, fast accumulation off) on sm_89+ with the tensor
//              cores' own limited-precision accumulation; tensor scales passed to cuBLASLt
//              (A/B_SCALE_POINTER), row scales applied in FP32 after the GEMM, block scales by one
//              GEMM per K-block whose FP32 outputs are scaled and summed (DeepSeek-V3's promotion).
//              Low-precision operands are stored with K padded by zeros to 16-element K-blocks.
//  * fallback: where a format has no GEMM of its own here (FP8 below sm_89 or without a cuBLASLt
//              kernel — E5M2×E5M2 has none — and bf16 with scales, whose codes would overflow
//              the FP32 accumulator), the emulation's quantise-dequantise runs on the device and
//              an FP32 pedantic GEMM multiplies; gemm_describe() says so and counts such calls.
//  * gemm_order split_k:S (reduce_effective_split, as the CPU): S GEMMs over K-chunks into FP32
//    partials, combined per row in the ReduceCtx's order (fixed / reversed / the CPU's seeded
//    permutation) — or, with ctx.atomics, by atomicAdd in hardware order (real nondeterminism;
//    with S = 2 the two orders give the same bits, addition being commutative). Chunk bounds are
//    the CPU's c·K/S on FP32 operands, rounded down to 16 on low-precision ones, and whole K-blocks
//    under block scaling (S clamped to their number). accum_bits / promote_every are the CPU
//    emulation's knobs and are ignored here: the hardware's accumulator is what is measured.
// Backward: FP32 (straight-through the quantisation, as on the CPU), cublasGemmEx pedantic with
// beta = 1 into dinp / dweight; a null gradient pointer is skipped.
// Grouped forms: fp32 experts without split-K (forward) and dinp / dweight (backward) are ONE
// cublasGemmGroupedBatchedEx each (FP32, no TF32): the per-expert calls to within FP32 summation
// error, not bit for bit. Quantised formats and split-K loop per expert (key.call offset by the
// expert, bit for bit the per-expert calls), as does everything where cuBLAS refuses the grouped call.
// Device code runs on the calling thread's current device, with one cuBLAS and one cuBLASLt handle
// per thread. Throws std::runtime_error on CUDA/cuBLAS errors, std::invalid_argument on bad
// arguments (a weight not packed here, a format other than the packed one).
#pragma once

#include <string>

#include "kernels/linear.h"

namespace moerl::cuda {

// The linear-layer entries of kernels/ops.def: void name(parameters);
// linear_pack_weight quantises W[N, K] to nm.format with nm.weight_scaling on the device and keeps
// it there (out->device, opaque: gemm.cu's layout); out->data stays empty. out->N, K, format are
// set. The K layout follows nm (K-blocks when activations or weights are block-scaled): forward
// with the numerics it was packed with (other activation scalings take the fallback).
#define MOERL_OP(name, params, args)
#define MOERL_LINEAR_OP(name, params, args) void name params;
#include "kernels/ops.def"

// Which GEMM paths this device runs ("cuBLAS 13.0; FP8 via cuBLASLt (sm_90)" or the fallback).
std::string gemm_describe();
// Achieved TFLOP/s of an n×n×n GEMM in `format` on device-resident operands (no transfers, no
// quantisation, unscaled): the GPU ceiling for `moerl bench`. Timed with CUDA events recorded on
// the stream the GEMM runs on, around a batch of back-to-back calls long enough (≥ 2 ms) that the
// events' resolution and the launch gaps do not count; the fastest batch per call over
// min_seconds. The GEMM is the one linear_forward runs for the format (fp32: SGEMM, pedantic, no
// TF32; bf16: tensor cores; the FP32 fallback where the format has none); 0 without a device.
double gemm_measure_tflops(int n, Format format, double min_seconds);
// The current device's FP32 FMA peak, TFLOP/s (peak.h: SMs × lanes × 2 × boost clock); 0
// without a device. An SGEMM rate above it is a wrong measurement.
double device_fp32_peak_tflops();

}  // namespace moerl::cuda
