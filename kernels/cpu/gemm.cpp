// cpu/gemm.cpp — register-tiled forward GEMM with a controlled reduction order (see cpu/gemm.h),
// written once over Google Highway and compiled for every target of kernels/simd_config.h; the
// best one the CPU supports runs (HWY_DYNAMIC_DISPATCH). out is written with '='.
//
// Kernel: a tile of kRows rows × 2 vectors of columns lives in accumulator registers (6 × 32 on
// AVX-512, 6 × 16 on AVX2, 6 × 8 on NEON/128-bit SVE); for each k the tile loads one k-row of the
// packed weight panel and broadcasts x[m][k] of each row, one fused multiply-add per accumulator.
// An output element is therefore a single sequential FMA chain — the vector width and the
// blocking only decide which chains run side by side, never how a chain is summed — so results do
// not depend on the target, on M, on the tiling or on the number of threads (no reduction crosses
// a lane or a task). The limited-precision accumulator has two kernels with the same bits:
// Veltkamp's splitting on 12-row × one-vector tiles (tile_veltkamp, used when the operands'
// exponent ranges exclude subnormal and overflowing intermediates) and the integer rounding on
// the tiles above (micro). The portable target ("scalar", Highway's SCALAR or EMU128) runs the same chains as plain
// std::fma loops.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_GEMM_ONCE_
#define MOERL_KERNELS_CPU_GEMM_ONCE_

#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <tbb/blocked_range2d.h>
#include <tbb/parallel_for.h>

#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl::cpu {

namespace gemm_detail {

constexpr int kRows = 6;        // rows per register tile of micro
constexpr int kRowsVMax = 12;   // rows per tile of tile_veltkamp
constexpr int kMaxSplit = 256;  // split_k:64 (the parse limit) × 4 (batch variance)

struct Limited {
  int shift = 0;  // 23 − accum_bits: low fraction bits cleared by the accumulator's rounding
  int run = 1;    // promote_every
};

struct Plan {
  int split;
  bool rev;
  int acc;  // micro's Acc
  Limited limited;
  bool veltkamp;  // limited accumulator, weight range known: blocks whose activations are in range
                  // take tile_veltkamp
};

inline Plan make_plan(const GemmReduce& red, int K) {
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

inline int ceil_log2(int64_t n) {
  int l = 0;
  while ((int64_t{1} << l) < n) ++l;
  return l;
}

// ---- the limited accumulator by Veltkamp's splitting --------------------------------------------
// With C = 2^s + 1 (s = 23 − accum_bits), γ = fl(C·q) and hi = fl(γ + fl(q − γ)) is q rounded to
// 24 − s significant bits, to nearest with ties to even: exactly round_to_bits(q, accum_bits)
// (Dekker 1971, "A floating-point technique for extending the available precision"; Boldo 2006
// for the tie rule), provided C·q does not overflow and q is not subnormal — which the operand
// ranges guarantee (veltkamp_safe below). Four FP operations per product (FMA, MUL, SUB, ADD)
// instead of an FMA and four integer operations: about twice the FP32 kernel's time instead of
// 3.5 times. Every chunk of the call's split is walked inside one call, its FP32 partial stored
// once.
//
// Whether Veltkamp's splitting is exact for every intermediate of a call whose operands have
// these exponent fields (x of the activations, w of the weights; lo over nonzero values, hi over
// all). Products x·w are multiples of 2^(ex + ew − 46) (ex, ew the unbiased exponents), and so is
// every rounded partial sum; with ex_lo + ew_lo ≥ −80 none is subnormal. |q| < K·2^(ex_hi+ew_hi+3)
// and C < 2^(s+1): with ceil(log2 K) + ex_hi + ew_hi + s + 4 ≤ 127, C·q stays below 2^128.
inline bool veltkamp_safe(int x_lo, int x_hi, int w_lo, int w_hi, int K, int shift) {
  if (x_lo == 255 || w_lo == 255) return x_hi < 255 && w_hi < 255;  // all products are zero
  return (x_lo - 127) + (w_lo - 127) >= -80 &&
         ceil_log2(K) + (x_hi - 127) + (w_hi - 127) + shift + 4 <= 127;
}

// Rows per cache block: the block's activations (≤ ~64 KiB, or one tile for very long rows)
// stay in L1/L2 while every column panel of W sweeps over them, so each panel is fetched once per
// block rather than once per row tile. Blocking changes which chains run together, never a chain.
inline int block_rows_for(int K) {
  const int rows = (16384 / std::max(K, 1)) / kRows * kRows;
  return std::clamp(rows, kRows, 16 * kRows);
}

}  // namespace gemm_detail

}  // namespace moerl::cpu

