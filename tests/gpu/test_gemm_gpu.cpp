// test_gemm_gpu.cpp — the CUDA linear layer (kernels/cuda/gemm.cu) against the CPU's linear layer
// under the same LinearNumerics. Skipped where no CUDA device is present.
//
// Both sides multiply the same quantised operands (the scales and codes are bit-identical: see
// tests/cuda_host/test_gemm_hd.cpp); they differ only in how the K products are summed. A sum of
// K terms whose every addition rounds with relative error ≤ u is off by at most (K−1)·u·Σ|a'||w'|
// (first order; a', w' the quantised operands), so each output is checked against
//   tol = (K + S + 2) · u · Σ_k |a'_k||w'_k|   (S split-K chunk adds, 2 scale multiplies)
// with u the unit roundoff of the accumulator that really runs:
//   fp32 pedantic SGEMM:        u = 2^-24 (IEEE FP32, no TF32);
//   bf16/fp16 tensor cores:     u = 2^-22 (FP32 accumulation; the MMA's internal adds are not
//                               IEEE round-to-nearest, allow two bits);
//   FP8 tensor cores (Hopper):  u = 2^-12 (the accumulator keeps ~14 bits, DeepSeek-V3 §3.3.2,
//                               between cuBLASLt's promotions to FP32; allow one more bit).
// A wrong index, scale or padding errs by O(Σ|a'||w'|) and fails every one of these.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/rng.h"

#if MOERL_HAVE_NCCL
#include "sim/comm/nccl_collectives.h"
#endif

namespace moerl {
namespace {

// Seeded normal inputs and bitwise equality: the kernel suites' helpers (test_ops_util.h).
std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  return test_ops::normals(n, seed, 0, 0, scale);
}
bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && test_ops::bit_diffs(a, b) == 0;
}

double unit_roundoff(Format f) {
  switch (f) {
    case Format::fp32: return std::ldexp(1.0, -24);
    case Format::bf16:
    case Format::fp16: return std::ldexp(1.0, -22);
    case Format::fp8_e4m3:
    case Format::fp8_e5m2: return std::ldexp(1.0, -12);
  }
  return 1.0;
}

struct Case {
  int M, N, K;
  LinearNumerics nm;
};

std::string label(const Case& c) {
  return std::string(format_name(c.nm.format)) + " act " + scaling_name(c.nm.act_scaling) + " w " +
         scaling_name(c.nm.weight_scaling) + " B " + std::to_string(c.nm.scale_block) + " order " +
         reduce_order_name(c.nm.reduce.order) + (c.nm.reduce.atomics ? " atomics" : "") + " M " +
         std::to_string(c.M) + " N " + std::to_string(c.N) + " K " + std::to_string(c.K);
}

// Σ_k |a'_mk||w'_nk| over the quantised operands (the CPU's quantisation).
std::vector<double> abs_products(const std::vector<float>& x, const std::vector<float>& w, const Case& c) {
  std::vector<float> xq(x.size()), wq(w.size());
  const LinearNumerics& nm = c.nm;
  quantize_matrix(xq.data(), nullptr, x.data(), c.M, c.K, nm.format,
                  nm.format == Format::fp32 ? Scaling::none : nm.act_scaling, 1, nm.scale_block);
  quantize_matrix(wq.data(), nullptr, w.data(), c.N, c.K, nm.format,
                  nm.format == Format::fp32 ? Scaling::none : nm.weight_scaling, nm.scale_block, nm.scale_block);
  std::vector<double> s(static_cast<size_t>(c.M) * c.N, 0.0);
  for (int m = 0; m < c.M; ++m)
    for (int n = 0; n < c.N; ++n) {
      double acc = 0.0;
      for (int k = 0; k < c.K; ++k)
        acc += std::fabs(static_cast<double>(xq[static_cast<size_t>(m) * c.K + k]) * wq[static_cast<size_t>(n) * c.K + k]);
      s[static_cast<size_t>(m) * c.N + n] = acc;
    }
  return s;
}

std::vector<float> cpu_forward(const std::vector<float>& x, const std::vector<float>& w, const Case& c) {
  PackedWeight pw;
  linear_pack_weight(&pw, w.data(), c.N, c.K, c.nm);
  std::vector<float> y(static_cast<size_t>(c.M) * c.N, NAN);
  linear_forward(y.data(), x.data(), pw, c.M, c.nm);
  return y;
}

std::vector<float> gpu_forward(const std::vector<float>& x, const std::vector<float>& w, const Case& c) {
  PackedWeight pw;
  cuda::linear_pack_weight(&pw, w.data(), c.N, c.K, c.nm);
  std::vector<float> y(static_cast<size_t>(c.M) * c.N, NAN);
  cuda::linear_forward(y.data(), x.data(), pw, c.M, c.nm);
  return y;
}

// Every output within tol = (K + S + 2)·u·Σ|a'||w'| (+ a few FP32 subnormal quanta).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& absprod,
                  const Case& c, int split, Format acc_format) {
  const double u = unit_roundoff(acc_format);
  int bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = (c.K + split + 2) * u * absprod[i] + 1e-40;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol)) {
      if (++bad <= 3)
        ADD_FAILURE() << label(c) << ": out[" << i << "] gpu " << got[i] << " cpu " << want[i] << " err " << err
                      << " tol " << tol;
    }
    if (absprod[i] > 0) worst = std::max(worst, err / (absprod[i] * u));
  }
  EXPECT_EQ(bad, 0) << label(c) << " (worst error " << worst << " u·Σ|a'||w'|)";
}

