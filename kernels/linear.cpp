// linear.cpp — the linear layer y = x·Wᵀ under emulated numerics (linear.h).
// Forward writes out with '='; backward accumulates dinp and dweight with '+='.
//
// Forward = fake-quantise the activations (O(M·K) per call, block of rows by block inside the GEMM
// so no quantised copy is written) and use the weight quantised once at pack time, in the
// order-controlled GEMM of cpu/gemm.h. The reduction plan of a call follows
// its ReduceCtx: reduce_effective_split(ctx, M, K) chunks (M = the call's rows, or one expert's
// rows in the grouped form), the order kind, and the limited-precision accumulator.
// Backward is plain FP32 through the unrounded operands (straight-through estimator), in the
// reduction order of ref::matmul_backward (cpu/gemm_backward.h): bit-identical to the reference
// and independent of the thread count. OpenBLAS serves only as the yardstick of
// gemm_measure_gflops (its own thread pool contended with oneTBB's when it ran the backward).
#include "kernels/linear.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_backward.h"
#include "kernels/cpu/ops.h"
#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl {

namespace {

cpu::GemmReduce plan_reduce(const LinearNumerics& nm, int M, int K, uint64_t call_offset) {
  cpu::GemmReduce r;
  r.split = reduce_effective_split(nm.reduce, M, K);
  r.kind = nm.reduce.order.kind;
  r.key = nm.reduce.key;
  r.key.call += call_offset;
  r.accum_bits = nm.accum_bits;
  r.promote_every = nm.promote_every;
  return r;
}

void check_weight(const PackedWeight& w, const LinearNumerics& nm) {
  if (w.format != nm.format)
    throw std::invalid_argument(std::string("linear: weight packed as ") + format_name(w.format) +
                                " used with numerics format " + format_name(nm.format));
  if (static_cast<int64_t>(w.data.size()) != cpu::gemm_packed_size(w.N, w.K))
    throw std::invalid_argument("linear: weight not packed (linear_pack_weight)");
}

// Activations are fake-quantised inside the GEMM, a block of rows at a time (no [M,K] copy), except
// under tensor scaling, whose one scale needs the whole call first: then *buf holds the
// quantised copy and is returned instead of inp.
const float* prepare_activations(cpu::GemmReduce* red, std::unique_ptr<float[]>* buf,
                                 const float* inp, int M, int K, const LinearNumerics& nm) {
  if (nm.format == Format::fp32) return inp;
  if (nm.act_scaling != Scaling::tensor) {
    red->act_format = nm.format;
    red->act_scaling = nm.act_scaling;
    red->act_block = nm.scale_block;
    return inp;
  }
  buf->reset(new float[static_cast<size_t>(M) * K]);
  quantize_matrix(buf->get(), nullptr, inp, M, K, nm.format, Scaling::tensor, 1, nm.scale_block);
  return buf->get();
}

// Quantisation never turns a non-NaN into a NaN (scales are finite and positive), so checking the
// raw activations suffices.
bool operands_nan_free(const float* inp, int64_t n, const PackedWeight& w) {
  return cpu::gemm_nan_free(inp, n) &&
         cpu::gemm_nan_free(w.data.data(), static_cast<int64_t>(w.data.size()));
}

}  // namespace

void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                        const LinearNumerics& nm) {
  out->N = N;
  out->K = K;
  out->format = nm.format;
  const float* src = weight;
  std::unique_ptr<float[]> q;
  if (nm.format != Format::fp32 && N > 0 && K > 0) {
    q.reset(new float[static_cast<size_t>(N) * K]);
    quantize_matrix(q.get(), nullptr, weight, N, K, nm.format, nm.weight_scaling, nm.scale_block,
                    nm.scale_block);
    src = q.get();
  }
  out->data.assign(static_cast<size_t>(cpu::gemm_packed_size(N, K)), 0.0f);
  if (N > 0 && K > 0) cpu::gemm_pack(out->data.data(), src, N, K);
  cpu::gemm_exp_range(src, static_cast<int64_t>(N) * K, &out->exp_lo, &out->exp_hi);
}

