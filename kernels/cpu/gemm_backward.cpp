// cpu/gemm_backward.cpp — the linear layer's backward products (see cpu/gemm_backward.h); both
// outputs are accumulated with '+='.
//
// One driver serves both products. A problem is
//   dst[rows, cols] += chain_t x(r, t) · w(t, j),   t = 0..len-1,
// with x(r, t) = x[r·xr + t·xt] and w(t, j) = w[t·ldw + j]:
//   dinp:    rows = M, cols = K, len = N, x = dout (xr = N, xt = 1), w = weight (ldw = K);
//   dweight: rows = N, cols = K, len = M, x = dout (xr = 1, xt = N), w = inp    (ldw = K).
// A register tile holds 6 rows × 32 (or 16) columns of chains in zmm accumulators; per t it
// loads one 32-column row of w and broadcasts x of each of the 6 rows — one FMA per accumulator.
// Long chains (dweight over M tokens) are walked in blocks of kChainBlock steps so that a task's
// slices of x and w stay in L2; between blocks a tile's chains wait in a per-task buffer and
// continue exactly where they stopped (an FMA chain split this way is the same chain). The value
// is added to dst once, after the last step, as ref::matmul_backward does.
// Tasks own disjoint (row group × column group) blocks of dst: nothing is reduced across tasks,
// so the bits do not depend on the number of threads.
#include "kernels/cpu/gemm_backward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace moerl::cpu {

namespace {

constexpr int kRows = 6;          // rows per register tile
constexpr int kPanel = 32;        // columns per register tile
constexpr int kChainBlock = 256;  // chain steps per pass over a task's tiles
constexpr int kMaxGroupRows = 8 * kRows, kMaxGroupCols = 4 * kPanel;

// One tile's chains over t in [0, len) (x, w already at the block's first step). Load: start
// from the partial chains in c (row stride ldc), else from 0. Add: finish with
// dst[r][j] += acc, else store the partial chains back to c. x(r, t) = x[r·xs + t] when XRow
// (x's rows are contiguous in t), else x[r + t·xs].
template <int R, int V, bool XRow, bool Load, bool Add>
void tile(float* c, int64_t ldc, float* dst, int64_t ldd, int last_cols, const float* x,
          int64_t xs, const float* w, int64_t ldw, int len) {
#ifdef __AVX512F__
  const __mmask16 mlast = static_cast<__mmask16>((1u << last_cols) - 1u);
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      acc[r][v] = Load ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int t = 0; t < len; ++t) {
    const float* wt = w + t * ldw;
    __m512 wv[V];
#pragma GCC unroll 2
    for (int v = 0; v + 1 < V; ++v) wv[v] = _mm512_loadu_ps(wt + 16 * v);
    wv[V - 1] = _mm512_maskz_loadu_ps(mlast, wt + 16 * (V - 1));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(XRow ? x[r * xs + t] : x[r + t * xs]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(b, wv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      if constexpr (Add) {
        float* d = dst + r * ldd + 16 * v;
        if (v + 1 < V) {
          _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), acc[r][v]));
        } else {
          _mm512_mask_storeu_ps(d, mlast, _mm512_add_ps(_mm512_maskz_loadu_ps(mlast, d), acc[r][v]));
        }
      } else {
        _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
      }
    }
  }
#else  // scalar: the same chains, one element at a time
  const int cols = 16 * (V - 1) + last_cols;
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

struct Problem {
  float* dst;
  int64_t ldd;
  const float* x;
  int64_t xr, xt;  // exactly one of them is 1
  const float* w;
  int64_t ldw;
  int rows, cols, len;
};

// Rows [r0, r1) × columns [c0, c1) of p (a task), all chain steps.
void run_block(const Problem& p, int r0, int r1, int c0, int c1) {
  const TileTable& tab = tile_table();
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
        const int V = cols > 16 ? 2 : 1;
        float* c = buf + (rt - r0) * kMaxGroupCols + (j0 - c0);
        tab.f[R - 1][V - 1][xrow][load][add](c, kMaxGroupCols, p.dst + rt * p.ldd + j0, p.ldd,
                                             cols - 16 * (V - 1), x, xs,
                                             p.w + static_cast<int64_t>(t0) * p.ldw + j0, p.ldw,
                                             t1 - t0);
      }
    }
  }
}

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

void run(const std::vector<Problem>& probs, int64_t want_per_problem) {
  std::vector<Task> tasks;
  for (size_t i = 0; i < probs.size(); ++i)
    add_tasks(&tasks, probs[i], static_cast<int>(i), want_per_problem);
  if (tasks.empty()) return;
  double work = 0;
  for (const Problem& p : probs) work += static_cast<double>(p.rows) * p.cols * p.len;
  if (work < 1 << 17) {  // too small to pay for a parallel region
    for (const Task& t : tasks) run_block(probs[t.problem], t.r0, t.r1, t.c0, t.c1);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<size_t>(0, tasks.size()),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t i = r.begin(); i != r.end(); ++i) {
                        const Task& t = tasks[i];
                        run_block(probs[t.problem], t.r0, t.r1, t.c0, t.c1);
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
