// cpu/gemm.cpp — register-tiled forward GEMM with a controlled reduction order (see cpu/gemm.h).
// out is written with '='.
//
// Kernel: a tile of kRows rows × 32 (or 16) columns lives in zmm accumulators; for each k the
// tile loads one k-row of the packed weight panel and broadcasts x[m][k] of each row, one FMA
// per accumulator. An output element is therefore a single sequential FMA chain — the blocking
// only decides which chains run side by side, never how a chain is summed — so results do not
// depend on M, on the tiling or on the number of threads (no reduction crosses a task).
// The limited-precision accumulator has two kernels with the same bits: Veltkamp's splitting on
// 12-row × 16-column tiles (tile_veltkamp, used when the operands' exponent ranges exclude
// subnormal and overflowing intermediates) and the integer rounding on the tiles above (micro).
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

// ---- the limited accumulator by Veltkamp's splitting --------------------------------------------
// With C = 2^s + 1 (s = 23 − accum_bits), γ = fl(C·q) and hi = fl(γ + fl(q − γ)) is q rounded to
// 24 − s significant bits, to nearest with ties to even: exactly round_to_bits(q, accum_bits)
// (Dekker 1971, "A floating-point technique for extending the available precision"; Boldo 2006
// for the tie rule), provided C·q does not overflow and q is not subnormal — which the operand
// ranges guarantee (veltkamp_safe below). Four FP operations per product (FMA, MUL on one pair of
// Zen 4's FP pipes; SUB, ADD on the other) instead of an FMA and four integer operations: about
// twice the FP32 kernel's time instead of 3.5 times. Tiles are 12 rows × 16 columns (12 chains,
// one weight load and 12 broadcasts per step), which keeps both pipe pairs busy; every chunk of
// the call's split is walked inside one call, its FP32 partial stored once.
constexpr int kRowsV = 12;
constexpr int kColsV = 16;
static_assert(kRowsV * kColsV == kRows * kGemmPanel, "compute_block's buf holds either tile's partials");

// out + c·cstride + r·rstride receives chunk c's partial of tile row r (cols lanes; the rest of
// the 16 untouched). bounds[0..split] are the chunk bounds over k.
using VeltFn = void (*)(float* out, int64_t cstride, int64_t rstride, int cols, const float* x,
                        int64_t ldx, const float* wp, int ldw, const int* bounds, int split,
                        int run, float C);

#ifdef __AVX512F__
template <int R, bool Rev>
void tile_veltkamp(float* out, int64_t cstride, int64_t rstride, int cols, const float* x,
                   int64_t ldx, const float* wp, int ldw, const int* bounds, int split, int run,
                   float C) {
  const __m512 cv = _mm512_set1_ps(C);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  for (int c = 0; c < split; ++c) {
    const int k0 = bounds[c], k1 = bounds[c + 1], len = k1 - k0;
    __m512 acc[R];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int t0 = 0; t0 < len; t0 += run) {
      const int t1 = std::min(len, t0 + run);
      __m512 p[R];
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) p[r] = _mm512_setzero_ps();
      for (int t = t0; t < t1; ++t) {
        const int k = Rev ? k1 - 1 - t : k0 + t;
        const __m512 w = _mm512_loadu_ps(wp + static_cast<int64_t>(k) * ldw);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + k]), w, p[r]);
          const __m512 g = _mm512_mul_ps(q, cv);
          p[r] = _mm512_add_ps(g, _mm512_sub_ps(q, g));
        }
      }
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = _mm512_add_ps(acc[r], p[r]);
    }
    float* o = out + c * cstride;
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(o + r * rstride, mask, acc[r]);
  }
}
#else  // scalar: the same splitting, one column at a time
template <int R, bool Rev>
void tile_veltkamp(float* out, int64_t cstride, int64_t rstride, int cols, const float* x,
                   int64_t ldx, const float* wp, int ldw, const int* bounds, int split, int run,
                   float C) {
  for (int c = 0; c < split; ++c) {
    const int k0 = bounds[c], k1 = bounds[c + 1], len = k1 - k0;
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < cols; ++j) {
        float acc = 0.0f;
        for (int t0 = 0; t0 < len; t0 += run) {
          float p = 0.0f;
          for (int t = t0; t < std::min(len, t0 + run); ++t) {
            const int k = Rev ? k1 - 1 - t : k0 + t;
            const float q = std::fma(x[r * ldx + k], wp[static_cast<int64_t>(k) * ldw + j], p);
            const float g = q * C;
            p = g + (q - g);
          }
          acc = acc + p;
        }
        out[c * cstride + r * rstride + j] = acc;
      }
  }
}
#endif

