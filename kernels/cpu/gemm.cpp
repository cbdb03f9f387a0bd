// cpu/gemm.cpp — register-tiled forward GEMM with a controlled reduction order (see cpu/gemm.h).
// out is written with '='.
//
// Kernel: a tile of kRows rows × 32 (or 16) columns lives in zmm accumulators; for each k the
// tile loads one k-row of the packed weight panel and broadcasts x[m][k] of each row, one FMA
// per accumulator. An output element is therefore a single sequential FMA chain — the blocking
// only decides which chains run side by side, never how a chain is summed — so results do not
// depend on M, on the tiling or on the number of threads (no reduction crosses a task).
// Without AVX-512 at compile time the same chains run as scalar std::fma loops.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl::cpu {

namespace {

constexpr int kRows = 6;       // rows per register tile: 6×2 zmm accumulators (+6 in limited mode)
constexpr int kMaxSplit = 256;  // split_k:64 (the parse limit) × 4 (batch variance)

struct Limited {
  int shift = 0;  // 23 − accum_bits: low fraction bits cleared by the accumulator's rounding
  int run = 1;    // promote_every
};

// c[rows, 16·V] (row stride ldc; only last_cols of the final 16 columns are stored) ←
// the chains of x[rows, ·] (row stride ldx) with the panel wp[K][16·V] over k in [k0, k1).
using MicroFn = void (*)(float* c, int64_t ldc, int last_cols, const float* x, int64_t ldx,
                         const float* wp, int k0, int k1, const Limited& lim);

#ifdef __AVX512F__

struct RoundV {
  __m512i half_m1, lsb_bit, lsb_one, clear;
  explicit RoundV(int shift) {
    half_m1 = _mm512_set1_epi32(shift ? static_cast<int>((1u << (shift - 1)) - 1u) : 0);
    lsb_bit = _mm512_set1_epi32(static_cast<int>(1u << shift));
    lsb_one = _mm512_set1_epi32(shift ? 1 : 0);
    clear = _mm512_set1_epi32(static_cast<int>(~((1u << shift) - 1u)));
  }
};

// Vector round_to_bits (precision.cpp): the same integer steps — add half − 1, plus 1 where the
// lowest kept bit is set (ties to even), clear the dropped bits. NaN needs care only when its
// payload could carry into the sign bit: NanSafe passes every NaN through unchanged. Without it
// the steps are still exact for every NaN the accumulator can produce from NaN-free operands
// (the default NaN 0xFFC00000 has no low payload bits, so it rounds to itself), and the
// compare/blend pair costs ~35% of the kernel.
template <bool NanSafe>
inline __m512 round_bits_v(__m512 p, const RoundV& c) {
  const __m512i u = _mm512_castps_si512(p);
  const __mmask16 odd = _mm512_test_epi32_mask(u, c.lsb_bit);
  __m512i r = _mm512_add_epi32(u, c.half_m1);
  r = _mm512_mask_add_epi32(r, odd, r, c.lsb_one);
  r = _mm512_and_si512(r, c.clear);
  if constexpr (NanSafe) {
    const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, _mm512_castsi512_ps(r), p);
  }
  return _mm512_castsi512_ps(r);
}

// Acc: 0 = FP32 chains, 1 = limited accumulator (NaN-free operands), 2 = limited, NaN-safe.
template <int R, int V, bool Rev, int Acc>
void micro(float* c, int64_t ldc, int last_cols, const float* x, int64_t ldx, const float* wp,
           int k0, int k1, const Limited& lim) {
  constexpr int W = 16 * V;
  __m512 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const int len = k1 - k0;
  if constexpr (Acc == 0) {
    for (int t = 0; t < len; ++t) {
      const int k = Rev ? k1 - 1 - t : k0 + t;
      const float* wk = wp + static_cast<int64_t>(k) * W;
      __m512 w[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) w[v] = _mm512_loadu_ps(wk + 16 * v);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512 b = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(b, w[v], acc[r][v]);
      }
    }
  } else {
    const RoundV rc(lim.shift);
    for (int t0 = 0; t0 < len; t0 += lim.run) {
      const int t1 = std::min(len, t0 + lim.run);
      __m512 p[R][V];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) p[r][v] = _mm512_setzero_ps();
      for (int t = t0; t < t1; ++t) {
        const int k = Rev ? k1 - 1 - t : k0 + t;
        const float* wk = wp + static_cast<int64_t>(k) * W;
        __m512 w[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) w[v] = _mm512_loadu_ps(wk + 16 * v);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 b = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v)
            p[r][v] = round_bits_v<Acc == 2>(_mm512_fmadd_ps(b, w[v], p[r][v]), rc);
        }
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_add_ps(acc[r][v], p[r][v]);
    }
  }
  const __mmask16 mlast = static_cast<__mmask16>((1u << last_cols) - 1u);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v + 1 < V; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
    _mm512_mask_storeu_ps(c + r * ldc + 16 * (V - 1), mlast, acc[r][V - 1]);
  }
}

