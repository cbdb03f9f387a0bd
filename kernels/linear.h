// linear.h — the linear layer y = x·Wᵀ (PyTorch Linear convention, W is [N, K]) under emulated
// numerics, and its FP32 backward. This is the one entry point the model uses for every matmul
// with weights (attention projections, router, experts, dense MLP, LM head).
//
// Forward paths, chosen from LinearNumerics:
//  * exact FP32, fixed order, batch-invariant → the blocked SIMD kernel in kernels/cpu/gemm.cpp:
//    every output is one sequential FMA chain over k = 0..K-1, so it is bit-identical to
//    ref::matmul_forward and independent of M (batch-invariant by construction);
//  * reversed / split_k / batch-variant orders → the same kernel over K-chunks, with the chunks'
//    partial sums combined in the order the ReduceCtx dictates (seeded, reproducible);
//  * quantised formats → operands fake-quantised with their scales (precision.h), then either the
//    FP32 kernels above or, with accum_bits > 0, the limited-precision accumulator kernel.
// Backward: FP32, straight-through the quantisation (dinp and dweight see the unrounded operands'
// positions), written with '+='; each gradient element is one FMA chain in the reference's order
// (ref::matmul_backward), so the backward is bit-identical to it for any thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/numerics.h"

namespace moerl {

struct LinearNumerics {
  Format format = Format::fp32;          // operand format for x and W
  Scaling act_scaling = Scaling::none;   // x: tensor | row | block (1×scale_block along K)
  Scaling weight_scaling = Scaling::none;  // W: tensor | row | block (scale_block×scale_block)
  int scale_block = 128;
  int accum_bits = 0;                    // 0 = FP32 accumulation
  int promote_every = 128;
  ReduceCtx reduce;                      // order, batch invariance, noise key of this call site
};
// The numerics with the key's call read (numerics.h, noise_resolved).
inline LinearNumerics noise_resolved(LinearNumerics n) {
  n.reduce = noise_resolved(n.reduce);
  return n;
}

// A weight matrix W[N, K] quantised to the numerics' format and packed for the fast kernel.
// Pack once per optimizer step and engine; reuse for every call (decode steps included).
struct PackedWeight {
  int N = 0, K = 0;
  Format format = Format::fp32;
  std::vector<float> data;  // kernel-specific layout of the fake-quantised weight
  int exp_lo = -1, exp_hi = -1;  // FP32 exponent fields: lowest nonzero, highest (kernel's choice)
  // The CUDA backend's device copy (operands in their real storage format, with scales); null on
  // the CPU backend. Opaque here: kernels/cuda/gemm.cu owns its layout.
  std::shared_ptr<const void> device;
};
void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                        const LinearNumerics& nm);

// out[M, N] = quant(inp)[M, K] · quant(W)ᵀ, written with '='.
void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                    const LinearNumerics& nm);

// Grouped (per-expert) forward: rows offsets[e]..offsets[e+1] of inp are multiplied by w[e].
// out[offsets[E], N], inp[offsets[E], K]; experts run in parallel. Each expert's rows form their own
// call (their own M for batch variance; key.call is offset by e so each expert has its own draws).
void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w, const int* offsets,
                            int E, const LinearNumerics& nm);

// A SwiGLU expert's forward before its down projection, as one op: g = round(inp·W_gateᵀ) and
// u = round(inp·W_upᵀ) per expert (linear_forward_grouped each, with its numerics), then
// a = round(swiglu(g, u)), every rounding into `act` (round_to_format); g, u, a [rows, F] with
// F = w_gate[0].N, all '=' (g and u are kept for the backward). The same bits as those five calls;
// on a GPU, where both projections are sized on the device, one kernel instead of six launches.
void linear_swiglu_grouped(float* a, float* g, float* u, const float* inp, const PackedWeight* w_gate,
                           const PackedWeight* w_up, const int* offsets, int E, int rows,
                           const LinearNumerics& nm_gate, const LinearNumerics& nm_up, Format act);

// Its backward through the down projection and the SwiGLU, as one op: da = dy·W_down per expert
// (linear_backward_grouped's dinp into zeros, with its dweight: dw_down += per expert dyᵀ·a, when
// non-null), then dg, du += swiglu_backward(da, g, u) ('+='); dy [rows, D], a, g, u, dg, du
// [rows, F], w_down and dw_down [E, D, F]. The same bits as those calls; on a GPU with the offsets
// there, the SwiGLU is the down projection's epilogue (da never stored).
void linear_backward_swiglu_grouped(float* dg, float* du, float* dw_down, const float* dy, const float* a,
                                    const float* g, const float* u, const float* w_down, const int* offsets, int E,
                                    int rows, int D, int F);

// dinp[M, K] += dout[M, N] · W[N, K];  dweight[N, K] += dout[M, N]ᵀ · inp[M, K].
// Either gradient pointer may be null (skipped). FP32; bit-identical to ref::matmul_backward.
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K);

// Grouped backward, mirror of linear_forward_grouped; weight/dweight are [E, N, K] contiguous.
void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const int* offsets, int E, int N, int K);

// The grouped products' offsets may lie where the ids are (a device backend's memory: the
// moe_offsets op), so that the host need not read the ids to size the experts' GEMMs. True when a
// grouped forward of these numerics is sized where its offsets lie: FP32 operands, or BF16 / FP16
// operands without scales (bf16-train, fp16: each operand rounded on its own, so no expert's
// rows set another's rounding), FP32 accumulation and one chunk of K at every row count (the FP32
// backward always is). Otherwise the backend reads the E + 1 offsets first
// (kernels/op_crossings.cpp counts that read): split-K and batch-variant splits follow each
// expert's row count, and scaled formats (FP8) compute their activation scales per expert.
bool grouped_sized_on_device(const LinearNumerics& nm, int K);

// Which BLAS kernel family runs (e.g. "OpenBLAS SkylakeX"), for bench reports.
const char* blas_kernel_name();

// Achieved GFLOP/s of a square n×n×n product (2n³ flops per call): BLAS cblas_sgemm when
// use_blas, else our exact FP32 linear_forward; calls repeat for min_seconds and the fastest one
// counts (robust to other load on the machine). Both run on the threads oneTBB may use here
// (tbb::global_control). The machine's ceiling for `moerl bench`.
double gemm_measure_gflops(int n, double min_seconds, bool use_blas);

}  // namespace moerl
