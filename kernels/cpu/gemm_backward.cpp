// cpu/gemm_backward.cpp — the linear layer's backward products (see cpu/gemm_backward.h); both
// outputs are accumulated with '+='.
//
// One driver serves both products. A problem is
//   dst[rows, cols] += chain_t x(r, t) · w(t, j),   t = 0..len-1,
// with x(r, t) = x[r·xr + t·xt] and w(t, j) = w[t·ldw + j]:
//   dinp:    rows = M, cols = K, len = N, x = dout (xr = N, xt = 1), w = weight (ldw = K);
//   dweight: rows = N, cols = K, len = M, x = dout (xr = 1, xt = N), w = inp    (ldw = K).
// A register tile holds 6 rows × two vectors of columns (32 on AVX-512, 16 on AVX2, 8 on NEON) of
// chains in accumulator registers; per t it loads one row of w and broadcasts x of each of the 6
// rows — one fused multiply-add per accumulator (Google Highway, one source for every target of
// kernels/simd_config.h, the best the CPU supports chosen at run time; the portable target runs
// the same chains as scalar std::fma loops).
// Long chains (dweight over M tokens) are walked in blocks of kChainBlock steps so that a task's
// slices of x and w stay in L2; between blocks a tile's chains wait in a per-task buffer and
// continue exactly where they stopped (an FMA chain split this way is the same chain). The value
// is added to dst once, after the last step, as ref::matmul_backward does.
// Tasks own disjoint (row group × column group) blocks of dst: nothing is reduced across tasks,
// so the bits do not depend on the number of threads, nor on the target (a chain never crosses a
// lane).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_GEMM_BACKWARD_ONCE_
#define MOERL_KERNELS_CPU_GEMM_BACKWARD_ONCE_

#include "kernels/cpu/gemm_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace moerl::cpu::gemm_backward_detail {

constexpr int kRows = 6;          // rows per register tile
constexpr int kPanel = 32;        // columns per register tile
constexpr int kChainBlock = 256;  // chain steps per pass over a task's tiles
constexpr int kMaxGroupRows = 8 * kRows, kMaxGroupCols = 4 * kPanel;

// One tile's chains over t in [0, len) (x, w already at the block's first step). Load: start
// from the partial chains in c (row stride ldc), else from 0. Add: finish with
// dst[r][j] += acc, else store the partial chains back to c. x(r, t) = x[r·xs + t] when XRow
// (x's rows are contiguous in t), else x[r + t·xs].
struct Problem {
  float* dst;
  int64_t ldd;
  const float* x;
  int64_t xr, xt;  // exactly one of them is 1
  const float* w;
  int64_t ldw;
  int rows, cols, len;
};

struct Task {
  int problem, r0, r1, c0, c1;
};

// Cuts problem pi into row groups × column groups: as large as the buffer allows (x and w slices
// reused across more tiles), smaller while the whole call would have fewer than `want` tasks.
void add_tasks(std::vector<Task>* tasks, const Problem& p, int pi, int64_t want) {
  if (p.rows <= 0 || p.cols <= 0 || p.len <= 0) return;
  int gr = kMaxGroupRows, gc = kMaxGroupCols;
  auto count = [&] {
    return static_cast<int64_t>((p.rows + gr - 1) / gr) * ((p.cols + gc - 1) / gc);
  };
  while (count() < want && (gr > kRows || gc > kPanel)) {
    if (gr > kRows && (gr / kRows >= gc / kPanel || gc == kPanel)) gr /= 2;
    else gc /= 2;
  }
  for (int r0 = 0; r0 < p.rows; r0 += gr)
    for (int c0 = 0; c0 < p.cols; c0 += gc)
      tasks->push_back({pi, r0, std::min(p.rows, r0 + gr), c0, std::min(p.cols, c0 + gc)});
}

}  // namespace moerl::cpu::gemm_backward_detail

#endif  // MOERL_KERNELS_CPU_GEMM_BACKWARD_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

using namespace gemm_backward_detail;