#else  // scalar fallback: the same chains, one column at a time

template <int R, int V, bool Rev, int Acc>
void micro(float* c, int64_t ldc, int last_cols, const float* x, int64_t ldx, const float* wp,
           int k0, int k1, const Limited& lim) {
  constexpr int W = 16 * V;
  const int cols = 16 * (V - 1) + last_cols;
  const int bits = 23 - lim.shift;
  const int len = k1 - k0;
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < cols; ++j) {
      float acc = 0.0f;
      if constexpr (Acc == 0) {
        for (int t = 0; t < len; ++t) {
          const int k = Rev ? k1 - 1 - t : k0 + t;
          acc = std::fma(x[r * ldx + k], wp[static_cast<int64_t>(k) * W + j], acc);
        }
      } else {
        for (int t0 = 0; t0 < len; t0 += lim.run) {
          const int t1 = std::min(len, t0 + lim.run);
          float p = 0.0f;
          for (int t = t0; t < t1; ++t) {
            const int k = Rev ? k1 - 1 - t : k0 + t;
            p = round_to_bits(std::fma(x[r * ldx + k], wp[static_cast<int64_t>(k) * W + j], p), bits);
          }
          acc = acc + p;
        }
      }
      c[r * ldc + j] = acc;
    }
  }
}

#endif

struct MicroTable {
  MicroFn f[kRows][2][2][3];  // [rows−1][V−1][reversed][Acc]
};

template <int R, int V, bool Rev>
void fill_acc(MicroTable& t) {
  t.f[R - 1][V - 1][Rev][0] = &micro<R, V, Rev, 0>;
  t.f[R - 1][V - 1][Rev][1] = &micro<R, V, Rev, 1>;
  t.f[R - 1][V - 1][Rev][2] = &micro<R, V, Rev, 2>;
}

template <int R>
void fill_rows(MicroTable& t) {
  fill_acc<R, 1, false>(t);
  fill_acc<R, 1, true>(t);
  fill_acc<R, 2, false>(t);
  fill_acc<R, 2, true>(t);
  if constexpr (R > 1) fill_rows<R - 1>(t);
}

const MicroTable& micro_table() {
  static const MicroTable t = [] {
    MicroTable m{};
    fill_rows<kRows>(m);
    return m;
  }();
  return t;
}

// dst[0..cols) = part[order[0]] + part[order[1]] + ... (left to right), where chunk c's
// partial sums of this row start at part + c·kRows·kGemmPanel.
inline void combine_row(float* dst, const float* part, const int* order, int split, int cols) {
  constexpr int64_t kChunkStride = kRows * kGemmPanel;
#ifdef __AVX512F__
  const int c0 = std::min(cols, 16), c1 = cols - c0;
  __m512 s0 = _mm512_loadu_ps(part + order[0] * kChunkStride);
  for (int j = 1; j < split; ++j) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(part + order[j] * kChunkStride));
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << c0) - 1u), s0);
  if (c1 > 0) {  // the second 16 columns exist only in 32-wide panels
    __m512 s1 = _mm512_loadu_ps(part + order[0] * kChunkStride + 16);
    for (int j = 1; j < split; ++j)
      s1 = _mm512_add_ps(s1, _mm512_loadu_ps(part + order[j] * kChunkStride + 16));
    _mm512_mask_storeu_ps(dst + 16, static_cast<__mmask16>((1u << c1) - 1u), s1);
  }