// out[M,N] = quant(inp)[M,K] · quant(W)ᵀ
void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                    const LinearNumerics& nm) {
  check_weight(w, nm);
  const int N = w.N, K = w.K;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    std::fill(out, out + static_cast<int64_t>(M) * N, 0.0f);
    return;
  }
  cpu::GemmReduce red = plan_reduce(nm, M, K, 0);
  red.w_exp_lo = w.exp_lo;
  red.w_exp_hi = w.exp_hi;
  std::unique_ptr<float[]> buf;
  const float* x = prepare_activations(&red, &buf, inp, M, K, nm);
  // (the GEMM looks at each block's activations when it knows the weight's range)
  if (red.accum_bits > 0 && w.exp_hi < 0) red.operands_nan_free = operands_nan_free(inp, int64_t{M} * K, w);
  cpu::gemm_forward(out, x, w.data.data(), M, N, K, red);
}

// out[offsets[E], N], inp[offsets[E], K]; expert e owns rows offsets[e]..offsets[e+1]-1.
void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w, const int* offsets,
                            int E, const LinearNumerics& nm) {
  if (E <= 0) return;
  const int N = w[0].N, K = w[0].K;
  for (int e = 0; e < E; ++e) {
    check_weight(w[e], nm);
    if (w[e].N != N || w[e].K != K)
      throw std::invalid_argument("linear_forward_grouped: experts' weights differ in shape");
    if (offsets[e + 1] < offsets[e])
      throw std::invalid_argument("linear_forward_grouped: offsets must be non-decreasing");
  }
  const int rows_end = offsets[E];
  if (rows_end <= offsets[0] || N <= 0) return;
  if (K <= 0) {
    std::fill(out + static_cast<int64_t>(offsets[0]) * N, out + static_cast<int64_t>(rows_end) * N, 0.0f);
    return;
  }
  // Work items of whole row tiles, ~64k FMAs or more each, over all experts at once.
  struct Item {
    int e, m0, m1;
  };
  const int tile = cpu::gemm_row_tile();
  const int64_t per_row = static_cast<int64_t>(N) * K;
  const int rows_per_item =
      tile * static_cast<int>(std::max<int64_t>(1, (1 << 16) / (per_row * tile)));
  std::vector<Item> items;
  std::vector<cpu::GemmReduce> plans(E);
  std::vector<std::unique_ptr<float[]>> bufs(E);
  std::vector<const float*> xs(E);  // expert e's rows, quantised when tensor-scaled
  bool ranges_known = true;  // the GEMM then looks at each block's activations itself
  for (int e = 0; e < E; ++e) ranges_known = ranges_known && w[e].exp_hi >= 0;
  const bool x_nan_free =
      nm.accum_bits > 0 && !ranges_known &&
      cpu::gemm_nan_free(inp + static_cast<int64_t>(offsets[0]) * K,
                         static_cast<int64_t>(rows_end - offsets[0]) * K);
  for (int e = 0; e < E; ++e) {
    const int Me = offsets[e + 1] - offsets[e];
    plans[e] = plan_reduce(nm, Me, K, static_cast<uint64_t>(e));
    plans[e].w_exp_lo = w[e].exp_lo;
    plans[e].w_exp_hi = w[e].exp_hi;
    xs[e] = prepare_activations(&plans[e], &bufs[e], inp + static_cast<int64_t>(offsets[e]) * K,
                                Me, K, nm);
    if (Me == 0) continue;
    if (x_nan_free)
      plans[e].operands_nan_free =
          cpu::gemm_nan_free(w[e].data.data(), static_cast<int64_t>(w[e].data.size()));
    for (int m0 = 0; m0 < Me; m0 += rows_per_item) items.push_back({e, m0, std::min(Me, m0 + rows_per_item)});
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, items.size()),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t i = r.begin(); i != r.end(); ++i) {
                        const Item& it = items[i];
                        const int64_t off = offsets[it.e];
                        cpu::gemm_rows(out + off * N, xs[it.e], w[it.e].data.data(), it.m0, it.m1,
                                       N, K, plans[it.e]);
                      }
                    });
}