LinearNumerics numerics(Format f, Scaling act, Scaling weight, int block = 128) {
  LinearNumerics nm;
  nm.format = f;
  nm.act_scaling = act;
  nm.weight_scaling = weight;
  nm.scale_block = block;
  nm.reduce.key.seed = 99;
  nm.reduce.key.layer = 1;
  nm.reduce.key.site = 2;
  return nm;
}

void check_against_cpu(Case c, uint64_t seed) {
  const auto x = randn(static_cast<size_t>(c.M) * c.K, seed, 2.0f);
  const auto w = randn(static_cast<size_t>(c.N) * c.K, seed + 1, 0.1f);
  const auto want = cpu_forward(x, w, c);
  const auto got = gpu_forward(x, w, c);
  const int split = reduce_effective_split(c.nm.reduce, c.M, c.K);
  expect_close(got, want, abs_products(x, w, c), c, split, c.nm.format);
}

// fp32: the pedantic SGEMM is within (K+3)·2^-24·Σ|a||w| of the CPU's FMA chain.
TEST(GemmGpu, Fp32PedanticCloseToCpu) {
  MOERL_REQUIRE_GPU();
  for (int K : {5, 64, 300}) check_against_cpu({37, 70, K, numerics(Format::fp32, Scaling::none, Scaling::none)}, 1);
}

// Every low-precision format and scaling (shapes not multiples of 16 nor of the block: padding,
// partial blocks) against the CPU's emulation of the same numerics.
TEST(GemmGpu, QuantisedFormatsMatchCpuEmulation) {
  MOERL_REQUIRE_GPU();
  const Format formats[] = {Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2};
  struct Sc {
    Scaling act, w;
  };
  const Sc scalings[] = {{Scaling::none, Scaling::none},  {Scaling::tensor, Scaling::tensor},
                         {Scaling::row, Scaling::row},    {Scaling::block, Scaling::block},
                         {Scaling::row, Scaling::tensor}, {Scaling::tensor, Scaling::block}};
  for (Format f : formats)
    for (const Sc& s : scalings) {
      check_against_cpu({37, 70, 300, numerics(f, s.act, s.w, 128)}, 2);
      check_against_cpu({3, 20, 40, numerics(f, s.act, s.w, 16)}, 3);
    }
}

// split_k and batch-variant splits: same tolerance plus the chunk adds.
TEST(GemmGpu, SplitKMatchesCpu) {
  MOERL_REQUIRE_GPU();
  for (Format f : {Format::fp32, Format::bf16, Format::fp8_e4m3})
    for (Scaling s : {Scaling::row, Scaling::block}) {
      Case c{20, 48, 512, numerics(f, f == Format::fp32 ? Scaling::none : s, f == Format::fp32 ? Scaling::none : s)};
      c.nm.reduce.order = ReduceOrder{OrderKind::split_k, 4};
      check_against_cpu(c, 4);
      c.nm.reduce.batch_invariant = false;  // ×4 for M < 64: 16 chunks (clamped to the K-blocks)
      check_against_cpu(c, 5);
    }
}

// Deterministic split-K: the same bits on every run; atomics: within tolerance of it.
TEST(GemmGpu, DeterministicSplitKBitIdenticalAndAtomicsClose) {
  MOERL_REQUIRE_GPU();
  for (Format f : {Format::fp32, Format::fp8_e4m3}) {
    Case c{64, 96, 1024, numerics(f, f == Format::fp32 ? Scaling::none : Scaling::row,
                                  f == Format::fp32 ? Scaling::none : Scaling::row)};
    c.nm.reduce.order = ReduceOrder{OrderKind::split_k, 8};
    const auto x = randn(static_cast<size_t>(c.M) * c.K, 6, 1.0f);
    const auto w = randn(static_cast<size_t>(c.N) * c.K, 7, 1.0f);
    const auto first = gpu_forward(x, w, c);
    for (int run = 0; run < 3; ++run) EXPECT_TRUE(bits_equal(gpu_forward(x, w, c), first)) << label(c) << " run " << run;
    Case a = c;
    a.nm.reduce.atomics = true;
    const auto atomic = gpu_forward(x, w, a);
    // Same partials, another order of the 8 chunk adds: 8·2^-24 relative to Σ|partials| ≤ Σ|a'||w'|.
    const auto absprod = abs_products(x, w, c);
    int bad = 0;
    for (size_t i = 0; i < atomic.size(); ++i)
      bad += !(std::fabs(static_cast<double>(atomic[i]) - first[i]) <= 8 * std::ldexp(1.0, -24) * absprod[i] + 1e-40);
    EXPECT_EQ(bad, 0) << label(a);
  }
}

// Rows [a, b) of a row-major [rows][cols] matrix.
std::vector<float> rows_of(const std::vector<float>& m, int a, int b, int cols) {
  return std::vector<float>(m.begin() + static_cast<std::ptrdiff_t>(a) * cols,
                            m.begin() + static_cast<std::ptrdiff_t>(b) * cols);
}