#else
  float sum[kGemmPanel];
  std::memcpy(sum, part + order[0] * kChunkStride, sizeof(sum));
  for (int j = 1; j < split; ++j) {
    const float* p = part + order[j] * kChunkStride;
    for (int i = 0; i < kGemmPanel; ++i) sum[i] = sum[i] + p[i];
  }
  std::memcpy(dst, sum, sizeof(float) * cols);
#endif
}

struct Plan {
  int split;
  bool rev;
  int acc;  // micro's Acc
  Limited limited;
};

Plan make_plan(const GemmReduce& red, int K) {
  if (red.act_format != Format::fp32 && red.act_scaling == Scaling::tensor)
    throw std::invalid_argument("gemm: tensor-scaled activations must be quantised beforehand");
  Plan p;
  p.split = std::clamp(red.split, 1, std::max(1, std::min(K, kMaxSplit)));
  p.rev = red.kind == OrderKind::reversed;
  p.acc = red.accum_bits <= 0 ? 0 : (red.operands_nan_free ? 1 : 2);
  p.limited.shift = 23 - std::clamp(red.accum_bits, 0, 23);
  p.limited.run = std::max(1, red.promote_every);
  return p;
}

// Rows per cache block: the block's activations (≤ ~64 KiB, or one tile for very long rows)
// stay in L1/L2 while every column panel of W sweeps over them, so each panel is fetched once per
// block rather than once per row tile. Blocking changes which chains run together, never a chain.
int block_rows_for(int K) {
  const int rows = (16384 / std::max(K, 1)) / kRows * kRows;
  return std::clamp(rows, kRows, 16 * kRows);
}

// Rows [m_begin, m_end) × column panels [p0, p1) of the call.
void compute_block(float* out, const float* inp, const float* packed, int N, int K,
                   const GemmReduce& red, const Plan& plan, int m_begin, int m_end, int p0,
                   int p1) {
  const MicroTable& tab = micro_table();
  const int split = plan.split;
  const int block = block_rows_for(K);
  const bool quantise = red.act_format != Format::fp32;
  std::vector<float> buf;   // chunk partials of one tile [split][kRows][32]
  std::vector<int> orders;  // chunk combine order of each row of the block [block][split]
  std::vector<float> xq;    // the block's quantised activations [block][K]
  if (split > 1) {
    buf.resize(static_cast<size_t>(split) * kRows * kGemmPanel);
    orders.resize(static_cast<size_t>(block) * split);
  }
  if (quantise) xq.resize(static_cast<size_t>(std::min(block, m_end - m_begin)) * K);
  for (int mb = m_begin; mb < m_end; mb += block) {
    const int me = std::min(m_end, mb + block);
    const float* xb = inp + static_cast<int64_t>(mb) * K;
    if (quantise) {
      quantize_matrix(xq.data(), nullptr, xb, me - mb, K, red.act_format, red.act_scaling, 1,
                      red.act_block);
      xb = xq.data();
    }
    if (split > 1)
      for (int m = mb; m < me; ++m) gemm_chunk_order(&orders[static_cast<size_t>(m - mb) * split], red, m);
    for (int p = p0; p < p1; ++p) {
      const int n0 = p * kGemmPanel;
      const int cols = std::min(kGemmPanel, N - n0);
      const int V = cols > 16 ? 2 : 1;
      const float* wp = packed + static_cast<int64_t>(n0) * K;
      for (int mt = mb; mt < me; mt += kRows) {
        const int rows = std::min(kRows, me - mt);
        const MicroFn fn = tab.f[rows - 1][V - 1][plan.rev][plan.acc];
        const float* x = xb + static_cast<int64_t>(mt - mb) * K;
        float* dst = out + static_cast<int64_t>(mt) * N + n0;
        if (split == 1) {
          fn(dst, N, cols - 16 * (V - 1), x, K, wp, 0, K, plan.limited);
          continue;
        }
        for (int c = 0; c < split; ++c) {
          const int k0 = static_cast<int>(static_cast<int64_t>(c) * K / split);
          const int k1 = static_cast<int>(static_cast<int64_t>(c + 1) * K / split);
          fn(buf.data() + c * kRows * kGemmPanel, kGemmPanel, 16, x, K, wp, k0, k1, plan.limited);
        }
        for (int r = 0; r < rows; ++r)
          combine_row(dst + static_cast<int64_t>(r) * N, buf.data() + r * kGemmPanel,
                      &orders[static_cast<size_t>(mt - mb + r) * split], split, cols);
      }
    }
  }
}

}  // namespace

