// gemm.cu — the CUDA backend's linear layer (gemm.h) on cuBLAS / cuBLASLt. Forward writes out
// with '='; backward accumulates dinp and dweight with '+=' (cuBLAS beta = 1).
//
// Forward, per call (device-resident after one upload of the activations):
//  1. Activations are quantised on the device exactly as the CPU quantises them: group amax by an
//     order-free atomicMax on |x|'s bits, scale = amax / format_max (hd/gemm_hd.h), then x / scale
//     converted by the hardware (RNE; E4M3 saturating, E5M2 overflowing to inf, as the emulation).
//     The weight was quantised the same way once, at pack time.
//  2. Low-precision operands live in a padded K layout ([rows][kp], each K-block padded with zeros
//     to 16 elements; the weight's rows padded to 16 too): the GEMM is "TN" in cuBLAS's
//     column-major terms (A = W with op T, B = X with op N, D = outᵀ), which is what cuBLASLt's FP8
//     kernels require, with 16-byte aligned pointers and k a multiple of 16.
//       bf16/fp16 → cublasGemmEx, CUBLAS_COMPUTE_32F (tensor cores, FP32 accumulation);
//       fp8       → cublasLtMatmul, E4M3/E5M2 operands, FP32 output, compute 32F, fast accumulation
//                   off (the default: cuBLASLt promotes partial sums to FP32 periodically); tensor
//                   scales passed as CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER;
//     every other scale (row; block; bf16/fp16 tensor scales) is applied in FP32 to the GEMM's
//     output: acc·sa·sw. Block scaling runs one GEMM per K-block, its FP32 output scaled and added
//     to the chunk's sum in K order (DeepSeek-V3's promotion).
//  3. fp32 (and the fallback) → cublasGemmEx with CUBLAS_COMPUTE_32F_PEDANTIC on FP32 operands.
//     The grouped form's fp32 experts without split-K are one cublasGemmGroupedBatchedEx (one group
//     per expert with rows; 32F_PEDANTIC, else 32F with the math mode checked free of TF32), and so
//     are the backward's dinp and dweight; everything else, and any call the grouped API refuses
//     (CUBLAS_STATUS_NOT_SUPPORTED), is the per-expert loop (gemm_f32_grouped).
//  4. split_k:S (reduce_effective_split, as the CPU): S partial GEMMs over K-chunks; their FP32
//     partials are combined per row in the CPU's order (the same seeded permutation,
//     gemm_chunk_order_hd), or with ctx.atomics by atomicAdd in whatever order the hardware runs
//     them. Chunk bounds are the CPU's c·K/S for FP32 operands; 16-aligned for the low-precision
//     ones; under block scaling a chunk is a run of whole K-blocks (S clamped to their number).
// Fallback: an FP8 format without a cuBLASLt kernel on this device (compute capability < 8.9, or no
// heuristic, e.g. E5M2×E5M2 which cuBLASLt does not offer), and bf16 with scales (its codes reach
// ~3e38 and their products would overflow FP32), run the emulation's arithmetic instead —
// operands quantised and dequantised on the device, FP32 pedantic GEMM — and gemm_describe() says
// so (with the number of calls that fell back).
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/buffer.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/hd/gemm_hd.h"
#include "kernels/cuda/hd/round.h"
#include "kernels/cuda/hd/swiglu.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/peak.h"

namespace moerl::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kThreads = 256;
constexpr uint64_t kWeightMagic = 0x6D6F65726C475055ull;  // identifies our PackedWeight::device

void blas_check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cuBLAS error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cublasGetStatusString(s));
}
#define MOERL_CUBLAS_CHECK(call) blas_check((call), #call, __FILE__, __LINE__)

// ---- per-thread handles and scratch ------------------------------------------------------------------

struct Handles {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* blas_ws = nullptr;
  void* lt_ws = nullptr;
  Handles() = default;
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  ~Handles() {  // at thread exit; errors (a runtime already shut down) are ignored
    if (lt) cublasLtDestroy(lt);
    if (blas) cublasDestroy(blas);
    if (blas_ws) cudaFree(blas_ws);
    if (lt_ws) cudaFree(lt_ws);
  }
};

Handles& handles() {
  thread_local Handles h;
  if (!h.blas) {
    MOERL_CUDA_CHECK(cudaMalloc(&h.blas_ws, kWorkspaceBytes));
    MOERL_CUDA_CHECK(cudaMalloc(&h.lt_ws, kWorkspaceBytes));
    MOERL_CUBLAS_CHECK(cublasLtCreate(&h.lt));
    cublasHandle_t b = nullptr;
    MOERL_CUBLAS_CHECK(cublasCreate(&b));
    h.blas = b;
    // An explicit workspace keeps cuBLAS's kernel choice (and so its bits) independent of the
    // allocator's state.
    MOERL_CUBLAS_CHECK(cublasSetWorkspace(h.blas, h.blas_ws, kWorkspaceBytes));
    // the stream every op runs on (kernels/CMakeLists.txt): capturable, unlike the legacy one
    MOERL_CUBLAS_CHECK(cublasSetStream(h.blas, cudaStreamPerThread));
  }
  return h;
}

struct Scratch {
  DeviceBuffer<float> x, out;           // the call's activations / outputs (all experts' rows)
  DeviceBuffer<float> xf;               // fake-quantised activations (fallback)
  DeviceBuffer<float> wf;               // dequantised weight (per-call fallback)
  DeviceBuffer<float> parts;            // split-K partials [S][M][N]
  DeviceBuffer<float> piece;            // one low-precision GEMM's output [M][Np]
  DeviceBuffer<float> xs;               // activation scales
  DeviceBuffer<uint32_t> amax;          // group amax keys
  DeviceBuffer<unsigned char> xq;       // activation codes [M][kp]
  DeviceBuffer<int> orders;             // combine orders [M][S]
  DeviceBuffer<float> b_dout, b_inp, b_w, b_dinp, b_dw;  // backward operands
  DeviceBuffer<float> b_da;             // linear_backward_swiglu_grouped's da (its unfused path)
  DeviceBuffer<void*> ptrs;             // a grouped GEMM's A / B / C pointer arrays (3 × problems)
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

int current_device() {
  int d = 0;
  MOERL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

// ---- fallback bookkeeping for gemm_describe ----------------------------------------------------------

std::atomic<long long> g_fallback_calls[kFormatCount];
std::mutex g_reason_mu;
std::string g_fallback_reason[kFormatCount];

void note_fallback(Format f, const std::string& why) {
  g_fallback_calls[static_cast<int>(f)].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_reason_mu);
  if (g_fallback_reason[static_cast<int>(f)].empty()) g_fallback_reason[static_cast<int>(f)] = why;
}

// ---- kernels -----------------------------------------------------------------------------------------

// amax[g] = max over group g of gemm_amax_key(x): blockIdx.x = group, blockIdx.y = slice of it.
__global__ void amax_kernel(uint32_t* amax, const float* x, GemmGroups g) {
  __shared__ uint32_t red[kThreads];
  int i0, i1, j0, j1;
  gemm_group_extent(g, static_cast<int>(blockIdx.x), &i0, &i1, &j0, &j1);
  const int w = j1 - j0;
  const int64_t count = static_cast<int64_t>(i1 - i0) * w;
  uint32_t m = 0;
  for (int64_t t = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; t < count;
       t += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    const int i = i0 + static_cast<int>(t / w), j = j0 + static_cast<int>(t % w);
    const uint32_t v = gemm_amax_key(x[static_cast<int64_t>(i) * g.cols + j]);
    m = v > m ? v : m;
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = max(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0 && red[0] > 0) atomicMax(&amax[blockIdx.x], red[0]);
}

__global__ void scale_kernel(float* scales, const uint32_t* amax, int n, Format f) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < n) scales[g] = gemm_scale_from_amax(hd_bits_float(amax[g]), f);
}

// q[i·kp + padded(j)] = code of x[i, j] / scale(i, j) (padding stays as zeroed beforehand).
template <class T>
__global__ void quant_kernel(T* q, const float* x, const float* scales, GemmGroups g, GemmKLayout L,
                             Format f) {
  const int64_t n = static_cast<int64_t>(g.rows) * g.cols;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx / g.cols), j = static_cast<int>(idx % g.cols);
    const float s = scales ? scales[gemm_group_of(g, i, j)] : 1.0f;
    q[static_cast<int64_t>(i) * L.kp + gemm_padded_col(L, j)] = static_cast<T>(gemm_quant_code(x[idx], s, f));
  }
}

// y[i, j] = fake-quantised x[i, j] (the emulation's operand, in FP32).
__global__ void fake_quant_kernel(float* y, const float* x, const float* scales, GemmGroups g, Format f) {
  const int64_t n = static_cast<int64_t>(g.rows) * g.cols;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx / g.cols), j = static_cast<int>(idx % g.cols);
    const float s = scales ? scales[gemm_group_of(g, i, j)] : 1.0f;
    y[idx] = gemm_fake_quant(x[idx], s, f);
  }
}