// dinp[M,K] += dout[M,N]·weight[N,K] ; dweight[N,K] += dout[M,N]ᵀ·inp[M,K]
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  if (dinp) cpu::gemm_backward_input(dinp, dout, weight, M, N, K);
  if (dweight) cpu::gemm_backward_weight(dweight, dout, inp, M, N, K);
}

void linear_swiglu_grouped(float* a, float* g, float* u, const float* inp, const PackedWeight* w_gate,
                           const PackedWeight* w_up, const int* offsets, int E, int rows,
                           const LinearNumerics& nm_gate, const LinearNumerics& nm_up, Format act) {
  if (E <= 0 || rows <= 0) return;
  linear_forward_grouped(g, inp, w_gate, offsets, E, nm_gate);
  linear_forward_grouped(u, inp, w_up, offsets, E, nm_up);
  const int F = w_gate[0].N;
  const int64_t n = static_cast<int64_t>(rows) * F;
  cpu::round_format(g, n, act);
  cpu::round_format(u, n, act);
  cpu::swiglu_forward(a, g, u, rows, F);
  cpu::round_format(a, n, act);
}

void linear_backward_swiglu_grouped(float* dg, float* du, float* dw_down, const float* dy, const float* a,
                                    const float* g, const float* u, const float* w_down, const int* offsets, int E,
                                    int rows, int D, int F) {
  if (E <= 0 || rows <= 0 || F <= 0) return;
  std::vector<float> da(static_cast<size_t>(rows) * F, 0.0f);
  linear_backward_grouped(da.data(), dw_down, dy, a, w_down, offsets, E, D, F);
  cpu::swiglu_backward(dg, du, da.data(), g, u, rows, F);
}

bool grouped_sized_on_device(const LinearNumerics& nm, int K) {
  const bool unscaled = nm.format == Format::fp32 ||
                        ((nm.format == Format::bf16 || nm.format == Format::fp16) &&
                         nm.act_scaling == Scaling::none && nm.weight_scaling == Scaling::none);
  // the split is largest at one row (batch variance multiplies it for few rows)
  return unscaled && nm.accum_bits == 0 && reduce_effective_split(nm.reduce, 1, K) == 1;
}

// weight/dweight are [E, N, K]; all experts' tiles run in one parallel region per product.
void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const int* offsets, int E, int N, int K) {
  if (E <= 0 || N <= 0 || K <= 0) return;
  if (dinp) cpu::gemm_backward_input_grouped(dinp, dout, weight, offsets, E, N, K);
  if (dweight) cpu::gemm_backward_weight_grouped(dweight, dout, inp, offsets, E, N, K);
}

const char* blas_kernel_name() {
  static const std::string name = std::string("OpenBLAS ") + openblas_get_corename();
  return name.c_str();
}

double gemm_measure_gflops(int n, double min_seconds, bool use_blas) {
  if (n <= 0) return 0.0;
  // BLAS gets the threads oneTBB may use (tbb::global_control), so both measure the same cores.
  const int blas_threads_before = openblas_get_num_threads();
  const int threads = static_cast<int>(std::min<size_t>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
      static_cast<size_t>(tbb::this_task_arena::max_concurrency())));
  if (use_blas) openblas_set_num_threads(threads);
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn), b(nn), c(nn);
  Rng rng(rng_derive(0, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(n)}));
  for (size_t i = 0; i < nn; ++i) a[i] = rng.normal();
  for (size_t i = 0; i < nn; ++i) b[i] = rng.normal();
  const LinearNumerics nm;
  PackedWeight w;
  if (!use_blas) linear_pack_weight(&w, b.data(), n, n, nm);
  auto run = [&] {
    if (use_blas)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                  0.0f, c.data(), n);
    else
      linear_forward(c.data(), a.data(), w, n, nm);
  };
  run();  // warm-up: page faults, thread pools
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double best = 1e300;
  do {
    const auto t0 = clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
  } while (std::chrono::duration<double>(clock::now() - start).count() < min_seconds);
  if (use_blas) openblas_set_num_threads(blas_threads_before);
  return 2.0 * n * static_cast<double>(n) * n / best * 1e-9;
}

}  // namespace moerl