// Whether expert rows Me run in the grouped cuBLAS GEMM (gemm.cu: fp32 without split-K); the
// other experts loop over the per-expert forward.
bool grouped_gemm_expert(const LinearNumerics& nm, int Me, int K) {
  return nm.format == Format::fp32 && reduce_effective_split(nm.reduce, Me, K) == 1;
}

// E experts' weights [N, K] (seeds seed0 + e, scale 0.2), packed for the device and for the CPU.
struct Experts {
  std::vector<std::vector<float>> w;
  std::vector<PackedWeight> dev, cpu;
  Experts(int E, int N, int K, uint64_t seed0, const LinearNumerics& nm) : w(E), dev(E), cpu(E) {
    for (int e = 0; e < E; ++e) {
      w[e] = randn(static_cast<size_t>(N) * K, seed0 + e, 0.2f);
      cuda::linear_pack_weight(&dev[e], w[e].data(), N, K, nm);
      linear_pack_weight(&cpu[e], w[e].data(), N, K, nm);
    }
  }
};

// The grouped form against the per-expert calls (expert e with key.call offset by e); empty experts
// are skipped. Quantised formats and split-K loop over the experts in gemm.cu: the per-expert calls
// bit for bit. FP32 experts without split-K are ONE cublasGemmGroupedBatchedEx — another kernel
// than the per-expert cublasGemmEx, so the same K FP32 products (no TF32) summed in another order
// and blocking: not bit-identical any more, and checked against the per-expert calls with the
// file's bound between two FP32 summation orders of the same products, (K + 3)·2^-24·Σ|x||w|
// (S = 1), and against the CPU's linear layer with the same bound.
TEST(GemmGpu, GroupedEqualsPerExpertCalls) {
  MOERL_REQUIRE_GPU();
  const int E = 4, N = 40, K = 160;
  struct Variant {
    Format f;
    OrderKind order;
    bool batch_invariant;
    std::vector<int> offsets;
  };
  // split_k:3: every expert loops (bits); fixed order: every expert grouped; fixed order,
  // batch-variant: the two 512-row experts (S = 1) grouped, the 13-row one (S = 4) looped, in one call.
  const Variant variants[] = {{Format::fp32, OrderKind::split_k, true, {0, 13, 13, 40, 45}},
                              {Format::bf16, OrderKind::split_k, true, {0, 13, 13, 40, 45}},
                              {Format::fp8_e4m3, OrderKind::split_k, true, {0, 13, 13, 40, 45}},
                              {Format::fp32, OrderKind::fixed, true, {0, 13, 13, 40, 45}},
                              {Format::fp32, OrderKind::fixed, false, {0, 13, 13, 525, 1037}}};
  for (const Variant& v : variants) {
    LinearNumerics nm = numerics(v.f, v.f == Format::fp32 ? Scaling::none : Scaling::tensor,
                                 v.f == Format::fp32 ? Scaling::none : Scaling::block, 32);
    nm.reduce.order = v.order == OrderKind::split_k ? ReduceOrder{OrderKind::split_k, 3} : ReduceOrder{};
    nm.reduce.batch_invariant = v.batch_invariant;
    const std::vector<int>& offsets = v.offsets;
    const std::string what = std::string(format_name(v.f)) + (v.order == OrderKind::split_k ? " split_k:3" : " fixed") +
                             (v.batch_invariant ? "" : " batch-variant");
    const Experts ex(E, N, K, 20, nm);
    const std::vector<std::vector<float>>& ws = ex.w;
    const std::vector<PackedWeight>& pw = ex.dev;
    const std::vector<PackedWeight>& pw_cpu = ex.cpu;
    const auto x = randn(static_cast<size_t>(offsets[E]) * K, 8);
    std::vector<float> grouped(static_cast<size_t>(offsets[E]) * N, NAN);
    cuda::linear_forward_grouped(grouped.data(), x.data(), pw.data(), offsets.data(), E, nm);
    std::vector<float> cpu(grouped.size(), NAN);
    linear_forward_grouped(cpu.data(), x.data(), pw_cpu.data(), offsets.data(), E, nm);
    std::vector<float> single(grouped.size(), NAN);
    for (int e = 0; e < E; ++e) {
      const int Me = offsets[e + 1] - offsets[e];
      if (Me == 0) continue;
      LinearNumerics ne = nm;
      ne.reduce.key.call += static_cast<uint64_t>(e);
      cuda::linear_forward(single.data() + static_cast<size_t>(offsets[e]) * N,
                           x.data() + static_cast<size_t>(offsets[e]) * K, pw[e], Me, ne);
    }
    for (int e = 0; e < E; ++e) {
      const int a = offsets[e], b = offsets[e + 1];
      if (a == b) continue;
      const Case c{b - a, N, K, nm};
      const auto g = rows_of(grouped, a, b, N), one = rows_of(single, a, b, N);
      if (grouped_gemm_expert(nm, c.M, K)) {
        const auto absprod = abs_products(rows_of(x, a, b, K), ws[e], c);
        expect_close(g, one, absprod, c, 1, Format::fp32);
        expect_close(g, rows_of(cpu, a, b, N), absprod, c, 1, Format::fp32);
      } else {
        EXPECT_TRUE(bits_equal(g, one)) << what << " expert " << e;
      }
    }
  }
}