// y[i, j] = value of code q[i·kp + padded(j)] · scale(i, j): a packed weight back in FP32.
template <class T>
__global__ void dequant_kernel(float* y, const T* q, const float* scales, GemmGroups g, GemmKLayout L,
                               Format f) {
  const int64_t n = static_cast<int64_t>(g.rows) * g.cols;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx / g.cols), j = static_cast<int>(idx % g.cols);
    const float s = scales ? scales[gemm_group_of(g, i, j)] : 1.0f;
    const float v = gemm_code_value(q[static_cast<int64_t>(i) * L.kp + gemm_padded_col(L, j)], f);
    y[idx] = f == Format::fp32 ? v : hd_mul(v, s);
  }
}

struct ScaleRef {
  const float* s = nullptr;  // null: factor 1 (no scaling, or applied by cuBLASLt)
  GemmGroups g;
};

// dst[m·ldd + n] (+)= src[m·lds + n]·sa(m, kb)·sw(n, kb) for m < M, n < N.
__global__ void epilogue_kernel(float* dst, int ldd, const float* src, int lds, int M, int N,
                                bool accumulate, ScaleRef a, ScaleRef w, int kb, int kblock) {
  const int64_t total = static_cast<int64_t>(M) * N;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(idx / N), n = static_cast<int>(idx % N);
    const float v = gemm_apply_scales(src[static_cast<int64_t>(m) * lds + n],
                                      gemm_scale_at(a.s, a.g, m, kb, kblock),
                                      gemm_scale_at(w.s, w.g, n, kb, kblock));
    float* d = dst + static_cast<int64_t>(m) * ldd + n;
    *d = accumulate ? hd_add(*d, v) : v;
  }
}

// orders[m·S .. m·S+S) = the combine order of row m (the CPU's permutation).
// call_at (NoiseKey::call_at, device memory, or null) adds a decode step's call read here.
__global__ void order_kernel(int* orders, int M, int S, OrderKind kind, uint64_t seed, uint32_t layer,
                             uint32_t site, uint64_t call, const uint64_t* call_at) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m < M)
    gemm_chunk_order_hd(orders + static_cast<int64_t>(m) * S, S, kind, seed, layer, site,
                        call + (call_at ? *call_at : 0), m);
}

// out[m, n] = Σ in row m's order of parts[c][m, n] (parts [S][M][N]).
__global__ void combine_kernel(float* out, const float* parts, const int* orders, int M, int N, int S) {
  const int64_t total = static_cast<int64_t>(M) * N;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int m = static_cast<int>(idx / N);
    out[idx] = gemm_combine_ordered(parts + idx, total, orders + static_cast<int64_t>(m) * S, S);
  }
}

// out[m, n] += parts[c][m, n] for every c, by atomicAdd: the order is the hardware's.
__global__ void atomic_combine_kernel(float* out, const float* parts, int64_t total, int S) {
  const int64_t n = total * S;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    atomicAdd(out + idx % total, parts[idx]);
}

// Deterministic pseudo-random operands for gemm_measure_tflops: uniform in [-1, 1).
__global__ void fill_kernel(float* x, int64_t n, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(rng_mix64(seed + static_cast<uint64_t>(i)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

unsigned grid_of(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535)));
}

// ---- quantisation on the device ------------------------------------------------------------------------

// scales[groups] of x[rows, cols] (device); nullptr when the scaling has no groups.
float* compute_scales(DeviceBuffer<float>* scales, DeviceBuffer<uint32_t>* amax, const float* x,
                      const GemmGroups& g, Format f) {
  const int groups = gemm_group_count(g);
  if (groups == 0) return nullptr;
  amax->zero(static_cast<size_t>(groups));
  scales->resize(static_cast<size_t>(groups));
  const int64_t per_group = static_cast<int64_t>(std::min(g.br, g.rows)) * std::min(g.bc, g.cols);
  const unsigned slices = static_cast<unsigned>(
      std::clamp<int64_t>((per_group + kThreads * 8 - 1) / (kThreads * 8), 1, 65535));
  amax_kernel<<<dim3(static_cast<unsigned>(groups), slices), kThreads>>>(amax->get(), x, g);
  MOERL_CUDA_LAUNCHED();
  scale_kernel<<<grid_for(groups, kThreads), kThreads>>>(scales->get(), amax->get(), groups, f);
  MOERL_CUDA_LAUNCHED();
  return scales->get();
}

// codes (rows padded to `rows_alloc`, [rows_alloc][L.kp], zero padding) of x[g.rows, g.cols].
void quantise_codes(unsigned char* q, int rows_alloc, const float* x, const float* scales,
                    const GemmGroups& g, const GemmKLayout& L, Format f) {
  const int bytes = gemm_code_bytes(f);
  MOERL_CUDA_CHECK(cudaMemsetAsync(q, 0, static_cast<size_t>(rows_alloc) * L.kp * bytes, cudaStreamPerThread));
  const int64_t n = static_cast<int64_t>(g.rows) * g.cols;
  if (bytes == 2)
    quant_kernel<uint16_t><<<grid_of(n), kThreads>>>(reinterpret_cast<uint16_t*>(q), x, scales, g, L, f);
  else
    quant_kernel<uint8_t><<<grid_of(n), kThreads>>>(q, x, scales, g, L, f);
  MOERL_CUDA_LAUNCHED();
}

void fake_quantise(float* y, const float* x, const float* scales, const GemmGroups& g, Format f) {
  const int64_t n = static_cast<int64_t>(g.rows) * g.cols;
  fake_quant_kernel<<<grid_of(n), kThreads>>>(y, x, scales, g, f);
  MOERL_CUDA_LAUNCHED();
}

// ---- the packed weight ---------------------------------------------------------------------------------

struct DeviceWeight {
  uint64_t magic = kWeightMagic;
  int N = 0, K = 0, Np = 0;
  Format format = Format::fp32;
  Scaling scaling = Scaling::none;  // the weight's
  int block = 128;
  bool blocked = false;   // K layout cut at the scale block (activation or weight block scaling)
  bool lowp = false;      // codes in q (GEMM in the format); else f32 holds the FP32 operand
  GemmGroups g;           // the weight's scale groups
  GemmKLayout L;
  DeviceBuffer<unsigned char> q;  // [Np][kp] codes
  DeviceBuffer<float> scales;     // [groups]
  DeviceBuffer<float> f32;        // [N][K] (fp32 format or fallback: fake-quantised)
  // The first expert of a grouped call keeps the group's weight pointers where the sized kernel
  // reads them (grouped_forward_sized): uploaded once, then again only if one changes, so that a
  // recorded decode step copies nothing; they live as long as the packed weights.
  mutable std::vector<const void*> group_host;
  mutable DeviceBuffer<uintptr_t> group_dev;
};

const DeviceWeight& device_weight(const PackedWeight& w, const LinearNumerics& nm) {
  const auto* d = static_cast<const DeviceWeight*>(w.device.get());
  if (!d || d->magic != kWeightMagic)
    throw std::invalid_argument("cuda linear: weight not packed by the CUDA backend (linear_pack_weight)");
  if (w.format != nm.format || d->format != nm.format)
    throw std::invalid_argument(std::string("cuda linear: weight packed as ") + format_name(d->format) +
                                " used with numerics format " + format_name(nm.format));
  return *d;
}

bool blocked_layout(const LinearNumerics& nm) {
  return nm.format != Format::fp32 &&
         (nm.act_scaling == Scaling::block || nm.weight_scaling == Scaling::block);
}

void check_numerics(const LinearNumerics& nm) {
  if (nm.format != Format::fp32 &&
      (nm.act_scaling == Scaling::block || nm.weight_scaling == Scaling::block) && nm.scale_block < 1)
    throw std::invalid_argument("cuda linear: block scaling needs scale_block >= 1");
}

// ---- GEMMs ------------------------------------------------------------------------------------------