struct VeltTable {
  VeltFn f[kRowsV][2];  // [rows−1][reversed]
};

template <int R>
void fill_velt(VeltTable& t) {
  t.f[R - 1][0] = &tile_veltkamp<R, false>;
  t.f[R - 1][1] = &tile_veltkamp<R, true>;
  if constexpr (R > 1) fill_velt<R - 1>(t);
}

const VeltTable& velt_table() {
  static const VeltTable t = [] {
    VeltTable m{};
    fill_velt<kRowsV>(m);
    return m;
  }();
  return t;
}

int ceil_log2(int64_t n) {
  int l = 0;
  while ((int64_t{1} << l) < n) ++l;
  return l;
}

// Whether Veltkamp's splitting is exact for every intermediate of a call whose operands have
// these exponent fields (x of the activations, w of the weights; lo over nonzero values, hi over
// all). Products x·w are multiples of 2^(ex + ew − 46) (ex, ew the unbiased exponents), and so is
// every rounded partial sum; with ex_lo + ew_lo ≥ −80 none is subnormal. |q| < K·2^(ex_hi+ew_hi+3)
// and C < 2^(s+1): with ceil(log2 K) + ex_hi + ew_hi + s + 4 ≤ 127, C·q stays below 2^128.
bool veltkamp_safe(int x_lo, int x_hi, int w_lo, int w_hi, int K, int shift) {
  if (x_lo == 255 || w_lo == 255) return x_hi < 255 && w_hi < 255;  // all products are zero
  return (x_lo - 127) + (w_lo - 127) >= -80 &&
         ceil_log2(K) + (x_hi - 127) + (w_hi - 127) + shift + 4 <= 127;
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
  bool veltkamp;  // limited accumulator, weight range known: blocks whose activations are in range
                  // take tile_veltkamp
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
  p.veltkamp = red.accum_bits >= 1 && red.accum_bits <= 22 && red.w_exp_lo >= 0 && red.w_exp_hi >= 0;
  return p;
}

// Rows per cache block: the block's activations (≤ ~64 KiB, or one tile for very long rows)
// stay in L1/L2 while every column panel of W sweeps over them, so each panel is fetched once per
// block rather than once per row tile. Blocking changes which chains run together, never a chain.
int block_rows_for(int K) {
  const int rows = (16384 / std::max(K, 1)) / kRows * kRows;
  return std::clamp(rows, kRows, 16 * kRows);
}

// dst row r (stride ldd), columns [0, cols) = part[o_r[0]][r] + part[o_r[1]][r] + … (left to
// right), o_r = orders + r·split, part laid out [split][kRowsV][16]. The rows' sums run side by
// side: independent chains, so the adds' latency overlaps.
void combine_rows16(float* dst, int64_t ldd, const float* part, const int* orders, int split,
                    int rows, int cols) {
#ifdef __AVX512F__
  __m512 sum[kRowsV];
  for (int r = 0; r < rows; ++r) sum[r] = _mm512_loadu_ps(part + (orders[r * split] * kRowsV + r) * kColsV);
  for (int i = 1; i < split; ++i)
    for (int r = 0; r < rows; ++r)
      sum[r] = _mm512_add_ps(sum[r], _mm512_loadu_ps(part + (orders[r * split + i] * kRowsV + r) * kColsV));
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(dst + r * ldd, mask, sum[r]);
#else
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j) {
      float sum = part[(orders[r * split] * kRowsV + r) * kColsV + j];
      for (int i = 1; i < split; ++i) sum = sum + part[(orders[r * split + i] * kRowsV + r) * kColsV + j];
      dst[r * ldd + j] = sum;
    }
#endif
}