// Uneven experts with empty ones among them (offsets {0,0,5,5,17,18}, and the same shifted by 3
// rows: rows outside the call untouched), forward in fp32 (the grouped GEMM) and bf16 (the
// per-expert loop), against the CPU's linear layer with the file's tolerance per expert.
TEST(GemmGpu, GroupedUnevenAndEmptyExpertsForwardMatchesCpu) {
  MOERL_REQUIRE_GPU();
  const int E = 5, N = 24, K = 72;
  for (int shift : {0, 3}) {
    std::vector<int> offsets = {0, 0, 5, 5, 17, 18};
    for (int& o : offsets) o += shift;
    const int rows = offsets[E] + 2;  // 2 rows past the call, untouched too
    for (Format f : {Format::fp32, Format::bf16}) {
      const LinearNumerics nm = numerics(f, Scaling::none, Scaling::none);
      const Experts ex(E, N, K, 60, nm);
      const std::vector<std::vector<float>>& ws = ex.w;
      const std::vector<PackedWeight>& pw = ex.dev;
    const std::vector<PackedWeight>& pw_cpu = ex.cpu;
      const auto x = randn(static_cast<size_t>(rows) * K, 65, 2.0f);
      std::vector<float> got(static_cast<size_t>(rows) * N, NAN), want(got.size(), NAN);
      cuda::linear_forward_grouped(got.data(), x.data(), pw.data(), offsets.data(), E, nm);
      linear_forward_grouped(want.data(), x.data(), pw_cpu.data(), offsets.data(), E, nm);
      for (int e = 0; e < E; ++e) {
        const int a = offsets[e], b = offsets[e + 1];
        if (a == b) continue;
        const Case c{b - a, N, K, nm};
        expect_close(rows_of(got, a, b, N), rows_of(want, a, b, N), abs_products(rows_of(x, a, b, K), ws[e], c), c,
                     reduce_effective_split(nm.reduce, c.M, K), f);
      }
      int touched = 0;
      for (int r = 0; r < rows; ++r)
        if (r < offsets[0] || r >= offsets[E])
          for (int n = 0; n < N; ++n) touched += !std::isnan(got[static_cast<size_t>(r) * N + n]);
      EXPECT_EQ(touched, 0) << format_name(f) << " shift " << shift << ": rows outside the call written";
    }
  }
}

// Device copies of host arrays for a test, freed at its end; down() reads one back.
struct OnDevice {
  const Backend& be;
  std::vector<void*> blocks;
  explicit OnDevice(const Backend& b) : be(b) {}
  ~OnDevice() {
    for (void* p : blocks) be.mem_free(p);
  }
  template <class T>
  T* up(const std::vector<T>& src) {
    void* p = be.mem_alloc(src.size() * sizeof(T));
    blocks.push_back(p);
    be.mem_copy(p, src.data(), src.size() * sizeof(T), CopyDir::to_device, CrossKind::indices);
    return static_cast<T*>(p);
  }
  std::vector<float> down(const float* src, size_t n) const {
    std::vector<float> h(n);
    be.mem_copy(h.data(), src, n * sizeof(float), CopyDir::to_host, CrossKind::indices);
    return h;
  }
};

// The experts' gate and up projections with their SwiGLU as one kernel (linear_swiglu_grouped,
// sized on the device): the bits of the same five calls on the GPU (the two grouped projections,
// the roundings and the SwiGLU), in FP32, BF16 and FP16 with BF16 activations; the CPU's op is those
// five calls on the CPU (how many of its bits the GPU gives is printed).
TEST(GemmGpu, SwigluGroupedFusedIsTheFiveCallsBits) {
  MOERL_REQUIRE_GPU();
  OnDevice dev(cuda::cuda_backend());
  const int E = 5, F = 24, D = 40;
  const std::vector<int> offsets = {0, 0, 5, 5, 17, 18};
  const int M = offsets[E];
  const int* d_off = dev.up(offsets);
  const size_t n = static_cast<size_t>(M) * F;
  const std::vector<float> zeros(n, 0.0f);
  for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
    const LinearNumerics nm = numerics(f, Scaling::none, Scaling::none);
    const Format act = f == Format::fp32 ? Format::fp32 : Format::bf16;
    const Experts wg(E, F, D, 90, nm), wu(E, F, D, 95, nm);
    const auto x = randn(static_cast<size_t>(M) * D, 91, 2.0f);
    const float* d_x = dev.up(x);
    float* buf[6];
    for (float*& b : buf) b = dev.up(zeros);
    cuda::linear_swiglu_grouped(buf[0], buf[1], buf[2], d_x, wg.dev.data(), wu.dev.data(), d_off, E, M, nm, nm, act);
    cuda::linear_forward_grouped(buf[4], d_x, wg.dev.data(), d_off, E, nm);
    cuda::linear_forward_grouped(buf[5], d_x, wu.dev.data(), d_off, E, nm);
    cuda::round_format(buf[4], static_cast<int64_t>(n), act);
    cuda::round_format(buf[5], static_cast<int64_t>(n), act);
    cuda::swiglu_forward(buf[3], buf[4], buf[5], M, F);
    cuda::round_format(buf[3], static_cast<int64_t>(n), act);
    for (int k = 0; k < 3; ++k) {
      const auto fused = dev.down(buf[k], n), calls = dev.down(buf[k + 3], n);
      EXPECT_EQ(std::memcmp(fused.data(), calls.data(), n * sizeof(float)), 0) << format_name(f) << " output " << k;
    }
    std::vector<float> a(n), g(n), u(n);
    linear_swiglu_grouped(a.data(), g.data(), u.data(), x.data(), wg.cpu.data(), wu.cpu.data(), offsets.data(), E, M,
                          nm, nm, act);
    const auto got = dev.down(buf[0], n);
    int same = 0;
    for (size_t i = 0; i < n; ++i) same += std::memcmp(&got[i], &a[i], sizeof(float)) == 0;
    std::printf("%s fused SwiGLU experts: %d of %zu outputs the CPU's bits\n", format_name(f), same, n);
  }
}