// D[M, ldd] = X[M, ldx](k0..k0+klen) · W[N, ldw](k0..)ᵀ, FP32 pedantic (no TF32), beta = 0.
void gemm_f32(float* D, int ldd, const float* W, int ldw, const float* X, int ldx, int k0, int klen,
              int M, int N) {
  const float one = 1.0f, zero = 0.0f;
  MOERL_CUBLAS_CHECK(cublasGemmEx(handles().blas, CUBLAS_OP_T, CUBLAS_OP_N, N, M, klen, &one, W + k0,
                                  CUDA_R_32F, ldw, X + k0, CUDA_R_32F, ldx, &zero, D, CUDA_R_32F, ldd,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
}

// ---- grouped FP32 GEMM (the experts of linear_forward_grouped / linear_backward_grouped) -------------

// One FP32 problem as cublasGemmEx takes it (column-major): C[m × n] = op(A)·op(B) + beta·C.
struct GemmProblem {
  cublasOperation_t ta, tb;
  int m, n, k;
  const float* A;
  int lda;
  const float* B;
  int ldb;
  float* C;
  int ldc;
};

// cuBLAS ≥ 12.5 declares cublasGemmGroupedBatchedEx; older headers build the per-expert loop only.
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500
#define MOERL_CUBLAS_GROUPED 1
#else
#define MOERL_CUBLAS_GROUPED 0
#endif

// What the grouped GEMM runs with on a device, found by the first grouped call (per thread and
// device, as the handles): untried; compute type 32F_PEDANTIC; 32F (no TF32, see below); or the
// per-expert loop (grouped API absent or refusing FP32).
enum class GroupedMode { untried, pedantic, f32, loop };
std::atomic<int> g_grouped_mode{static_cast<int>(GroupedMode::untried)};  // the latest finding, any thread
std::string g_grouped_reason;                                              // why loop (g_reason_mu)

void note_grouped(GroupedMode m, const std::string& why) {
  g_grouped_mode.store(static_cast<int>(m), std::memory_order_relaxed);
  if (why.empty()) return;
  std::lock_guard<std::mutex> lock(g_reason_mu);
  g_grouped_reason = why;
}

// The status codes that mean "this cuBLAS does not do that grouped GEMM" (nothing was launched):
// the caller falls back to one cublasGemmEx per problem.
bool grouped_unsupported(cublasStatus_t s) {
  return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH;
}

// Whether the handle's math mode keeps CUBLAS_COMPUTE_32F in true FP32: no TF32 tensor cores
// (CUBLAS_TF32_TENSOR_OP_MATH, or the deprecated CUBLAS_TENSOR_OP_MATH) and no BF16x9 emulation.
// Our handle is created with CUBLAS_DEFAULT_MATH and nothing here changes it; checked anyway,
// since COMPUTE_32F obeys the math mode where COMPUTE_32F_PEDANTIC does not.
bool math_mode_is_fp32(cublasHandle_t h, std::string* why) {
  cublasMath_t mm = CUBLAS_DEFAULT_MATH;
  MOERL_CUBLAS_CHECK(cublasGetMathMode(h, &mm));
  const int base = static_cast<int>(mm) & 0x3;
  bool ok = base == CUBLAS_DEFAULT_MATH || base == CUBLAS_PEDANTIC_MATH;
#if CUBLAS_VER_MAJOR >= 13
  ok = ok && (static_cast<int>(mm) & CUBLAS_FP32_EMULATED_BF16X9_MATH) == 0;
#endif
  if (!ok && why) *why = "the cuBLAS handle's math mode (" + std::to_string(static_cast<int>(mm)) +
                         ") allows TF32 or emulated FP32";
  return ok;
}

// All problems (alpha = 1, the given beta; FP32 A, B, C) in ONE cublasGemmGroupedBatchedEx call,
// one group per problem. The A/B/C pointer arrays are built here and uploaded once into a small
// per-thread device scratch (3 pointers a problem; they are addresses, no activation crosses).
// Returns false, having launched nothing, where the grouped API is absent or refuses the types
// (CUBLAS_STATUS_NOT_SUPPORTED): the caller then runs one cublasGemmEx per problem, as before.
//
// Compute type: CUBLAS_COMPUTE_32F_PEDANTIC first (the per-expert path's; the cuBLAS manual lists
// it for cublasGemmGroupedBatchedEx with CUDA_R_32F A/B/C, but older manuals list only
// 32F / 32F_FAST_TF32 / 64F); if that is refused, CUBLAS_COMPUTE_32F — which on FP32 operands is
// an FP32 GEMM unless the math mode asks for TF32 or BF16x9 emulation (math_mode_is_fp32 checks it,
// else the loop). Either way every product and sum is an IEEE FP32 operation (no TF32 rounding of
// the operands to 10 mantissa bits); what may differ from the per-expert cublasGemmEx is the
// kernel, i.e. the order and blocking of the K-sum — so the grouped result is the per-expert one
// to within FP32 summation error, not bit for bit (tests/gpu/test_gemm_gpu.cpp checks both).
bool gemm_f32_grouped(const std::vector<GemmProblem>& ps, float beta) {
  if (ps.empty()) return true;
#if !MOERL_CUBLAS_GROUPED
  note_grouped(GroupedMode::loop, "built against cuBLAS " + std::to_string(CUBLAS_VERSION) +
                                      ", without cublasGemmGroupedBatchedEx (12.5+)");
  return false;
#else
  thread_local std::map<int, GroupedMode> modes;  // per device
  GroupedMode& mode = modes[current_device()];
  if (mode == GroupedMode::loop) return false;
  Handles& h = handles();
  if (mode == GroupedMode::untried) {
    int version = 0;
    MOERL_CUBLAS_CHECK(cublasGetVersion(h.blas, &version));
    if (version < 120500) {  // a runtime library older than the header
      mode = GroupedMode::loop;
      note_grouped(mode, "cuBLAS " + std::to_string(version) + " has no cublasGemmGroupedBatchedEx (12.5+)");
      return false;
    }
  }
  const int G = static_cast<int>(ps.size());
  std::vector<cublasOperation_t> ta(G), tb(G);
  std::vector<int> m(G), n(G), k(G), lda(G), ldb(G), ldc(G), size(G, 1);
  std::vector<float> alpha(G, 1.0f), betas(G, beta);
  std::vector<void*> ptrs(static_cast<size_t>(3) * G);
  for (int i = 0; i < G; ++i) {
    const GemmProblem& p = ps[static_cast<size_t>(i)];
    ta[i] = p.ta;
    tb[i] = p.tb;
    m[i] = p.m;
    n[i] = p.n;
    k[i] = p.k;
    lda[i] = p.lda;
    ldb[i] = p.ldb;
    ldc[i] = p.ldc;
    ptrs[i] = const_cast<float*>(p.A);
    ptrs[G + i] = const_cast<float*>(p.B);
    ptrs[2 * G + i] = p.C;
  }
  // A synchronous copy on the legacy default stream, where the GEMMs run: it waits for the GEMMs
  // still reading the previous call's arrays before it overwrites them.
  Scratch& sc = scratch();
  sc.ptrs.upload(ptrs.data(), ptrs.size());
  void* const* dA = sc.ptrs.get();
  auto run = [&](cublasComputeType_t ct) {
    return cublasGemmGroupedBatchedEx(h.blas, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(),
                                      dA, CUDA_R_32F, lda.data(), dA + G, CUDA_R_32F, ldb.data(), betas.data(),
                                      dA + 2 * G, CUDA_R_32F, ldc.data(), G, size.data(), ct);
  };
  // One try with a compute type: true, the mode noted, when it ran; false when cuBLAS refuses it
  // (nothing launched); any other error throws.
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  auto attempt = [&](cublasComputeType_t ct, GroupedMode as, const char* what) {
    s = run(ct);
    if (s == CUBLAS_STATUS_SUCCESS) {
      if (mode != as) note_grouped(as, "");
      mode = as;
      return true;
    }
    if (!grouped_unsupported(s)) blas_check(s, what, __FILE__, __LINE__);
    return false;
  };
  if (mode != GroupedMode::f32 &&  // untried or pedantic
      attempt(CUBLAS_COMPUTE_32F_PEDANTIC, GroupedMode::pedantic, "cublasGemmGroupedBatchedEx(32F_PEDANTIC)"))
    return true;
  std::string why;
  if (!math_mode_is_fp32(h.blas, &why)) {
    mode = GroupedMode::loop;
    note_grouped(mode, "32F_PEDANTIC refused and " + why);
    return false;
  }
  if (attempt(CUBLAS_COMPUTE_32F, GroupedMode::f32, "cublasGemmGroupedBatchedEx(32F)")) return true;
  mode = GroupedMode::loop;
  note_grouped(mode, std::string("cublasGemmGroupedBatchedEx refuses FP32 (") + cublasGetStatusString(s) + ")");
  return false;
#endif
}

uint32_t ptr_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

cudaDataType lowp_type(Format f) {
  switch (f) {
    case Format::bf16: return CUDA_R_16BF;
    case Format::fp16: return CUDA_R_16F;
    case Format::fp8_e4m3: return CUDA_R_8F_E4M3;
    case Format::fp8_e5m2: return CUDA_R_8F_E5M2;
    case Format::fp32: break;
  }
  return CUDA_R_32F;
}

// One cuBLASLt FP8 problem: D[n][ldd] (col-major m × n) = op_T(A)[m × k] · B[k × n].
struct LtKey {
  int device, fmt, m, n, k, lda, ldd;
  bool a_scaled, b_scaled;
  uint32_t al_a, al_b, al_d;
  bool operator<(const LtKey& o) const {
    return std::tie(device, fmt, m, n, k, lda, ldd, a_scaled, b_scaled, al_a, al_b, al_d) <
           std::tie(o.device, o.fmt, o.m, o.n, o.k, o.lda, o.ldd, o.a_scaled, o.b_scaled, o.al_a,
                    o.al_b, o.al_d);
  }
};
struct LtPlan {
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;  // of the heuristic query
  bool ok = false;
  cublasLtMatmulAlgo_t algo{};
};

struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void lt_describe(LtDescs* ds, Format f, int m, int n, int k, int lda, int ldd, const float* a_scale,
                 const float* b_scale) {
  MOERL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&ds->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MOERL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MOERL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int8_t fast_accum = 0;  // keep cuBLASLt's periodic FP32 promotion
  MOERL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                                    sizeof(fast_accum)));
  if (a_scale)
    MOERL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &a_scale, sizeof(a_scale)));
  if (b_scale)
    MOERL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(ds->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &b_scale, sizeof(b_scale)));
  const cudaDataType t = lowp_type(f);
  MOERL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds->a, t, k, m, lda));  // stored k × m, used transposed
  MOERL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds->b, t, k, n, lda));
  MOERL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ds->d, CUDA_R_32F, m, n, ldd));
}