namespace {

// One tile's chains over t in [0, len) (x, w already at the block's first step): R rows ×
// cols columns, walked in sub-tiles of V vectors. Load: start from the partial chains in c (row
// stride ldc), else from 0. Add: finish with dst[r][j] += acc, else store the partial chains back
// to c. x(r, t) = x[r·xs + t] when XRow (x's rows are contiguous in t), else x[r + t·xs].
template <int R, int V, bool XRow, bool Load, bool Add>
void tile(float* c, int64_t ldc, float* dst, int64_t ldd, int cols, const float* x, int64_t xs,
          const float* w, int64_t ldw, int len) {
#if !MOERL_SIMD_SCALAR
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  for (int j0 = 0; j0 < cols; j0 += V * L) {
    // lanes of each vector that exist (columns past cols are neither read nor written)
    size_t n[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) n[v] = static_cast<size_t>(std::clamp(cols - j0 - v * L, 0, L));
    const bool full = n[V - 1] == static_cast<size_t>(L);
    const auto mlast = hn::FirstN(d, n[V - 1]);
    VF acc[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v)
        acc[r][v] = Load ? (n[v] == static_cast<size_t>(L) ? hn::LoadU(d, c + r * ldc + j0 + v * L)
                                                           : hn::MaskedLoad(hn::FirstN(d, n[v]), d, c + r * ldc + j0 + v * L))
                         : hn::Zero(d);
    const float* wj = w + j0;
    for (int t = 0; t < len; ++t) {
      const float* wt = wj + t * ldw;
      VF wv[V];
#pragma GCC unroll 2
      for (int v = 0; v + 1 < V; ++v) wv[v] = hn::LoadU(d, wt + v * L);
      wv[V - 1] = full ? hn::LoadU(d, wt + (V - 1) * L) : hn::MaskedLoad(mlast, d, wt + (V - 1) * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const VF b = hn::Set(d, XRow ? x[r * xs + t] : x[r + t * xs]);
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[r][v] = MulAddExact(d, b, wv[v], acc[r][v]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        if (n[v] == 0) continue;
        const auto m = hn::FirstN(d, n[v]);
        if constexpr (Add) {
          float* p = dst + r * ldd + j0 + v * L;
          StoreFirst(d, hn::Add(hn::MaskedLoad(m, d, p), acc[r][v]), n[v], p);
        } else {
          StoreFirst(d, acc[r][v], n[v], c + r * ldc + j0 + v * L);
        }
      }
    }
  }
#else  // portable target: the same chains, one element at a time
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < cols; ++j) {
      float a = Load ? c[r * ldc + j] : 0.0f;
      for (int t = 0; t < len; ++t)
        a = std::fma(XRow ? x[r * xs + t] : x[r + t * xs], w[t * ldw + j], a);
      if (Add) {
        dst[r * ldd + j] += a;
      } else {
        c[r * ldc + j] = a;
      }
    }
#endif
}

using TileFn = void (*)(float*, int64_t, float*, int64_t, int, const float*, int64_t, const float*,
                        int64_t, int);

struct TileTable {
  TileFn f[kRows][2][2][2][2];  // [R−1][V−1][XRow][Load][Add]
};

template <int R, int V, bool XRow>
void fill_modes(TileTable& t) {
  t.f[R - 1][V - 1][XRow][0][0] = &tile<R, V, XRow, false, false>;
  t.f[R - 1][V - 1][XRow][0][1] = &tile<R, V, XRow, false, true>;
  t.f[R - 1][V - 1][XRow][1][0] = &tile<R, V, XRow, true, false>;
  t.f[R - 1][V - 1][XRow][1][1] = &tile<R, V, XRow, true, true>;
}

template <int R>
void fill_rows(TileTable& t) {
  fill_modes<R, 1, false>(t);
  fill_modes<R, 1, true>(t);
  fill_modes<R, 2, false>(t);
  fill_modes<R, 2, true>(t);
  if constexpr (R > 1) fill_rows<R - 1>(t);
}

const TileTable& tile_table() {
  static const TileTable t = [] {
    TileTable m{};
    fill_rows<kRows>(m);
    return m;
  }();
  return t;
}

}  // namespace