#endif  // MOERL_KERNELS_CPU_GEMM_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

using namespace gemm_detail;

namespace {

// c[rows, cols) (row stride ldc) ← the chains of x[rows, ·] (row stride ldx) with the panel
// wp[K][W] over k in [k0, k1); columns cols..W-1 are computed (on the panel's zero padding) or
// skipped, never stored.
using MicroFn = void (*)(float* c, int64_t ldc, int cols, const float* x, int64_t ldx,
                         const float* wp, int W, int k0, int k1, const Limited& lim);

#if !MOERL_SIMD_SCALAR

// Vector round_to_bits (precision.cpp): the same integer steps — add half − 1, plus the lowest
// kept bit (ties to even), clear the dropped bits. NaN needs care only when its payload could
// carry into the sign bit: NanSafe passes every NaN through unchanged. Without it the steps are
// still exact for every NaN the accumulator can produce from NaN-free operands (the default NaN
// 0xFFC00000 has no low payload bits, so it rounds to itself), and the compare/blend pair costs
// ~35% of the kernel.
struct RoundV {
  using DU = hn::RebindToUnsigned<DF>;
  hn::Vec<DU> half_m1, one, clear;
  int shift;
  explicit RoundV(int s) : shift(s) {
    const DU du;
    half_m1 = hn::Set(du, s ? (1u << (s - 1)) - 1u : 0u);
    one = hn::Set(du, s ? 1u : 0u);
    clear = hn::Set(du, ~((1u << s) - 1u));
  }
};

template <bool NanSafe>
HWY_INLINE VF round_bits_v(VF p, const RoundV& c) {
  const DF d;
  const RoundV::DU du;
  const auto u = hn::BitCast(du, p);
  const auto lsb = hn::And(hn::ShiftRightSame(u, c.shift), c.one);
  const auto r = hn::And(hn::Add(hn::Add(u, c.half_m1), lsb), c.clear);
  if constexpr (NanSafe) return hn::IfThenElse(hn::IsNaN(p), p, hn::BitCast(d, r));
  return hn::BitCast(d, r);
}

// Acc: 0 = FP32 chains, 1 = limited accumulator (NaN-free operands), 2 = limited, NaN-safe.
// V vectors of L lanes per tile row; the panel's W columns are walked in sub-tiles of V·L.
template <int R, int V, bool Rev, int Acc>
void micro(float* c, int64_t ldc, int cols, const float* x, int64_t ldx, const float* wp, int W,
           int k0, int k1, const Limited& lim) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const int len = k1 - k0;
  for (int j0 = 0; j0 < cols; j0 += V * L) {
    const float* wj = wp + j0;
    VF acc[R][V];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
    if constexpr (Acc == 0) {
      for (int t = 0; t < len; ++t) {
        const int k = Rev ? k1 - 1 - t : k0 + t;
        const float* wk = wj + static_cast<int64_t>(k) * W;
        VF w[V];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) w[v] = hn::LoadU(d, wk + v * L);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const VF b = hn::Set(d, x[r * ldx + k]);
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) acc[r][v] = MulAddExact(d, b, w[v], acc[r][v]);
        }
      }
    } else {
      const RoundV rc(lim.shift);
      for (int t0 = 0; t0 < len; t0 += lim.run) {
        const int t1 = std::min(len, t0 + lim.run);
        VF p[R][V];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) p[r][v] = hn::Zero(d);
        for (int t = t0; t < t1; ++t) {
          const int k = Rev ? k1 - 1 - t : k0 + t;
          const float* wk = wj + static_cast<int64_t>(k) * W;
          VF w[V];
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) w[v] = hn::LoadU(d, wk + v * L);
#pragma GCC unroll 16
          for (int r = 0; r < R; ++r) {
            const VF b = hn::Set(d, x[r * ldx + k]);
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v)
              p[r][v] = round_bits_v<Acc == 2>(MulAddExact(d, b, w[v], p[r][v]), rc);
          }
        }
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) acc[r][v] = hn::Add(acc[r][v], p[r][v]);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        StoreFirst(d, acc[r][v], static_cast<size_t>(std::max(0, cols - j0 - v * L)),
                   c + r * ldc + j0 + v * L);
  }
}