const LtPlan& lt_plan(const LtKey& key, const LtDescs& ds) {
  thread_local std::map<LtKey, LtPlan> cache;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  LtPlan plan;
  cublasLtMatmulPreference_t pref = nullptr;
  MOERL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.al_a, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.al_b, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.al_d, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.al_d, sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  plan.status = cublasLtMatmulAlgoGetHeuristic(handles().lt, ds.op, ds.a, ds.b, ds.d, ds.d, pref, 1,
                                               &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  plan.ok = plan.status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.ok) plan.algo = result.algo;
  return cache.emplace(key, plan).first->second;
}

// FP8 GEMM by cuBLASLt; false when cuBLASLt has no kernel for the problem (nothing was launched).
bool lt_gemm(float* D, int ldd, const unsigned char* A, const unsigned char* B, int lda, int m, int n,
             int k, Format f, const float* a_scale, const float* b_scale, std::string* why) {
  LtDescs ds;
  lt_describe(&ds, f, m, n, k, lda, ldd, a_scale, b_scale);
  const LtKey key{current_device(), static_cast<int>(f), m, n, k, lda, ldd, a_scale != nullptr,
                  b_scale != nullptr, ptr_alignment(A), ptr_alignment(B), ptr_alignment(D)};
  const LtPlan& plan = lt_plan(key, ds);
  if (!plan.ok) {
    if (why)
      *why = std::string("cuBLASLt has no ") + format_name(f) + " kernel (heuristic: " +
             cublasGetStatusString(plan.status) + ")";
    return false;
  }
  const float one = 1.0f, zero = 0.0f;
  Handles& h = handles();
  MOERL_CUBLAS_CHECK(cublasLtMatmul(h.lt, ds.op, &one, A, ds.a, B, ds.b, &zero, D, ds.d, D, ds.d,
                                    &plan.algo, h.lt_ws, kWorkspaceBytes, cudaStreamPerThread));
  return true;
}

// Compute capability ≥ 8.9 and a cuBLASLt kernel for a probe problem in format f (cached per thread
// and device). *why receives the reason when not.
bool fp8_available(Format f, std::string* why) {
  struct Probe {
    int state = -1;  // -1 unknown, 0 no, 1 yes
    std::string why;
  };
  thread_local std::map<std::pair<int, int>, Probe> cache;
  const int dev = current_device();
  Probe& p = cache[{dev, static_cast<int>(f)}];
  if (p.state < 0) {
    int major = 0, minor = 0;
    MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major * 10 + minor < 89) {
      p.state = 0;
      p.why = "FP8 GEMMs need compute capability 8.9+ (device is sm_" + std::to_string(major) +
              std::to_string(minor) + ")";
    } else {
      constexpr int n = 64;
      DeviceBuffer<unsigned char> a(n * n), b(n * n);
      DeviceBuffer<float> d(n * n);
      LtDescs ds;
      lt_describe(&ds, f, n, n, n, n, n, nullptr, nullptr);
      const LtKey key{dev, static_cast<int>(f), n, n, n, n, n, false, false, ptr_alignment(a.get()),
                      ptr_alignment(b.get()), ptr_alignment(d.get())};
      const LtPlan& plan = lt_plan(key, ds);
      p.state = plan.ok ? 1 : 0;
      if (!plan.ok)
        p.why = std::string("cuBLASLt has no ") + format_name(f) + "×" + format_name(f) +
                " kernel (heuristic: " + cublasGetStatusString(plan.status) + ")";
    }
  }
  if (why) *why = p.why;
  return p.state == 1;
}

bool lowp_available(Format f, std::string* why) {
  if (f == Format::bf16 || f == Format::fp16) return true;
  if (f == Format::fp8_e4m3 || f == Format::fp8_e5m2) return fp8_available(f, why);
  return false;
}

// Whether these numerics run as a GEMM in their own format. Scaled bf16 does not: its codes x/scale
// reach ~3e38 (bf16 has FP32's range) and their products would overflow the FP32 accumulator (the
// model never scales bf16/fp16 — models/sites.h — but the numerics allow it).
bool lowp_for(const LinearNumerics& nm, std::string* why) {
  if (nm.format == Format::bf16 && (nm.act_scaling != Scaling::none || nm.weight_scaling != Scaling::none)) {
    if (why) *why = "scaled bf16 codes would overflow the FP32 accumulator";
    return false;
  }
  return lowp_available(nm.format, why);
}

// D[M][ldd=Np] = codes X[M][kp](k0..k0+klen) · W[Np][kp](k0..)ᵀ without scales, except the tensor
// scales that the FP8 path hands to cuBLASLt. False: no FP8 kernel (nothing launched).
bool gemm_lowp(float* D, const DeviceWeight& w, const unsigned char* xq, int M, int k0, int klen,
               const float* a_scale, const float* b_scale, std::string* why) {
  const int bytes = gemm_code_bytes(w.format);
  const unsigned char* A = w.q.get() + static_cast<int64_t>(k0) * bytes;
  const unsigned char* B = xq + static_cast<int64_t>(k0) * bytes;
  if (w.format == Format::bf16 || w.format == Format::fp16) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType t = lowp_type(w.format);
    MOERL_CUBLAS_CHECK(cublasGemmEx(handles().blas, CUBLAS_OP_T, CUBLAS_OP_N, w.Np, M, klen, &one, A, t,
                                    w.L.kp, B, t, w.L.kp, &zero, D, CUDA_R_32F, w.Np,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return true;
  }
  return lt_gemm(D, w.Np, A, B, w.L.kp, w.Np, M, klen, w.format, a_scale, b_scale, why);
}

// ---- split-K combine ---------------------------------------------------------------------------------

// out[M, N] from parts[S][M][N]: the ctx's order per row, or atomicAdd with ctx.atomics.
void combine_parts(float* out, const float* parts, int M, int N, int S, const ReduceCtx& ctx,
                   uint64_t call_offset) {
  const int64_t total = static_cast<int64_t>(M) * N;
  if (ctx.atomics) {
    MOERL_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(total) * sizeof(float), cudaStreamPerThread));
    atomic_combine_kernel<<<grid_of(total * S), kThreads>>>(out, parts, total, S);
    MOERL_CUDA_LAUNCHED();
    return;
  }
  Scratch& sc = scratch();
  sc.orders.resize(static_cast<size_t>(M) * S);
  order_kernel<<<grid_for(M, kThreads), kThreads>>>(sc.orders.get(), M, S, ctx.order.kind, ctx.key.seed,
                                                    ctx.key.layer, ctx.key.site, ctx.key.call + call_offset,
                                                    ctx.key.call_at);
  MOERL_CUDA_LAUNCHED();
  combine_kernel<<<grid_of(total), kThreads>>>(out, parts, sc.orders.get(), M, N, S);
  MOERL_CUDA_LAUNCHED();
}

int effective_split(const LinearNumerics& nm, int M, int K) {
  return std::clamp(reduce_effective_split(nm.reduce, M, K), 1, std::max(1, std::min(K, kGemmMaxSplit)));
}

// FP32 operands: d_out[M, N] = X[M, K] · W[N, K]ᵀ with the call's split-K plan.
void forward_f32(float* d_out, const float* X, const float* W, int M, int N, int K, int S,
                 const ReduceCtx& ctx, uint64_t call_offset) {
  if (S == 1) {
    gemm_f32(d_out, N, W, K, X, K, 0, K, M, N);
    return;
  }
  Scratch& sc = scratch();
  const int64_t total = static_cast<int64_t>(M) * N;
  sc.parts.resize(static_cast<size_t>(total) * S);
  for (int c = 0; c < S; ++c) {
    const int k0 = gemm_chunk_bound(c, S, K), k1 = gemm_chunk_bound(c + 1, S, K);
    float* part = sc.parts.get() + total * c;
    if (k1 > k0)
      gemm_f32(part, N, W, K, X, K, k0, k1 - k0, M, N);
    else
      MOERL_CUDA_CHECK(cudaMemsetAsync(part, 0, static_cast<size_t>(total) * sizeof(float), cudaStreamPerThread));
  }
  combine_parts(d_out, sc.parts.get(), M, N, S, ctx, call_offset);
}