// Rows [mb, me) × panels [p0, p1) by tile_veltkamp; xb = the block's (quantised) activations,
// orders[(m − mb)·split + i] the rows' chunk combine orders, part[split·kRowsV·16] scratch.
void veltkamp_block(float* out, const float* xb, const float* packed, int N, int K,
                    const Plan& plan, const int* orders, float* part, int mb, int me, int p0,
                    int p1) {
  const VeltTable& tab = velt_table();
  const int split = plan.split;
  int bounds[kMaxSplit + 1];
  for (int c = 0; c <= split; ++c) bounds[c] = static_cast<int>(static_cast<int64_t>(c) * K / split);
  const float C = static_cast<float>((1u << plan.limited.shift) + 1u);
  for (int p = p0; p < p1; ++p) {
    const int n0 = p * kGemmPanel;
    const int cols = std::min(kGemmPanel, N - n0);
    const int width = cols > 16 ? kGemmPanel : 16;  // the panel's k stride
    for (int h = 0; h * kColsV < cols; ++h) {
      const int hcols = std::min(kColsV, cols - h * kColsV);
      const float* wp = packed + static_cast<int64_t>(n0) * K + h * kColsV;
      for (int mt = mb; mt < me; mt += kRowsV) {
        const int rows = std::min(kRowsV, me - mt);
        const VeltFn fn = tab.f[rows - 1][plan.rev];
        const float* x = xb + static_cast<int64_t>(mt - mb) * K;
        float* dst = out + static_cast<int64_t>(mt) * N + n0 + h * kColsV;
        if (split == 1) {
          fn(dst, 0, N, hcols, x, K, wp, width, bounds, 1, plan.limited.run, C);
          continue;
        }
        fn(part, kRowsV * kColsV, kColsV, kColsV, x, K, wp, width, bounds, split, plan.limited.run, C);
        combine_rows16(dst, N, part, orders + static_cast<size_t>(mt - mb) * split, split, rows, hcols);
      }
    }
  }
}

// Rows [m_begin, m_end) × column panels [p0, p1) of the call.
void compute_block(float* out, const float* inp, const float* packed, int N, int K,
                   const GemmReduce& red, const Plan& plan, int m_begin, int m_end, int p0,
                   int p1) {
  const MicroTable& tab = micro_table();
  const int split = plan.split;
  const int block = block_rows_for(K);
  const bool quantise = red.act_format != Format::fp32;
  // Per-thread scratch that only grows: no allocation and no zeroing per call (small calls — an
  // expert's few rows in a decode step — are many).
  thread_local std::vector<float> buf;   // chunk partials of one tile [split][kRows][32] (or [split][kRowsV][16])
  thread_local std::vector<int> orders;  // chunk combine order of each row of the block [block][split]
  thread_local std::vector<float> xq;    // the block's quantised activations [block][K]
  auto reserve = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  if (split > 1) {
    reserve(buf, static_cast<size_t>(split) * kRows * kGemmPanel);
    reserve(orders, static_cast<size_t>(block) * split);
  }
  if (quantise) reserve(xq, static_cast<size_t>(std::min(block, m_end - m_begin)) * K);
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
    int acc_kind = plan.acc;
    if (plan.acc != 0 && red.w_exp_hi >= 0) {  // the weight's range is known: look at the block's
      int x_lo = 0, x_hi = 0;
      gemm_exp_range(xb, static_cast<int64_t>(me - mb) * K, &x_lo, &x_hi);
      if (plan.veltkamp && veltkamp_safe(x_lo, x_hi, red.w_exp_lo, red.w_exp_hi, K, plan.limited.shift)) {
        veltkamp_block(out, xb, packed, N, K, plan, orders.data(), buf.data(), mb, me, p0, p1);
        continue;
      }
      if (x_hi < 255 && red.w_exp_hi < 255) acc_kind = 1;  // no NaN (nor inf) in either operand
    }
    for (int p = p0; p < p1; ++p) {
      const int n0 = p * kGemmPanel;
      const int cols = std::min(kGemmPanel, N - n0);
      const int V = cols > 16 ? 2 : 1;
      const float* wp = packed + static_cast<int64_t>(n0) * K;
      for (int mt = mb; mt < me; mt += kRows) {
        const int rows = std::min(kRows, me - mt);
        const MicroFn fn = tab.f[rows - 1][V - 1][plan.rev][acc_kind];
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

int gemm_row_tile() { return kRowsV; }  // a multiple of both tiles' rows

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

void gemm_exp_range(const float* x, int64_t n, int* lo, int* hi) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(x);
  uint32_t l = 255, h = 0;
  int64_t i = 0;
#ifdef __AVX512F__
  // on the whole bits: the exponent field decides max/min of |x|'s bit patterns' top bits
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), none = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i vmax = _mm512_setzero_si512(), vmin = none;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(u + i), abs_mask);
    vmax = _mm512_max_epu32(vmax, a);
    vmin = _mm512_min_epu32(vmin, _mm512_mask_blend_epi32(_mm512_test_epi32_mask(a, a), none, a));
  }
  h = _mm512_reduce_max_epu32(vmax) >> 23;
  const uint32_t m = _mm512_reduce_min_epu32(vmin);
  l = m == 0x7FFFFFFFu ? 255 : m >> 23;
#endif
  for (; i < n; ++i) {
    const uint32_t a = u[i] & 0x7FFFFFFFu, e = a >> 23;
    h = std::max(h, e);
    l = std::min(l, a ? e : 255u);
  }
  *lo = static_cast<int>(l);
  *hi = static_cast<int>(h);
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