#else  // portable target: the same chains, one column at a time

template <int R, int V, bool Rev, int Acc>
void micro(float* c, int64_t ldc, int cols, const float* x, int64_t ldx, const float* wp, int W,
           int k0, int k1, const Limited& lim) {
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

// Vectors per sub-tile of a panel W columns wide: two, unless the panel is one vector wide.
int micro_vectors(int W) { return W >= 2 * static_cast<int>(hn::Lanes(DF())) ? 2 : 1; }

// tile_veltkamp's rows: 12 independent chains, enough to hide the four dependent operations of
// each step. On AVX2's 16 registers the chains' FP32 sums (touched once per run) spill, the runs
// stay in registers: 6 rows there took 40% more time (latency-bound).
constexpr int kRowsV = kRowsVMax;

// out + c·cstride + r·rstride receives chunk c's partial of tile row r (cols lanes of one vector
// at wp's columns; the rest untouched). bounds[0..split] are the chunk bounds over k.
using VeltFn = void (*)(float* out, int64_t cstride, int64_t rstride, int cols, const float* x,
                        int64_t ldx, const float* wp, int ldw, const int* bounds, int split,
                        int run, float C);

template <int R, bool Rev>
void tile_veltkamp(float* out, int64_t cstride, int64_t rstride, int cols, const float* x,
                   int64_t ldx, const float* wp, int ldw, const int* bounds, int split, int run,
                   float C) {
#if !MOERL_SIMD_SCALAR
  const DF d;
  const VF cv = hn::Set(d, C);
  for (int c = 0; c < split; ++c) {
    const int k0 = bounds[c], k1 = bounds[c + 1], len = k1 - k0;
    VF acc[R];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
    for (int t0 = 0; t0 < len; t0 += run) {
      const int t1 = std::min(len, t0 + run);
      VF p[R];
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) p[r] = hn::Zero(d);
      for (int t = t0; t < t1; ++t) {
        const int k = Rev ? k1 - 1 - t : k0 + t;
        const VF w = hn::LoadU(d, wp + static_cast<int64_t>(k) * ldw);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const VF q = MulAddExact(d, hn::Set(d, x[r * ldx + k]), w, p[r]);
          const VF g = hn::Mul(q, cv);
          p[r] = hn::Add(g, hn::Sub(q, g));
        }
      }
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r] = hn::Add(acc[r], p[r]);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) StoreFirst(d, acc[r], static_cast<size_t>(cols), out + c * cstride + r * rstride);
  }
#else
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
#endif
}

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

// dst[0..cols) = part[order[0]] + part[order[1]] + ... (left to right), where chunk c's
// partial sums of this row start at part + c·stride.
void combine_row(float* dst, const float* part, int64_t stride, const int* order, int split, int cols) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  for (int j = 0; j < cols; j += L) {
    VF s = hn::LoadU(d, part + order[0] * stride + j);
    for (int i = 1; i < split; ++i) s = hn::Add(s, hn::LoadU(d, part + order[i] * stride + j));
    StoreFirst(d, s, static_cast<size_t>(cols - j), dst + j);
  }
}

// dst row r (stride ldd), columns [0, cols) = part[o_r[0]][r] + part[o_r[1]][r] + … (left to
// right), o_r = orders + r·split, part laid out [split][kRowsV][L]. The rows' sums run side by
// side: independent chains, so the adds' latency overlaps.
void combine_rows_v(float* dst, int64_t ldd, const float* part, const int* orders, int split,
                    int rows, int cols) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  VF sum[kRowsV];
  for (int r = 0; r < rows; ++r) sum[r] = hn::LoadU(d, part + (orders[r * split] * kRowsV + r) * L);
  for (int i = 1; i < split; ++i)
    for (int r = 0; r < rows; ++r)
      sum[r] = hn::Add(sum[r], hn::LoadU(d, part + (orders[r * split + i] * kRowsV + r) * L));
  for (int r = 0; r < rows; ++r) StoreFirst(d, sum[r], static_cast<size_t>(cols), dst + r * ldd);
}