// Its backward (linear_backward_swiglu_grouped, offsets on the device): the SwiGLU in the down
// projection's epilogue gives the bits of the two calls on the GPU (the grouped backward into a
// zeroed da, then swiglu_backward), '+=' into nonzero dg, du and dw_down.
TEST(GemmGpu, BackwardSwigluGroupedFusedIsTheCallsBits) {
  MOERL_REQUIRE_GPU();
  OnDevice dev(cuda::cuda_backend());
  const int E = 5, F = 24, D = 40;
  const std::vector<int> offsets = {0, 0, 5, 5, 17, 18};
  const int M = offsets[E];
  const size_t n = static_cast<size_t>(M) * F, nw = static_cast<size_t>(E) * D * F;
  const int* d_off = dev.up(offsets);
  const auto dy = randn(static_cast<size_t>(M) * D, 100), a = randn(n, 101), g = randn(n, 102), u = randn(n, 103);
  const auto w = randn(nw, 104, 0.2f), dw0 = randn(nw, 105), dg0 = randn(n, 106), du0 = randn(n, 107);
  float *d_dy = dev.up(dy), *d_a = dev.up(a), *d_g = dev.up(g), *d_u = dev.up(u), *d_w = dev.up(w);
  float *f_dg = dev.up(dg0), *f_du = dev.up(du0), *f_dw = dev.up(dw0);  // fused
  float *c_dg = dev.up(dg0), *c_du = dev.up(du0), *c_dw = dev.up(dw0), *c_da = dev.up(std::vector<float>(n, 0.0f));
  cuda::linear_backward_swiglu_grouped(f_dg, f_du, f_dw, d_dy, d_a, d_g, d_u, d_w, d_off, E, M, D, F);
  cuda::linear_backward_grouped(c_da, c_dw, d_dy, d_a, d_w, d_off, E, D, F);  // the calls
  cuda::swiglu_backward(c_dg, c_du, c_da, d_g, d_u, M, F);
  for (const auto& [f, c, k, what] : {std::tuple{f_dg, c_dg, n, "dg"}, std::tuple{f_du, c_du, n, "du"},
                                      std::tuple{f_dw, c_dw, nw, "dw_down"}}) {
    const auto x = dev.down(f, k), y = dev.down(c, k);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), k * sizeof(float)), 0) << what;
  }
}