// Low-precision operands (codes): false when the FP8 GEMM is not available for this problem.
bool forward_lowp(float* d_out, const DeviceWeight& w, const unsigned char* xq, const float* xs,
                  const GemmGroups& xg, Scaling act_scaling, int M, int S, const ReduceCtx& ctx,
                  uint64_t call_offset, std::string* why) {
  const int N = w.N;
  const bool fp8 = w.format == Format::fp8_e4m3 || w.format == Format::fp8_e5m2;
  // Tensor scales of the FP8 path go to cuBLASLt (A = the weight, B = the activations).
  const float* a_scale = fp8 && w.scaling == Scaling::tensor ? w.scales.get() : nullptr;
  const float* b_scale = fp8 && act_scaling == Scaling::tensor ? xs : nullptr;
  ScaleRef sa, sw;
  sa.s = b_scale ? nullptr : xs;
  sa.g = xg;
  sw.s = a_scale ? nullptr : (w.scaling == Scaling::none ? nullptr : w.scales.get());
  sw.g = w.g;
  Scratch& sc = scratch();
  const int64_t total = static_cast<int64_t>(M) * N;
  sc.piece.resize(static_cast<size_t>(M) * w.Np);
  float* piece = sc.piece.get();
  const int kb_count = w.L.nkb;
  if (w.blocked) S = std::min(S, kb_count);
  if (S > 1) sc.parts.resize(static_cast<size_t>(total) * S);
  const unsigned grid = grid_of(total);
  for (int c = 0; c < S; ++c) {
    float* target = S == 1 ? d_out : sc.parts.get() + total * c;
    if (w.blocked) {
      const int b0 = gemm_chunk_first_block(c, S, kb_count), b1 = gemm_chunk_first_block(c + 1, S, kb_count);
      if (b1 == b0)
        MOERL_CUDA_CHECK(cudaMemsetAsync(target, 0, static_cast<size_t>(total) * sizeof(float), cudaStreamPerThread));
      for (int kb = b0; kb < b1; ++kb) {
        if (!gemm_lowp(piece, w, xq, M, kb * w.L.bp, w.L.bp, a_scale, b_scale, why)) return false;
        epilogue_kernel<<<grid, kThreads>>>(target, N, piece, w.Np, M, N, kb > b0, sa, sw, kb, w.L.kblock);
        MOERL_CUDA_LAUNCHED();
      }
    } else {
      const int k0 = gemm_chunk_bound_aligned(c, S, w.K, w.L.kp, kGemmAlign);
      const int k1 = gemm_chunk_bound_aligned(c + 1, S, w.K, w.L.kp, kGemmAlign);
      if (k1 == k0) {
        MOERL_CUDA_CHECK(cudaMemsetAsync(target, 0, static_cast<size_t>(total) * sizeof(float), cudaStreamPerThread));
        continue;
      }
      if (!gemm_lowp(piece, w, xq, M, k0, k1 - k0, a_scale, b_scale, why)) return false;
      epilogue_kernel<<<grid, kThreads>>>(target, N, piece, w.Np, M, N, false, sa, sw, 0, w.L.kblock);
      MOERL_CUDA_LAUNCHED();
    }
  }
  if (S > 1) combine_parts(d_out, sc.parts.get(), M, N, S, ctx, call_offset);
  return true;
}

// d_out[M, N] = quant(X)[M, K] · quant(W)ᵀ for device X (one call of the CPU's linear_forward, or one
// expert of the grouped form with key.call offset by call_offset).
void forward_device(float* d_out, const float* X, const DeviceWeight& w, int M, const LinearNumerics& nm,
                    uint64_t call_offset) {
  const int N = w.N, K = w.K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    MOERL_CUDA_CHECK(cudaMemsetAsync(d_out, 0, static_cast<size_t>(M) * N * sizeof(float), cudaStreamPerThread));
    return;
  }
  const int S = effective_split(nm, M, K);
  if (nm.format == Format::fp32) {
    forward_f32(d_out, X, w.f32.get(), M, N, K, S, nm.reduce, call_offset);
    return;
  }
  Scratch& sc = scratch();
  const GemmGroups xg = gemm_groups(M, K, nm.act_scaling, 1, nm.scale_block);
  const float* xs = compute_scales(&sc.xs, &sc.amax, X, xg, nm.format);
  std::string why;
  // The weight's K layout follows the numerics it was packed with (K-blocks when either operand is
  // block-scaled); a call with other activation scaling takes the fallback.
  const bool layout_ok = blocked_layout(nm) == w.blocked && (!w.blocked || nm.scale_block == w.block);
  if (!layout_ok) why = "weight packed for another activation scaling or scale block";
  if (layout_ok && lowp_for(nm, &why) && w.lowp) {
    sc.xq.resize(static_cast<size_t>(M) * w.L.kp * gemm_code_bytes(nm.format));
    quantise_codes(sc.xq.get(), M, X, xs, xg, w.L, nm.format);
    if (forward_lowp(d_out, w, sc.xq.get(), xs, xg, nm.act_scaling, M, S, nm.reduce, call_offset, &why))
      return;
  }
  // Fallback: the emulation's operands in FP32, pedantic GEMM.
  note_fallback(nm.format, why.empty() ? "weight packed for the emulation path" : why);
  sc.xf.resize(static_cast<size_t>(M) * K);
  fake_quantise(sc.xf.get(), X, xs, xg, nm.format);
  const float* W = w.f32.get();
  if (w.lowp) {  // dequantise the codes
    sc.wf.resize(static_cast<size_t>(N) * K);
    const int64_t n = static_cast<int64_t>(N) * K;
    const float* ws = w.scaling == Scaling::none ? nullptr : w.scales.get();
    if (gemm_code_bytes(w.format) == 2)
      dequant_kernel<uint16_t><<<grid_of(n), kThreads>>>(
          sc.wf.get(), reinterpret_cast<const uint16_t*>(w.q.get()), ws, w.g, w.L, w.format);
    else
      dequant_kernel<uint8_t><<<grid_of(n), kThreads>>>(sc.wf.get(), w.q.get(), ws, w.g, w.L, w.format);
    MOERL_CUDA_LAUNCHED();
    W = sc.wf.get();
  }
  forward_f32(d_out, sc.xf.get(), W, M, N, K, S, nm.reduce, call_offset);
}

// ---- backward -----------------------------------------------------------------------------------------