// Rows [mb, me) × panels [p0, p1) by tile_veltkamp; xb = the block's (quantised) activations,
// orders[(m − mb)·split + i] the rows' chunk combine orders, part[split·kRowsV·L] scratch.
void veltkamp_block(float* out, const float* xb, const float* packed, int N, int K,
                    const Plan& plan, const int* orders, float* part, int mb, int me, int p0,
                    int p1) {
  const VeltTable& tab = velt_table();
  const int L = static_cast<int>(hn::Lanes(DF()));
  const int split = plan.split;
  int bounds[kMaxSplit + 1];
  for (int c = 0; c <= split; ++c) bounds[c] = static_cast<int>(static_cast<int64_t>(c) * K / split);
  const float C = static_cast<float>((1u << plan.limited.shift) + 1u);
  for (int p = p0; p < p1; ++p) {
    const int n0 = p * kGemmPanel;
    const int cols = std::min(kGemmPanel, N - n0);
    const int width = cols > 16 ? kGemmPanel : 16;  // the panel's k stride
    for (int j0 = 0; j0 < cols; j0 += L) {
      const int vcols = std::min(L, cols - j0);
      const float* wp = packed + static_cast<int64_t>(n0) * K + j0;
      for (int mt = mb; mt < me; mt += kRowsV) {
        const int rows = std::min(kRowsV, me - mt);
        const VeltFn fn = tab.f[rows - 1][plan.rev];
        const float* x = xb + static_cast<int64_t>(mt - mb) * K;
        float* dst = out + static_cast<int64_t>(mt) * N + n0 + j0;
        if (split == 1) {
          fn(dst, 0, N, vcols, x, K, wp, width, bounds, 1, plan.limited.run, C);
          continue;
        }
        fn(part, static_cast<int64_t>(kRowsV) * L, L, L, x, K, wp, width, bounds, split,
           plan.limited.run, C);
        combine_rows_v(dst, N, part, orders + static_cast<size_t>(mt - mb) * split, split, rows, vcols);
      }
    }
  }
}

}  // namespace

// *lo = lowest exponent field of the nonzero elements of x[0..n) (255 when none), *hi = highest.
void ExpRange(const float* x, int64_t n, int* lo, int* hi) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(x);
  uint32_t l = 255, h = 0;
  int64_t i = 0;
#if !MOERL_SIMD_SCALAR
  // on the whole bits: the exponent field decides max/min of |x|'s bit patterns' top bits
  const hn::RebindToUnsigned<DF> du;
  const int64_t L = static_cast<int64_t>(hn::Lanes(du));
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu), none = hn::Set(du, 0x7FFFFFFFu);
  auto vmax = hn::Zero(du), vmin = none;
  for (; i + L <= n; i += L) {
    const auto a = hn::And(hn::LoadU(du, u + i), abs_mask);
    vmax = hn::Max(vmax, a);
    vmin = hn::Min(vmin, hn::IfThenElse(hn::Eq(a, hn::Zero(du)), none, a));
  }
  h = hn::GetLane(hn::MaxOfLanes(du, vmax)) >> 23;
  const uint32_t m = hn::GetLane(hn::MinOfLanes(du, vmin));
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