// Offsets where the ids are (resident routing, docs/gpu.md): the FP32 grouped products are sized on
// the device (grouped_*_sized_kernel), forward, dinp and dweight, against the CPU with the same
// offsets on the host, uneven and empty experts; so are the forwards of unscaled BF16 and FP16
// (bf16-train's experts: each activation rounded as the CPU rounds it, each weight its code's
// value), while a scaled format reads its offsets first and runs its per-expert calls. Each output
// is an FMA chain in the CPU's order, so the forward's and dinp's bits are expected to be the CPU's:
// the count of equal elements is printed, the check is the format's summation bound.
TEST(GemmGpu, GroupedWithDeviceOffsetsMatchesCpu) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  const int E = 5, N = 24, K = 40;
  const std::vector<int> offsets = {0, 0, 5, 5, 17, 18};
  const int M = offsets[E];
  const double u = std::ldexp(1.0, -24);
  std::vector<void*> blocks;
  const auto up = [&](const void* src, size_t bytes) {
    void* p = be.mem_alloc(bytes);
    blocks.push_back(p);
    be.mem_copy(p, src, bytes, CopyDir::to_device, CrossKind::indices);
    return p;
  };
  const auto down = [&](std::vector<float>* dst, const void* src) {
    be.mem_copy(dst->data(), src, dst->size() * sizeof(float), CopyDir::to_host, CrossKind::indices);
  };
  const int* d_off = static_cast<const int*>(up(offsets.data(), offsets.size() * sizeof(int)));
  EXPECT_FALSE(grouped_sized_on_device(numerics(Format::bf16, Scaling::row, Scaling::row), K));
  EXPECT_FALSE(grouped_sized_on_device(numerics(Format::fp8_e4m3, Scaling::block, Scaling::block), K));
  for (Format f : {Format::fp32, Format::bf16, Format::fp16}) {
    const LinearNumerics nm = numerics(f, Scaling::none, Scaling::none);
    EXPECT_TRUE(grouped_sized_on_device(nm, K)) << format_name(f);
    const Experts ex(E, N, K, 80, nm);
    const auto x = randn(static_cast<size_t>(M) * K, 81, 2.0f);
    std::vector<float> want(static_cast<size_t>(M) * N), got(want.size());
    linear_forward_grouped(want.data(), x.data(), ex.cpu.data(), offsets.data(), E, nm);
    const float* d_x = static_cast<const float*>(up(x.data(), x.size() * sizeof(float)));
    float* d_y = static_cast<float*>(up(got.data(), got.size() * sizeof(float)));
    cuda::linear_forward_grouped(d_y, d_x, ex.dev.data(), d_off, E, nm);
    down(&got, d_y);
    int same = 0;
    for (size_t i = 0; i < got.size(); ++i) same += std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    std::printf("%s forward with device offsets: %d of %zu elements the CPU's bits\n", format_name(f), same, got.size());
    for (int e = 0; e < E; ++e) {
      const int a = offsets[e], b = offsets[e + 1];
      if (a == b) continue;
      const Case c{b - a, N, K, nm};
      expect_close(rows_of(got, a, b, N), rows_of(want, a, b, N), abs_products(rows_of(x, a, b, K), ex.w[e], c), c,
                   reduce_effective_split(nm.reduce, c.M, K), f);
    }
  }
  // backward (FP32): '+=' into nonzero gradients
  const auto dout = randn(static_cast<size_t>(M) * N, 82);
  const auto inp = randn(static_cast<size_t>(M) * K, 83);
  const auto w = randn(static_cast<size_t>(E) * N * K, 84);
  const auto dinp0 = randn(static_cast<size_t>(M) * K, 85);
  const auto dw0 = randn(static_cast<size_t>(E) * N * K, 86);
  auto dinp_cpu = dinp0, dw_cpu = dw0, dinp_gpu = dinp0, dw_gpu = dw0;
  linear_backward_grouped(dinp_cpu.data(), dw_cpu.data(), dout.data(), inp.data(), w.data(), offsets.data(), E, N, K);
  float* d_dinp = static_cast<float*>(up(dinp0.data(), dinp0.size() * sizeof(float)));
  float* d_dw = static_cast<float*>(up(dw0.data(), dw0.size() * sizeof(float)));
  cuda::linear_backward_grouped(d_dinp, d_dw, static_cast<const float*>(up(dout.data(), dout.size() * sizeof(float))),
                                static_cast<const float*>(up(inp.data(), inp.size() * sizeof(float))),
                                static_cast<const float*>(up(w.data(), w.size() * sizeof(float))), d_off, E, N, K);
  down(&dinp_gpu, d_dinp);
  down(&dw_gpu, d_dw);
  int bad = 0;
  for (int e = 0; e < E; ++e) {
    const float* we = w.data() + static_cast<size_t>(e) * N * K;
    for (int m = offsets[e]; m < offsets[e + 1]; ++m)
      for (int k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(m) * K + k;
        double s = std::fabs(dinp0[i]);
        for (int n = 0; n < N; ++n) s += std::fabs(static_cast<double>(dout[static_cast<size_t>(m) * N + n]) * we[n * K + k]);
        if (!(std::fabs(static_cast<double>(dinp_gpu[i]) - dinp_cpu[i]) <= (N + 2) * u * s) && ++bad <= 3)
          ADD_FAILURE() << "dinp " << m << "," << k << ": gpu " << dinp_gpu[i] << " cpu " << dinp_cpu[i];
      }
    const int Me = offsets[e + 1] - offsets[e];
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>(e) * N * K + static_cast<size_t>(n) * K + k;
        if (Me == 0) {
          if (std::memcmp(&dw_gpu[i], &dw0[i], sizeof(float)) != 0 && ++bad <= 3)
            ADD_FAILURE() << "empty expert " << e << " dweight " << n << "," << k << " written";
          continue;
        }
        double s = std::fabs(dw0[i]);
        for (int m = offsets[e]; m < offsets[e + 1]; ++m)
          s += std::fabs(static_cast<double>(dout[static_cast<size_t>(m) * N + n]) * inp[static_cast<size_t>(m) * K + k]);
        if (!(std::fabs(static_cast<double>(dw_gpu[i]) - dw_cpu[i]) <= (Me + 2) * u * s) && ++bad <= 3)
          ADD_FAILURE() << "dweight " << e << ":" << n << "," << k << ": gpu " << dw_gpu[i] << " cpu " << dw_cpu[i];
      }
  }
  EXPECT_EQ(bad, 0);
  for (void* p : blocks) be.mem_free(p);
}