// Rows [r0, r1) × columns [c0, c1) of p (a task), all chain steps.
void RunBlock(const Problem& p, int r0, int r1, int c0, int c1) {
  const TileTable& tab = tile_table();
  const int L = static_cast<int>(hn::Lanes(DF()));
  const bool xrow = p.xt == 1;
  const int64_t xs = xrow ? p.xr : p.xt;
  alignas(64) float buf[kMaxGroupRows * kMaxGroupCols];  // partial chains [r1−r0][kMaxGroupCols]
  for (int t0 = 0; t0 < p.len; t0 += kChainBlock) {
    const int t1 = std::min(p.len, t0 + kChainBlock);
    const bool load = t0 > 0, add = t1 == p.len;
    for (int rt = r0; rt < r1; rt += kRows) {
      const int R = std::min(kRows, r1 - rt);
      const float* x = p.x + rt * p.xr + static_cast<int64_t>(t0) * p.xt;
      for (int j0 = c0; j0 < c1; j0 += kPanel) {
        const int cols = std::min(kPanel, c1 - j0);
        const int V = cols > L ? 2 : 1;
        float* c = buf + (rt - r0) * kMaxGroupCols + (j0 - c0);
        tab.f[R - 1][V - 1][xrow][load][add](c, kMaxGroupCols, p.dst + rt * p.ldd + j0, p.ldd,
                                             cols, x, xs,
                                             p.w + static_cast<int64_t>(t0) * p.ldw + j0, p.ldw,
                                             t1 - t0);
      }
    }
  }
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

using namespace gemm_backward_detail;

HWY_EXPORT(RunBlock);

namespace {

void run(const std::vector<Problem>& probs, int64_t want_per_problem) {
  std::vector<Task> tasks;
  for (size_t i = 0; i < probs.size(); ++i)
    add_tasks(&tasks, probs[i], static_cast<int>(i), want_per_problem);
  if (tasks.empty()) return;
  double work = 0;
  for (const Problem& p : probs) work += static_cast<double>(p.rows) * p.cols * p.len;
  if (work < 1 << 17) {  // too small to pay for a parallel region
    for (const Task& t : tasks) HWY_DYNAMIC_DISPATCH(RunBlock)(probs[t.problem], t.r0, t.r1, t.c0, t.c1);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks.size()),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t i = r.begin(); i != r.end(); ++i) {
                        const Task& t = tasks[i];
                        HWY_DYNAMIC_DISPATCH(RunBlock)(probs[t.problem], t.r0, t.r1, t.c0, t.c1);
                      }
                    });
}

// Enough tasks for load balance on a shared machine (a preempted thread leaves little behind).
constexpr int64_t kWantTasks = 16;

Problem input_problem(float* dinp, const float* dout, const float* weight, int M, int N, int K) {
  return {dinp, K, dout, N, 1, weight, K, M, K, N};
}
Problem weight_problem(float* dweight, const float* dout, const float* inp, int M, int N, int K) {
  return {dweight, K, dout, 1, N, inp, K, N, K, M};
}

}  // namespace

void gemm_backward_input(float* dinp, const float* dout, const float* weight, int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  run({input_problem(dinp, dout, weight, M, N, K)}, kWantTasks);
}

void gemm_backward_weight(float* dweight, const float* dout, const float* inp, int M, int N, int K) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  run({weight_problem(dweight, dout, inp, M, N, K)}, kWantTasks);
}

namespace {
// One problem per expert with rows (offsets[e]..offsets[e+1]), run together; make(e, o, Me)
// builds expert e's problem from its first row o and row count Me.
template <class Make>
void run_grouped(const int* offsets, int E, const Make& make) {
  std::vector<Problem> probs;
  for (int e = 0; e < E; ++e) {
    const int Me = offsets[e + 1] - offsets[e];
    if (Me > 0) probs.push_back(make(e, static_cast<int64_t>(offsets[e]), Me));
  }
  run(probs, std::max<int64_t>(1, kWantTasks / std::max<int64_t>(1, static_cast<int64_t>(probs.size()))));
}
}  // namespace

void gemm_backward_input_grouped(float* dinp, const float* dout, const float* weight,
                                 const int* offsets, int E, int N, int K) {
  if (E <= 0 || N <= 0 || K <= 0) return;
  const int64_t nk = static_cast<int64_t>(N) * K;
  run_grouped(offsets, E, [&](int e, int64_t o, int Me) {
    return input_problem(dinp + o * K, dout + o * N, weight + e * nk, Me, N, K);
  });
}

void gemm_backward_weight_grouped(float* dweight, const float* dout, const float* inp,
                                  const int* offsets, int E, int N, int K) {
  if (E <= 0 || N <= 0 || K <= 0) return;
  const int64_t nk = static_cast<int64_t>(N) * K;
  run_grouped(offsets, E, [&](int e, int64_t o, int Me) {
    return weight_problem(dweight + e * nk, dout + o * N, inp + o * K, Me, N, K);
  });
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