// Rows [m_begin, m_end) × column panels [p0, p1) of the call.
void ComputeBlock(float* out, const float* inp, const float* packed, int N, int K,
                  const GemmReduce& red, const Plan& plan, int m_begin, int m_end, int p0, int p1) {
  const MicroTable& tab = micro_table();
  const int split = plan.split;
  const int block = block_rows_for(K);
  const bool quantise = red.act_format != Format::fp32;
  // Per-thread scratch that only grows: no allocation and no zeroing per call (small calls — an
  // expert's few rows in a decode step — are many).
  thread_local std::vector<float> buf;   // chunk partials of one tile [split][kRows][32] (or [split][kRowsV][L])
  thread_local std::vector<int> orders;  // chunk combine order of each row of the block [block][split]
  thread_local std::vector<float> xq;    // the block's quantised activations [block][K]
  auto reserve = [](auto& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  if (split > 1) {
    reserve(buf, static_cast<size_t>(split) * std::max(kRows * kGemmPanel, kRowsVMax * 16));
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
      gemm_chunk_orders(orders.data(), red, split, mb, me);
    int acc_kind = plan.acc;
    if (plan.acc != 0 && red.w_exp_hi >= 0) {  // the weight's range is known: look at the block's
      int x_lo = 0, x_hi = 0;
      ExpRange(xb, static_cast<int64_t>(me - mb) * K, &x_lo, &x_hi);
      if (plan.veltkamp && veltkamp_safe(x_lo, x_hi, red.w_exp_lo, red.w_exp_hi, K, plan.limited.shift)) {
        veltkamp_block(out, xb, packed, N, K, plan, orders.data(), buf.data(), mb, me, p0, p1);
        continue;
      }
      if (x_hi < 255 && red.w_exp_hi < 255) acc_kind = 1;  // no NaN (nor inf) in either operand
    }
    for (int p = p0; p < p1; ++p) {
      const int n0 = p * kGemmPanel;
      const int cols = std::min(kGemmPanel, N - n0);
      const int W = cols > 16 ? kGemmPanel : 16;
      const int V = micro_vectors(W);
      const float* wp = packed + static_cast<int64_t>(n0) * K;
      for (int mt = mb; mt < me; mt += kRows) {
        const int rows = std::min(kRows, me - mt);
        const MicroFn fn = tab.f[rows - 1][V - 1][plan.rev][acc_kind];
        const float* x = xb + static_cast<int64_t>(mt - mb) * K;
        float* dst = out + static_cast<int64_t>(mt) * N + n0;
        if (split == 1) {
          fn(dst, N, cols, x, K, wp, W, 0, K, plan.limited);
          continue;
        }
        for (int c = 0; c < split; ++c) {
          const int k0 = static_cast<int>(static_cast<int64_t>(c) * K / split);
          const int k1 = static_cast<int>(static_cast<int64_t>(c + 1) * K / split);
          fn(buf.data() + c * kRows * kGemmPanel, kGemmPanel, W, x, K, wp, W, k0, k1, plan.limited);
        }
        for (int r = 0; r < rows; ++r)
          combine_row(dst + static_cast<int64_t>(r) * N, buf.data() + r * kGemmPanel, kRows * kGemmPanel,
                      &orders[static_cast<size_t>(mt - mb + r) * split], split, cols);
      }
    }
  }
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

using namespace gemm_detail;

HWY_EXPORT(ExpRange);
HWY_EXPORT(ComputeBlock);

int gemm_row_tile() { return kRowsVMax; }  // a multiple of every target's tile rows

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
  HWY_DYNAMIC_DISPATCH(ExpRange)(x, n, lo, hi);
}

void gemm_chunk_orders(int* orders, const GemmReduce& red, int split, int64_t m0, int64_t m1) {
  split = std::clamp(split, 1, kMaxSplit);
  // the call's part of each row's stream, derived once: row m's is rng_derive(…, {layer, site, call, m})
  const uint64_t call = red.kind == OrderKind::split_k
                            ? rng_derive(red.key.seed, static_cast<uint64_t>(Stream::gemm_order),
                                         {red.key.layer, red.key.site, red.key.call})
                            : 0;
  for (int64_t m = m0; m < m1; ++m) {
    int* order = orders + (m - m0) * split;
    for (int i = 0; i < split; ++i) order[i] = red.kind == OrderKind::reversed ? split - 1 - i : i;
    if (red.kind == OrderKind::split_k) {
      Rng rng(rng_derive_extend(call, static_cast<uint64_t>(m)));
      rng.shuffle(order, split);
    }
  }
}

void gemm_chunk_order(int* order, const GemmReduce& red, int64_t m) {
  gemm_chunk_orders(order, red, red.split, m, m + 1);
}

void gemm_rows(float* out, const float* inp, const float* packed, int m0, int m1, int N, int K,
               const GemmReduce& red) {
  if (m1 <= m0 || N <= 0) return;
  const Plan plan = make_plan(red, K);
  HWY_DYNAMIC_DISPATCH(ComputeBlock)(out, inp, packed, N, K, red, plan, m0, m1, 0,
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
    HWY_DYNAMIC_DISPATCH(ComputeBlock)(out, inp, packed, N, K, red, plan, 0, M, 0, n_panels);
    return;
  }
  // ≥ ~64k FMAs per task; whole rows of panels when there are enough row tiles to share.
  const int tile_grain = static_cast<int>(std::max<int64_t>(1, (1 << 16) / tile_work));
  const int panel_grain = n_tiles >= 16 ? n_panels : 1;
  tbb::parallel_for(tbb::blocked_range2d<int>(0, n_tiles, tile_grain, 0, n_panels, panel_grain),
                    [&](const tbb::blocked_range2d<int>& r) {
                      const int m_begin = r.rows().begin() * kRows;
                      const int m_end = std::min(M, r.rows().end() * kRows);
                      HWY_DYNAMIC_DISPATCH(ComputeBlock)(out, inp, packed, N, K, red, plan,
                                                         m_begin, m_end, r.cols().begin(),
                                                         r.cols().end());
                    });
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