// dX[M, K] += dY[M, N] · W[N, K]  (column-major: dXᵀ[K×M] += W^T-as-stored[K×N] · dYᵀ[N×M]).
void backward_input(float* dX, const float* dY, const float* W, int M, int N, int K) {
  const float one = 1.0f;
  MOERL_CUBLAS_CHECK(cublasGemmEx(handles().blas, CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, W, CUDA_R_32F,
                                  K, dY, CUDA_R_32F, N, &one, dX, CUDA_R_32F, K,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
}
// dW[N, K] += dY[M, N]ᵀ · X[M, K]  (column-major: dWᵀ[K×N] += Xᵀ[K×M] · (dYᵀ)ᵀ[M×N]).
void backward_weight(float* dW, const float* dY, const float* X, int M, int N, int K) {
  const float one = 1.0f;
  MOERL_CUBLAS_CHECK(cublasGemmEx(handles().blas, CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, X, CUDA_R_32F,
                                  K, dY, CUDA_R_32F, N, &one, dW, CUDA_R_32F, K,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT));
}

void check_grouped_offsets(const int* offsets, int E, const char* what) {
  for (int e = 0; e < E; ++e)
    if (offsets[e + 1] < offsets[e])
      throw std::invalid_argument(std::string(what) + ": offsets must be non-decreasing");
}

// ---- grouped products sized where their offsets lie ----------------------------------------------
// The experts' row offsets in device memory (the moe_offsets op, drawn where the router's ids are):
// no host read sizes these launches. Rows are walked with a grid stride up to offsets[E]; each
// output is one FP32 FMA chain from 0 in the reduction's order, as the CPU's product (one chunk of
// K, FP32 accumulation: grouped_sized_on_device), so the forward's and the input gradient's bits are
// the CPU's; the weight gradient sums each expert's rows in order. The forward's operands are FP32,
// or BF16 / FP16 without scales (bf16-train): each activation rounded as the CPU rounds it
// (hd_round_to_format, tests/cuda_host/test_hd_round.cpp), each weight the value of its code.
__device__ int grouped_expert_of_row(const int* off, int E, int r) {
  int lo = 0, hi = E;  // the largest e < E with off[e] <= r (empty experts passed over)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (off[mid] <= r) lo = mid; else hi = mid;
  }
  return lo;
}
__device__ float sized_weight_value(float w, Format) { return w; }  // FP32, or fake-quantised
__device__ float sized_weight_value(uint16_t code, Format f) { return gemm_code_value(code, f); }
// One output's FMA chain from 0 in the order of K: Σ_k round(x[k])·value(wr[k]) (fp32: x as it is).
template <class T>
__device__ float sized_chain(const float* x, const T* wr, int K, Format f) {
  float acc = 0.0f;
  if (f == Format::fp32)
    for (int k = 0; k < K; ++k) acc = __fmaf_rn(x[k], sized_weight_value(wr[k], f), acc);
  else
    for (int k = 0; k < K; ++k) acc = __fmaf_rn(hd_round_to_format(x[k], f), sized_weight_value(wr[k], f), acc);
  return acc;
}
// out[r, n] = Σ_k round(inp[r, k])·W_e[n, k], W_e's row n at w[e] + n·ldw (T: float, or 16-bit codes)
template <class T>
__global__ void grouped_forward_sized_kernel(float* out, const float* inp, const T* const* w, int64_t ldw,
                                             const int* off, int E, int N, int K, Format f) {
  const int n = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (n >= N) return;
  const int end = off[E];
  for (int r = off[0] + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); r < end;
       r += static_cast<int>(gridDim.y * blockDim.y)) {
    const T* wr = w[grouped_expert_of_row(off, E, r)] + static_cast<int64_t>(n) * ldw;
    out[static_cast<int64_t>(r) * N + n] = sized_chain(inp + static_cast<int64_t>(r) * K, wr, K, f);
  }
}
// The gate and up chains of grouped_forward_sized_kernel for one output (r, n), each rounded into
// `act`, then their SwiGLU rounded: g, u, a [rows, N] (linear_swiglu_grouped, one launch).
template <class T>
__global__ void grouped_swiglu_sized_kernel(float* a, float* g, float* u, const float* inp, const T* const* wg,
                                            const T* const* wu, int64_t ldw, const int* off, int E, int N, int K,
                                            Format f, Format act) {
  const int n = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (n >= N) return;
  const int end = off[E];
  for (int r = off[0] + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); r < end;
       r += static_cast<int>(gridDim.y * blockDim.y)) {
    const float* x = inp + static_cast<int64_t>(r) * K;
    const int e = grouped_expert_of_row(off, E, r);
    const int64_t at = static_cast<int64_t>(r) * N + n;
    const float gv = hd_round_to_format(sized_chain(x, wg[e] + static_cast<int64_t>(n) * ldw, K, f), act);
    const float uv = hd_round_to_format(sized_chain(x, wu[e] + static_cast<int64_t>(n) * ldw, K, f), act);
    g[at] = gv;
    u[at] = uv;
    a[at] = hd_round_to_format(hd_swiglu_forward(gv, uv), act);
  }
}
// Row r's input-gradient chain at column k: Σ_n dout[r, n]·W_e[n, k] from 0, n ascending.
__device__ float sized_input_chain(const float* dout, const float* weight, const int* off, int E, int N, int K, int r,
                                   int k) {
  const float* dy = dout + static_cast<int64_t>(r) * N;
  const float* we = weight + static_cast<int64_t>(grouped_expert_of_row(off, E, r)) * N * K + k;
  float acc = 0.0f;
  for (int n = 0; n < N; ++n) acc = __fmaf_rn(dy[n], we[static_cast<int64_t>(n) * K], acc);
  return acc;
}
// dinp[r, k] += Σ_n dout[r, n]·W_e[n, k], W_e = weight + e·N·K
__global__ void grouped_backward_input_sized_kernel(float* dinp, const float* dout, const float* weight,
                                                    const int* off, int E, int N, int K) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= K) return;
  const int end = off[E];
  for (int r = off[0] + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); r < end;
       r += static_cast<int>(gridDim.y * blockDim.y)) {
    float* d = dinp + static_cast<int64_t>(r) * K + k;
    *d = __fadd_rn(*d, sized_input_chain(dout, weight, off, E, N, K, r, k));
  }
}
// grouped_backward_input_sized_kernel's da[r, f] (from zeros) as the SwiGLU backward's input, not
// stored: dg, du [rows, F] += hd_swiglu_backward(da, g, u) (swiglu_backward_kernel's steps).
__global__ void grouped_backward_swiglu_sized_kernel(float* dg, float* du, const float* dy, const float* g,
                                                     const float* u, const float* weight, const int* off, int E, int D,
                                                     int F) {
  const int f = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (f >= F) return;
  const int end = off[E];
  for (int r = off[0] + static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y); r < end;
       r += static_cast<int>(gridDim.y * blockDim.y)) {
    const int64_t at = static_cast<int64_t>(r) * F + f;
    float gv = dg[at], uv = du[at];
    hd_swiglu_backward(&gv, &uv, __fadd_rn(0.0f, sized_input_chain(dy, weight, off, E, D, F, r, f)), g[at], u[at]);
    dg[at] = gv;
    du[at] = uv;
  }
}
// dweight[e, n, k] += Σ_{r of e} dout[r, n]·inp[r, k]: one thread per (e, n, k)
__global__ void grouped_backward_weight_sized_kernel(float* dweight, const float* dout, const float* inp,
                                                     const int* off, int E, int N, int K) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t NK = static_cast<int64_t>(N) * K;
  if (i >= static_cast<int64_t>(E) * NK) return;
  const int e = static_cast<int>(i / NK), n = static_cast<int>(i % NK / K), k = static_cast<int>(i % K);
  float acc = 0.0f;
  for (int r = off[e]; r < off[e + 1]; ++r)
    acc = __fmaf_rn(dout[static_cast<int64_t>(r) * N + n], inp[static_cast<int64_t>(r) * K + k], acc);
  if (off[e + 1] > off[e]) dweight[i] = __fadd_rn(dweight[i], acc);
}

void require_resident(const void* p, const char* what) {
  if (p && !is_device_pointer(p))
    throw std::invalid_argument(std::string("cuda grouped GEMM with device offsets: ") + what +
                                " must lie in the backend's memory too");
}
constexpr unsigned kSizedRowBlocks = 128;  // the grid's rows of blocks; each walks rows with a stride

// The experts' weights as the sized kernels read them: each expert's FP32 values or 16-bit codes
// (codes: BF16 / FP16), their row stride, and the array of their pointers on the device, uploaded
// once per packed set (DeviceWeight::group_dev) and again only if one changes.
struct SizedGroup {
  const void* ptrs = nullptr;
  int64_t ldw = 0;
  bool codes = false;
};
SizedGroup sized_group(const PackedWeight* w, int E, const LinearNumerics& nm) {
  SizedGroup sg;
  sg.codes = device_weight(w[0], nm).lowp;
  sg.ldw = w[0].K;
  std::vector<const void*> ptrs(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) {
    const DeviceWeight& d = device_weight(w[e], nm);
    if (d.lowp != sg.codes || (sg.codes && (d.blocked || gemm_code_bytes(d.format) != 2)))
      throw std::invalid_argument("cuda grouped GEMM with device offsets: experts packed differently");
    ptrs[e] = sg.codes ? static_cast<const void*>(d.q.get()) : static_cast<const void*>(d.f32.get());
    if (sg.codes) sg.ldw = d.L.kp;  // the codes' padded rows (one K block: column k at k)
  }
  const DeviceWeight& first = device_weight(w[0], nm);
  if (first.group_host != ptrs) {
    first.group_dev.upload(reinterpret_cast<const uintptr_t*>(ptrs.data()), ptrs.size());
    first.group_host = ptrs;
  }
  sg.ptrs = first.group_dev.get();
  return sg;
}

void grouped_forward_sized(float* out, const float* inp, const PackedWeight* w, const int* offsets, int E,
                           const LinearNumerics& nm) {
  require_resident(out, "out");
  require_resident(inp, "inp");
  const int N = w[0].N, K = w[0].K;
  const SizedGroup sg = sized_group(w, E, nm);
  const bool codes = sg.codes;
  const int64_t ldw = sg.ldw;
  const void* d_ptrs = sg.ptrs;
  const dim3 block(32, 8), grid(static_cast<unsigned>((N + 31) / 32), kSizedRowBlocks);
  if (codes)
    grouped_forward_sized_kernel<uint16_t><<<grid, block>>>(
        out, inp, static_cast<const uint16_t* const*>(d_ptrs), ldw, offsets, E, N, K, nm.format);
  else
    grouped_forward_sized_kernel<float><<<grid, block>>>(
        out, inp, static_cast<const float* const*>(d_ptrs), ldw, offsets, E, N, K, nm.format);
  MOERL_CUDA_LAUNCHED();
}

}  // namespace

// ---- public entry points ------------------------------------------------------------------------------

void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K, const LinearNumerics& nm) {
  if (N < 0 || K < 0) throw std::invalid_argument("cuda linear_pack_weight: negative size");
  check_numerics(nm);
  out->N = N;
  out->K = K;
  out->format = nm.format;
  out->data.clear();
  out->exp_lo = out->exp_hi = -1;
  auto d = std::make_shared<DeviceWeight>();
  d->N = N;
  d->K = K;
  d->Np = gemm_round_up(std::max(N, 1), kGemmAlign);
  d->format = nm.format;
  d->scaling = nm.format == Format::fp32 ? Scaling::none : nm.weight_scaling;
  d->block = nm.scale_block;
  d->blocked = blocked_layout(nm);
  d->g = gemm_groups(N, K, d->scaling, nm.scale_block, nm.scale_block);
  d->L = gemm_k_layout(K, d->blocked ? nm.scale_block : K, kGemmAlign);
  const int64_t n = static_cast<int64_t>(N) * K;
  if (n > 0) {
    Scratch& sc = scratch();
    sc.x.upload(weight, static_cast<size_t>(n));
    if (nm.format == Format::fp32) {
      d->f32.upload(weight, static_cast<size_t>(n));
    } else {
      const float* ws = compute_scales(&d->scales, &sc.amax, sc.x.get(), d->g, nm.format);
      d->lowp = lowp_for(nm, nullptr);
      if (d->lowp) {
        d->q.resize(static_cast<size_t>(d->Np) * d->L.kp * gemm_code_bytes(nm.format));
        quantise_codes(d->q.get(), d->Np, sc.x.get(), ws, d->g, d->L, nm.format);
      } else {
        d->f32.resize(static_cast<size_t>(n));
        fake_quantise(d->f32.get(), sc.x.get(), ws, d->g, nm.format);
      }
    }
    MOERL_CUDA_CHECK(cudaDeviceSynchronize());
  }
  out->device = std::shared_ptr<const void>(std::move(d));
}