int gemm_row_tile() { return kRows; }

int64_t gemm_packed_size(int N, int K) {
  if (N <= 0 || K <= 0) return 0;
  const int full = N / kGemmPanel, rem = N % kGemmPanel;
  const int last = rem == 0 ? 0 : (rem <= 16 ? 16 : kGemmPanel);
  return (static_cast<int64_t>(full) * kGemmPanel + last) * K;
}

void gemm_pack(float* packed, const float* w, int N, int K) {
  for (int n0 = 0; n0 < N; n0 += kGemmPanel) {
    const int cols = std::min(kGemmPanel, N - n0);
    const int width = cols > 16 ? kGemmPanel : 16;
    float* dst = packed + static_cast<int64_t>(n0) * K;
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < width; ++j)
        dst[static_cast<int64_t>(k) * width + j] =
            j < cols ? w[static_cast<int64_t>(n0 + j) * K + k] : 0.0f;
  }
}

bool gemm_nan_free(const float* x, int64_t n) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(x);
  for (int64_t i0 = 0; i0 < n; i0 += 4096) {
    const int64_t i1 = std::min(n, i0 + 4096);
    uint32_t nan = 0;
    for (int64_t i = i0; i < i1; ++i) nan |= (u[i] & 0x7FFFFFFFu) > 0x7F800000u;
    if (nan) return false;
  }
  return true;
}

void gemm_chunk_order(int* order, const GemmReduce& red, int64_t m) {
  const int split = std::clamp(red.split, 1, kMaxSplit);
  for (int i = 0; i < split; ++i) order[i] = i;
  if (red.kind == OrderKind::reversed) {
    for (int i = 0; i < split; ++i) order[i] = split - 1 - i;
  } else if (red.kind == OrderKind::split_k) {
    Rng rng(rng_derive(red.key.seed, static_cast<uint64_t>(Stream::gemm_order),
                       {red.key.layer, red.key.site, red.key.call, static_cast<uint64_t>(m)}));
    rng.shuffle(order, split);
  }
}

void gemm_rows(float* out, const float* inp, const float* packed, int m0, int m1, int N, int K,
               const GemmReduce& red) {
  if (m1 <= m0 || N <= 0) return;
  const Plan plan = make_plan(red, K);
  compute_block(out, inp, packed, N, K, red, plan, m0, m1, 0,
                (N + kGemmPanel - 1) / kGemmPanel);
}

void gemm_forward(float* out, const float* inp, const float* packed, int M, int N, int K,
                  const GemmReduce& red) {
  if (M <= 0 || N <= 0) return;
  const Plan plan = make_plan(red, K);
  const int n_tiles = (M + kRows - 1) / kRows;
  const int n_panels = (N + kGemmPanel - 1) / kGemmPanel;
  const int64_t tile_work = static_cast<int64_t>(kRows) * kGemmPanel * std::max(K, 1);
  if (static_cast<int64_t>(n_tiles) * n_panels * tile_work < (1 << 17)) {
    compute_block(out, inp, packed, N, K, red, plan, 0, M, 0, n_panels);
    return;
  }
  // ≥ ~64k FMAs per task; whole rows of panels when there are enough row tiles to share.
  const int tile_grain = static_cast<int>(std::max<int64_t>(1, (1 << 16) / tile_work));
  const int panel_grain = n_tiles >= 16 ? n_panels : 1;
  tbb::parallel_for(tbb::blocked_range2d<int>(0, n_tiles, tile_grain, 0, n_panels, panel_grain),
                    [&](const tbb::blocked_range2d<int>& r) {
                      const int m_begin = r.rows().begin() * kRows;
                      const int m_end = std::min(M, r.rows().end() * kRows);
                      compute_block(out, inp, packed, N, K, red, plan, m_begin, m_end,
                                    r.cols().begin(), r.cols().end());
                    });
}

}  // namespace moerl::cpu