// Backward: '+=' into nonzero gradients, within (reduction length + 2)·2^-24·(Σ|terms| + |initial|).
TEST(GemmGpu, BackwardMatchesCpu) {
  MOERL_REQUIRE_GPU();
  const int M = 33, N = 50, K = 70;
  const auto dout = randn(static_cast<size_t>(M) * N, 30);
  const auto inp = randn(static_cast<size_t>(M) * K, 31);
  const auto w = randn(static_cast<size_t>(N) * K, 32);
  const auto dinp0 = randn(static_cast<size_t>(M) * K, 33);
  const auto dw0 = randn(static_cast<size_t>(N) * K, 34);
  auto dinp_cpu = dinp0, dw_cpu = dw0, dinp_gpu = dinp0, dw_gpu = dw0;
  linear_backward(dinp_cpu.data(), dw_cpu.data(), dout.data(), inp.data(), w.data(), M, N, K);
  cuda::linear_backward(dinp_gpu.data(), dw_gpu.data(), dout.data(), inp.data(), w.data(), M, N, K);
  const double u = std::ldexp(1.0, -24);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      double s = std::fabs(dinp0[m * K + k]);
      for (int n = 0; n < N; ++n) s += std::fabs(static_cast<double>(dout[m * N + n]) * w[n * K + k]);
      ASSERT_NEAR(dinp_gpu[m * K + k], dinp_cpu[m * K + k], (N + 2) * u * s) << "dinp " << m << "," << k;
    }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      double s = std::fabs(dw0[n * K + k]);
      for (int m = 0; m < M; ++m) s += std::fabs(static_cast<double>(dout[m * N + n]) * inp[m * K + k]);
      ASSERT_NEAR(dw_gpu[n * K + k], dw_cpu[n * K + k], (M + 2) * u * s) << "dweight " << n << "," << k;
    }
  // A null gradient is skipped; the other is still accumulated.
  auto only_dw = dw0;
  cuda::linear_backward(nullptr, only_dw.data(), dout.data(), inp.data(), w.data(), M, N, K);
  EXPECT_TRUE(bits_equal(only_dw, dw_gpu));
}

TEST(GemmGpu, GroupedBackwardMatchesCpu) {
  MOERL_REQUIRE_GPU();
  const int E = 3, N = 24, K = 40;
  const int offsets[E + 1] = {0, 10, 10, 31};
  const int M = offsets[E];
  const auto dout = randn(static_cast<size_t>(M) * N, 40);
  const auto inp = randn(static_cast<size_t>(M) * K, 41);
  const auto w = randn(static_cast<size_t>(E) * N * K, 42);
  auto dinp_cpu = randn(static_cast<size_t>(M) * K, 43), dw_cpu = randn(static_cast<size_t>(E) * N * K, 44);
  auto dinp_gpu = dinp_cpu, dw_gpu = dw_cpu;
  linear_backward_grouped(dinp_cpu.data(), dw_cpu.data(), dout.data(), inp.data(), w.data(), offsets, E, N, K);
  cuda::linear_backward_grouped(dinp_gpu.data(), dw_gpu.data(), dout.data(), inp.data(), w.data(), offsets, E, N, K);
  // |values| ~ 1, at most max(M, N) + 1 terms of size ~ 1..10: 2^-24·(64·10) ≈ 4e-5 is generous.
  for (size_t i = 0; i < dinp_cpu.size(); ++i) ASSERT_NEAR(dinp_gpu[i], dinp_cpu[i], 4e-5) << "dinp " << i;
  for (size_t i = 0; i < dw_cpu.size(); ++i) ASSERT_NEAR(dw_gpu[i], dw_cpu[i], 4e-5) << "dweight " << i;
  // Expert 1 has no rows: its dweight slice is untouched.
  const auto dw_init = randn(static_cast<size_t>(E) * N * K, 44);
  for (int i = 0; i < N * K; ++i) ASSERT_EQ(dw_gpu[N * K + i], dw_init[N * K + i]);
}