void linear_forward(float* out, const float* inp, const PackedWeight& w, int M, const LinearNumerics& nm) {
  const DeviceWeight& d = device_weight(w, nm);
  if (M <= 0 || d.N <= 0) return;
  Scratch& sc = scratch();
  const size_t nx = static_cast<size_t>(M) * d.K, ny = static_cast<size_t>(M) * d.N;
  sc.x.upload(inp, nx);
  sc.out.resize(ny);
  forward_device(sc.out.get(), sc.x.get(), d, M, nm, 0);
  sc.out.download(out, ny);
}

void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w, const int* offsets, int E,
                            const LinearNumerics& nm) {
  if (E <= 0) return;
  const int N = w[0].N, K = w[0].K;
  for (int e = 0; e < E; ++e) {
    device_weight(w[e], nm);
    if (w[e].N != N || w[e].K != K)
      throw std::invalid_argument("cuda linear_forward_grouped: experts' weights differ in shape");
  }
  if (is_device_pointer(offsets)) {  // drawn where the ids are
    if (N > 0 && K > 0 && grouped_sized_on_device(nm, K)) {
      grouped_forward_sized(out, inp, w, offsets, E, nm);
      return;
    }
    std::vector<int> host(static_cast<size_t>(E) + 1);  // the read OpCrossings counts
    download(host.data(), offsets, host.size());
    cuda::linear_forward_grouped(out, inp, w, host.data(), E, nm);
    return;
  }
  check_grouped_offsets(offsets, E, "cuda linear_forward_grouped");
  const int r0 = offsets[0], rows = offsets[E] - offsets[0];
  if (rows <= 0 || N <= 0) return;
  Scratch& sc = scratch();
  const size_t nx = static_cast<size_t>(rows) * K, ny = static_cast<size_t>(rows) * N;
  sc.x.upload(inp + static_cast<int64_t>(r0) * K, nx);
  sc.out.resize(ny);
  // FP32 experts without split-K (effective_split == 1 for their row count) are one grouped GEMM:
  // expert e's problem is gemm_f32's (outᵀ[N × Me] = W_eᵀ-as-stored · X_eᵀ), one group each.
  // Everything else keeps the per-expert forward_device loop (expert e's key.call offset by e):
  // the quantised formats (activation codes and scales computed per expert, per-expert cuBLASLt
  // descriptors, the scale epilogue) and split-K (partials combined in the expert's seeded order)
  // have no grouped cuBLAS form; so does everything when the grouped call is refused. One expert
  // alone is a plain cublasGemmEx (the per-expert bits).
  std::vector<GemmProblem> grouped;
  std::vector<int> looped;
  for (int e = 0; e < E; ++e) {
    const int Me = offsets[e + 1] - offsets[e];
    if (Me == 0) continue;
    const int64_t at = offsets[e] - r0;
    if (nm.format == Format::fp32 && K > 0 && effective_split(nm, Me, K) == 1)
      grouped.push_back({CUBLAS_OP_T, CUBLAS_OP_N, N, Me, K, device_weight(w[e], nm).f32.get(), K,
                         sc.x.get() + at * K, K, sc.out.get() + at * N, N});
    else
      looped.push_back(e);
  }
  if (grouped.size() == 1 || (!grouped.empty() && !gemm_f32_grouped(grouped, 0.0f))) {
    for (const GemmProblem& p : grouped)
      gemm_f32(p.C, N, p.A, K, p.B, K, 0, K, p.n, N);
  }
  for (int e : looped) {
    const int64_t at = offsets[e] - r0;
    forward_device(sc.out.get() + at * N, sc.x.get() + at * K, device_weight(w[e], nm),
                   offsets[e + 1] - offsets[e], nm, static_cast<uint64_t>(e));
  }
  sc.out.download(out + static_cast<int64_t>(r0) * N, ny);
}

void linear_swiglu_grouped(float* a, float* g, float* u, const float* inp, const PackedWeight* w_gate,
                           const PackedWeight* w_up, const int* offsets, int E, int rows,
                           const LinearNumerics& nm_gate, const LinearNumerics& nm_up, Format act) {
  if (E <= 0 || rows <= 0) return;
  const int N = w_gate[0].N, K = w_gate[0].K;
  const bool fused = is_device_pointer(offsets) && N > 0 && K > 0 && w_up[0].N == N && w_up[0].K == K &&
                     nm_gate.format == nm_up.format && grouped_sized_on_device(nm_gate, K) &&
                     grouped_sized_on_device(nm_up, K);
  if (fused) {  // one kernel: the two chains of every output, their roundings and their SwiGLU
    for (const void* p : {static_cast<const void*>(a), static_cast<const void*>(g), static_cast<const void*>(u),
                          static_cast<const void*>(inp)})
      require_resident(p, "an operand");
    const SizedGroup sg = sized_group(w_gate, E, nm_gate), su = sized_group(w_up, E, nm_up);
    if (sg.codes == su.codes && sg.ldw == su.ldw) {
      const dim3 block(32, 8), grid(static_cast<unsigned>((N + 31) / 32), kSizedRowBlocks);
      if (sg.codes)
        grouped_swiglu_sized_kernel<uint16_t><<<grid, block>>>(
            a, g, u, inp, static_cast<const uint16_t* const*>(sg.ptrs), static_cast<const uint16_t* const*>(su.ptrs),
            sg.ldw, offsets, E, N, K, nm_gate.format, act);
      else
        grouped_swiglu_sized_kernel<float><<<grid, block>>>(
            a, g, u, inp, static_cast<const float* const*>(sg.ptrs), static_cast<const float* const*>(su.ptrs),
            sg.ldw, offsets, E, N, K, nm_gate.format, act);
      MOERL_CUDA_LAUNCHED();
      return;
    }
  }
  cuda::linear_forward_grouped(g, inp, w_gate, offsets, E, nm_gate);
  cuda::linear_forward_grouped(u, inp, w_up, offsets, E, nm_up);
  const int64_t n = static_cast<int64_t>(rows) * N;
  cuda::round_format(g, n, act);
  cuda::round_format(u, n, act);
  cuda::swiglu_forward(a, g, u, rows, N);
  cuda::round_format(a, n, act);
}

void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0 || (!dinp && !dweight)) return;
  Scratch& sc = scratch();
  const size_t nx = static_cast<size_t>(M) * K, ny = static_cast<size_t>(M) * N,
               nw = static_cast<size_t>(N) * K;
  sc.b_dout.upload(dout, ny);
  if (dinp) {
    sc.b_w.upload(weight, nw);
    sc.b_dinp.upload(dinp, nx);
    backward_input(sc.b_dinp.get(), sc.b_dout.get(), sc.b_w.get(), M, N, K);
    sc.b_dinp.download(dinp, nx);
  }
  if (dweight) {
    sc.b_inp.upload(inp, nx);
    sc.b_dw.upload(dweight, nw);
    backward_weight(sc.b_dw.get(), sc.b_dout.get(), sc.b_inp.get(), M, N, K);
    sc.b_dw.download(dweight, nw);
  }
}

void linear_backward_swiglu_grouped(float* dg, float* du, float* dw_down, const float* dy, const float* a,
                                    const float* g, const float* u, const float* w_down, const int* offsets, int E,
                                    int rows, int D, int F) {
  if (E <= 0 || rows <= 0 || F <= 0) return;
  if (is_device_pointer(offsets) && D > 0) {  // sized there: the SwiGLU in the down projection's epilogue
    for (const void* p : {static_cast<const void*>(dg), static_cast<const void*>(du), static_cast<const void*>(dy),
                          static_cast<const void*>(g), static_cast<const void*>(u), static_cast<const void*>(w_down)})
      require_resident(p, "an operand");
    if (dw_down) cuda::linear_backward_grouped(nullptr, dw_down, dy, a, w_down, offsets, E, D, F);
    const dim3 block(32, 8), grid(static_cast<unsigned>((F + 31) / 32), kSizedRowBlocks);
    grouped_backward_swiglu_sized_kernel<<<grid, block>>>(dg, du, dy, g, u, w_down, offsets, E, D, F);
    MOERL_CUDA_LAUNCHED();
    return;
  }
  Scratch& sc = scratch();  // da where the calls put it
  const size_t n = static_cast<size_t>(rows) * F;
  sc.b_da.zero(n);
  cuda::linear_backward_grouped(sc.b_da.get(), dw_down, dy, a, w_down, offsets, E, D, F);
  cuda::swiglu_backward(dg, du, sc.b_da.get(), g, u, rows, F);
}