// Grouped backward with uneven experts and empty ones (offsets {0,0,5,5,17,18}, and shifted by 3
// rows), dinp and dweight each one grouped GEMM over the experts with rows, against the CPU with
// BackwardMatchesCpu's bound: (reduction length + 2)·2^-24·(Σ|terms| + |initial|). Empty experts'
// dweight slices and the rows outside the call are untouched, bit for bit.
TEST(GemmGpu, GroupedBackwardUnevenAndEmptyExpertsMatchesCpu) {
  MOERL_REQUIRE_GPU();
  const int E = 5, N = 24, K = 40;
  const double u = std::ldexp(1.0, -24);
  for (int shift : {0, 3}) {
    std::vector<int> offsets = {0, 0, 5, 5, 17, 18};
    for (int& o : offsets) o += shift;
    const int M = offsets[E] + 2;
    const auto dout = randn(static_cast<size_t>(M) * N, 70 + shift);
    const auto inp = randn(static_cast<size_t>(M) * K, 71 + shift);
    const auto w = randn(static_cast<size_t>(E) * N * K, 72 + shift);
    const auto dinp0 = randn(static_cast<size_t>(M) * K, 73 + shift);
    const auto dw0 = randn(static_cast<size_t>(E) * N * K, 74 + shift);
    auto dinp_cpu = dinp0, dw_cpu = dw0, dinp_gpu = dinp0, dw_gpu = dw0;
    linear_backward_grouped(dinp_cpu.data(), dw_cpu.data(), dout.data(), inp.data(), w.data(), offsets.data(), E, N, K);
    cuda::linear_backward_grouped(dinp_gpu.data(), dw_gpu.data(), dout.data(), inp.data(), w.data(), offsets.data(), E,
                                  N, K);
    int bad = 0;
    for (int e = 0; e < E; ++e) {
      const float* we = w.data() + static_cast<size_t>(e) * N * K;
      for (int m = offsets[e]; m < offsets[e + 1]; ++m)
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(m) * K + k;
          double s = std::fabs(dinp0[i]);
          for (int n = 0; n < N; ++n)
            s += std::fabs(static_cast<double>(dout[static_cast<size_t>(m) * N + n]) * we[n * K + k]);
          if (!(std::fabs(static_cast<double>(dinp_gpu[i]) - dinp_cpu[i]) <= (N + 2) * u * s) && ++bad <= 3)
            ADD_FAILURE() << "shift " << shift << " dinp " << m << "," << k << ": gpu " << dinp_gpu[i] << " cpu "
                          << dinp_cpu[i];
        }
      const int Me = offsets[e + 1] - offsets[e];
      for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(e) * N * K + static_cast<size_t>(n) * K + k;
          if (Me == 0) {  // no rows: untouched
            if (std::memcmp(&dw_gpu[i], &dw0[i], sizeof(float)) != 0 && ++bad <= 3)
              ADD_FAILURE() << "shift " << shift << " empty expert " << e << " dweight " << n << "," << k << " written";
            continue;
          }
          double s = std::fabs(dw0[i]);
          for (int m = offsets[e]; m < offsets[e + 1]; ++m)
            s += std::fabs(static_cast<double>(dout[static_cast<size_t>(m) * N + n]) *
                           inp[static_cast<size_t>(m) * K + k]);
          if (!(std::fabs(static_cast<double>(dw_gpu[i]) - dw_cpu[i]) <= (Me + 2) * u * s) && ++bad <= 3)
            ADD_FAILURE() << "shift " << shift << " dweight " << e << ":" << n << "," << k << ": gpu " << dw_gpu[i]
                          << " cpu " << dw_cpu[i];
        }
    }
    // Rows outside [offsets[0], offsets[E]) of dinp: untouched.
    for (int m = 0; m < M; ++m)
      if (m < offsets[0] || m >= offsets[E])
        for (int k = 0; k < K; ++k) {
          const size_t i = static_cast<size_t>(m) * K + k;
          if (std::memcmp(&dinp_gpu[i], &dinp0[i], sizeof(float)) != 0 && ++bad <= 3)
            ADD_FAILURE() << "shift " << shift << " dinp row " << m << " outside the call written";
        }
    EXPECT_EQ(bad, 0) << "shift " << shift;
  }
}

// Pack errors: a CPU-packed weight and a format mismatch are refused.
TEST(GemmGpu, RejectsForeignWeights) {
  MOERL_REQUIRE_GPU();
  const auto w = randn(16 * 16, 50);
  const auto x = randn(4 * 16, 51);
  std::vector<float> y(4 * 16);
  LinearNumerics nm;
  PackedWeight cpu_packed;
  linear_pack_weight(&cpu_packed, w.data(), 16, 16, nm);
  EXPECT_THROW(cuda::linear_forward(y.data(), x.data(), cpu_packed, 4, nm), std::invalid_argument);
  PackedWeight pw;
  cuda::linear_pack_weight(&pw, w.data(), 16, 16, nm);
  LinearNumerics other = nm;
  other.format = Format::bf16;
  EXPECT_THROW(cuda::linear_forward(y.data(), x.data(), pw, 4, other), std::invalid_argument);
}

TEST(GemmGpu, DescribeAndMeasure) {
  MOERL_REQUIRE_GPU();
  const std::string d = cuda::gemm_describe();
  EXPECT_NE(d.find("fp8_e4m3"), std::string::npos) << d;
  std::printf("gemm_describe: %s\n", d.c_str());
  for (Format f : {Format::fp32, Format::bf16, Format::fp8_e4m3}) {
    const double t = cuda::gemm_measure_tflops(1024, f, 0.05);
    std::printf("gemm_measure_tflops(1024, %s) = %.1f\n", format_name(f), t);
    EXPECT_GT(t, 0.0) << format_name(f);
  }
}

// The bench's ceiling (issue 41: an H200's "FP32 ceiling" printed as 185 TFLOP/s): SGEMM timed with
// CUDA events must lie under the device's FP32 FMA peak (5 % margin: the boost clock the attribute
// reports is not a hard cap on every SKU), and the BF16 tensor-core GEMM must beat it.
TEST(GemmGpu, CeilingUnderThePeak) {
  MOERL_REQUIRE_GPU();
  const double peak = cuda::device_fp32_peak_tflops();
  const double sgemm = cuda::gemm_measure_tflops(4096, Format::fp32, 0.2);
  const double bf16 = cuda::gemm_measure_tflops(4096, Format::bf16, 0.2);
  std::printf("FP32 peak %.1f TFLOP/s, SGEMM(4096) %.1f, BF16 GEMM(4096) %.1f\n", peak, sgemm, bf16);
  EXPECT_GT(peak, 0.0);
  EXPECT_GT(sgemm, 0.1 * peak);
  EXPECT_LE(sgemm, 1.05 * peak);
  EXPECT_GT(bf16, sgemm);
}

#if MOERL_HAVE_NCCL
// Compile-and-link check of the NCCL dispatcher (a run needs MPI ranks with GPUs: see docs/gpu.md).
TEST(GemmGpu, NcclFactoryLinks) {
  MOERL_REQUIRE_GPU();
  std::unique_ptr<Collectives> (*factory)(MPI_Comm, Collectives*) = &make_nccl_collectives;
  EXPECT_NE(factory, nullptr);
}
#endif

}  // namespace
}  // namespace moerl