void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const int* offsets, int E, int N, int K) {
  if (E <= 0 || N <= 0 || K <= 0 || (!dinp && !dweight)) return;
  if (is_device_pointer(offsets)) {  // drawn where the ids are: sized there (FP32)
    require_resident(dout, "dout");
    if (dinp) {
      require_resident(dinp, "dinp");
      require_resident(weight, "weight");
      const dim3 block(32, 8), grid(static_cast<unsigned>((K + 31) / 32), kSizedRowBlocks);
      grouped_backward_input_sized_kernel<<<grid, block>>>(dinp, dout, weight, offsets, E, N, K);
      MOERL_CUDA_LAUNCHED();
    }
    if (dweight) {
      require_resident(dweight, "dweight");
      require_resident(inp, "inp");
      const int64_t n = static_cast<int64_t>(E) * N * K;
      grouped_backward_weight_sized_kernel<<<grid_for(n, kThreads), kThreads>>>(dweight, dout, inp, offsets, E, N, K);
      MOERL_CUDA_LAUNCHED();
    }
    return;
  }
  check_grouped_offsets(offsets, E, "cuda linear_backward_grouped");
  const int r0 = offsets[0], rows = offsets[E] - offsets[0];
  if (rows <= 0) return;
  Scratch& sc = scratch();
  const size_t nx = static_cast<size_t>(rows) * K, ny = static_cast<size_t>(rows) * N,
               nw = static_cast<size_t>(E) * N * K;
  const int64_t NK = static_cast<int64_t>(N) * K;
  sc.b_dout.upload(dout + static_cast<int64_t>(r0) * N, ny);
  // Each gradient is one grouped GEMM over the experts with rows (one group each, beta = 1; an
  // expert without rows has no problem, so its dweight slice is untouched), with the per-expert
  // backward_input / backward_weight loop where the grouped call is refused or only one expert
  // has rows (then the plain cublasGemmEx, the per-expert bits).
  auto run = [N, K](const std::vector<GemmProblem>& ps,
                    void (*one)(float*, const float*, const float*, int, int, int), bool input) {
    if (ps.size() > 1 && gemm_f32_grouped(ps, 1.0f)) return;
    for (const GemmProblem& p : ps)  // p.B is the expert's dY; its rows are p.n (dinp) or p.k (dweight)
      one(p.C, p.B, p.A, input ? p.n : p.k, N, K);
  };
  std::vector<GemmProblem> ps;
  if (dinp) {
    sc.b_w.upload(weight, nw);
    sc.b_dinp.upload(dinp + static_cast<int64_t>(r0) * K, nx);
    // dX_e += dY_e · W_e: backward_input's problem (dX_eᵀ[K × Me] += W_e-as-stored · dY_eᵀ).
    for (int e = 0; e < E; ++e) {
      const int Me = offsets[e + 1] - offsets[e];
      if (Me == 0) continue;
      const int64_t at = offsets[e] - r0;
      ps.push_back({CUBLAS_OP_N, CUBLAS_OP_N, K, Me, N, sc.b_w.get() + e * NK, K, sc.b_dout.get() + at * N, N,
                    sc.b_dinp.get() + at * K, K});
    }
    run(ps, backward_input, true);
    sc.b_dinp.download(dinp + static_cast<int64_t>(r0) * K, nx);
  }
  if (dweight) {
    sc.b_inp.upload(inp + static_cast<int64_t>(r0) * K, nx);
    sc.b_dw.upload(dweight, nw);
    // dW_e += dY_eᵀ · X_e: backward_weight's problem (dW_eᵀ[K × N] += X_eᵀ · dY_e).
    ps.clear();
    for (int e = 0; e < E; ++e) {
      const int Me = offsets[e + 1] - offsets[e];
      if (Me == 0) continue;
      const int64_t at = offsets[e] - r0;
      ps.push_back({CUBLAS_OP_N, CUBLAS_OP_T, K, N, Me, sc.b_inp.get() + at * K, K, sc.b_dout.get() + at * N, N,
                    sc.b_dw.get() + e * NK, K});
    }
    run(ps, backward_weight, false);
    sc.b_dw.download(dweight, nw);
  }
}

std::string gemm_describe() {
  if (device_count() == 0) return "no CUDA device: " + device_description();
  std::string s = "cuBLAS/cuBLASLt " + std::to_string(cublasLtGetVersion()) + " on " + device_description() +
                  ": fp32 pedantic SGEMM (no TF32); bf16/fp16 tensor-core GemmEx, FP32 accumulation";
  for (Format f : {Format::fp8_e4m3, Format::fp8_e5m2}) {
    std::string why;
    s += "; ";
    s += format_name(f);
    if (fp8_available(f, &why))
      s += ": cuBLASLt FP8 (fast accumulation off)";
    else
      s += ": FALLBACK to on-device quantise-dequantise + FP32 GEMM (" + why + ")";
  }
  switch (static_cast<GroupedMode>(g_grouped_mode.load(std::memory_order_relaxed))) {
    case GroupedMode::untried: break;  // no grouped call yet: nothing to say
    case GroupedMode::pedantic: s += "; fp32 experts: one cublasGemmGroupedBatchedEx (32F pedantic)"; break;
    case GroupedMode::f32: s += "; fp32 experts: one cublasGemmGroupedBatchedEx (32F, no TF32)"; break;
    case GroupedMode::loop: {
      std::lock_guard<std::mutex> lock(g_reason_mu);
      s += "; fp32 experts: per-expert cublasGemmEx loop (" + g_grouped_reason + ")";
      break;
    }
  }
  for (int i = 0; i < kFormatCount; ++i) {
    const long long n = g_fallback_calls[i].load(std::memory_order_relaxed);
    if (n == 0) continue;
    std::lock_guard<std::mutex> lock(g_reason_mu);
    s += "; " + std::to_string(n) + " " + format_name(static_cast<Format>(i)) + " calls fell back (" +
         g_fallback_reason[i] + ")";
  }
  return s;
}

double gemm_measure_tflops(int n, Format format, double min_seconds) {
  if (n <= 0 || device_count() == 0) return 0.0;
  const int64_t nn = static_cast<int64_t>(n) * n;
  // c holds n rows of ld Np: the low-precision GEMM writes the weight's padded rows too.
  DeviceBuffer<float> a(static_cast<size_t>(nn)), b(static_cast<size_t>(nn)),
      c(static_cast<size_t>(n) * gemm_round_up(n, kGemmAlign));
  fill_kernel<<<grid_of(nn), kThreads>>>(a.get(), nn, 1);
  fill_kernel<<<grid_of(nn), kThreads>>>(b.get(), nn, 1ull << 40);
  MOERL_CUDA_LAUNCHED();
  // The path linear_forward takes for this format, on device-resident operands.
  DeviceWeight w;
  w.N = w.K = n;
  w.Np = gemm_round_up(n, kGemmAlign);
  w.format = format;
  w.L = gemm_k_layout(n, n, kGemmAlign);
  DeviceBuffer<unsigned char> xq;
  const bool lowp = format != Format::fp32 && lowp_available(format, nullptr);
  if (lowp) {
    const GemmGroups none = gemm_groups(n, n, Scaling::none, 1, 1);
    const int bytes = gemm_code_bytes(format);
    w.q.resize(static_cast<size_t>(w.Np) * w.L.kp * bytes);
    xq.resize(static_cast<size_t>(n) * w.L.kp * bytes);
    quantise_codes(w.q.get(), w.Np, b.get(), nullptr, none, w.L, format);
    quantise_codes(xq.get(), n, a.get(), nullptr, none, w.L, format);
  }
  auto run = [&] {
    if (lowp) {
      if (!gemm_lowp(c.get(), w, xq.get(), n, 0, w.L.kp, nullptr, nullptr, nullptr))
        throw std::runtime_error("gemm_measure_tflops: no cuBLASLt kernel for the problem");
    } else {
      gemm_f32(c.get(), n, b.get(), n, a.get(), n, 0, n, n, n);
    }
  };
  run();  // warm-up: handles, heuristics, clocks
  MOERL_CUDA_CHECK(cudaDeviceSynchronize());
  // cuBLAS and cuBLASLt run on the per-thread default stream (handles(), lt's calls), so events
  // recorded on it bracket exactly the GEMMs between them.
  cudaEvent_t e0, e1;
  MOERL_CUDA_CHECK(cudaEventCreate(&e0));
  MOERL_CUDA_CHECK(cudaEventCreate(&e1));
  auto batch_seconds = [&](int reps) {
    MOERL_CUDA_CHECK(cudaEventRecord(e0, cudaStreamPerThread));
    for (int r = 0; r < reps; ++r) run();
    MOERL_CUDA_CHECK(cudaEventRecord(e1, cudaStreamPerThread));
    MOERL_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0.0f;
    MOERL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return static_cast<double>(ms) * 1e-3;
  };
  // Calls per batch: enough for ≥ 2 ms between the events (at most 4096).
  const double one = batch_seconds(1);
  const int reps = static_cast<int>(std::clamp(2e-3 / std::max(one, 1e-7), 1.0, 4096.0));
  double best = one > 0.0 ? one : 1e300;
  const auto start = std::chrono::steady_clock::now();
  do {
    const double s = batch_seconds(reps);
    if (s > 0.0) best = std::min(best, s / reps);
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < min_seconds);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best < 1e300 ? 2.0 * static_cast<double>(n) * n * n / best * 1e-12 : 0.0;
}

double device_fp32_peak_tflops() {
  if (device_count() == 0) return 0.0;
  int dev = 0, major = 0, minor = 0, sms = 0, clock_khz = 0;
  MOERL_CUDA_CHECK(cudaGetDevice(&dev));
  MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MOERL_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  return fp32_peak_tflops(major, minor, sms, clock_khz);
}

}  // namespace moerl::cuda
