// cpu/rmsnorm.cpp — RMSNorm, TBB over blocks of rows. Forward writes out and rstd with '=';
// backward accumulates dinp and dweight with '+='.
//
// Bit-exactness: every sum is the reference's sequential fma chain (ref/rmsnorm.cpp); speed comes
// from running 8 rows' chains side by side (independent accumulators, no reassociation) and from
// vectorising the element-wise passes. Under ReduceCtx{} the forward equals ref bit for bit; other
// orders follow row_order.h with the row stream rng_derive(key with call = key.call + row,
// Stream::norm_order). The backward has no order control and equals ref bit for bit: dinp per row,
// dweight per column block with rows summed in order n = 0..N-1 (no cross-thread reduction).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_RMSNORM_CPP_ONCE_
#define MOERL_KERNELS_CPU_RMSNORM_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/row_order.h"

#endif  // MOERL_KERNELS_CPU_RMSNORM_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rmsnorm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {
constexpr int kRows = 8;  // rows whose reductions run interleaved

// acc[r] = Σ x_ri² over i in [lo, hi) (from hi-1 down if rev) for the R consecutive rows at x, each
// one fma chain from 0; R independent chains keep the FMA units busy.
template <int R>
void sumsq_rows(float* acc, const float* x, int D, int lo, int hi, bool rev) {
  float a[R] = {};
  if (!rev) {
    for (int i = lo; i < hi; ++i)
      for (int r = 0; r < R; ++r) a[r] = std::fma(x[r * D + i], x[r * D + i], a[r]);
  } else {
    for (int i = hi - 1; i >= lo; --i)
      for (int r = 0; r < R; ++r) a[r] = std::fma(x[r * D + i], x[r * D + i], a[r]);
  }
  for (int r = 0; r < R; ++r) acc[r] = a[r];
}

// dot[r] = Σ_i (dy_ri·w_i)·x_ri for the R consecutive rows, each one fma chain from 0.
template <int R>
void gx_dot_rows(float* dot, const float* dy, const float* x, const float* w, int D) {
  float a[R] = {};
  for (int i = 0; i < D; ++i)
    for (int r = 0; r < R; ++r) a[r] = std::fma(dy[r * D + i] * w[i], x[r * D + i], a[r]);
  for (int r = 0; r < R; ++r) dot[r] = a[r];
}
}  // namespace

// out[N,D], rstd[N], inp[N,D], weight[D]
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                     float eps, const ReduceCtx& ctx) {
  const int S = RowOrder::split_for(ctx, N, D);
  const bool rev = ctx.order.kind == OrderKind::reversed;
  const int blocks = (N + kRows - 1) / kRows;
  tbb::parallel_for(tbb::blocked_range<int>(0, blocks), [&](const tbb::blocked_range<int>& br) {
    RowOrder order;
    std::vector<float> part(static_cast<size_t>(S) * kRows);  // [S, kRows] chunk partial sums
    for (int blk = br.begin(); blk < br.end(); ++blk) {
      const int64_t n0 = static_cast<int64_t>(blk) * kRows;
      const int R = std::min<int64_t>(kRows, N - n0);
      const float* x0 = inp + n0 * D;
      for (int c = 0; c < S; ++c) {
        const int lo = RowOrder::bound(c, D, S), hi = RowOrder::bound(c + 1, D, S);
        float* pc = part.data() + c * kRows;
        if (R == kRows) {
          sumsq_rows<kRows>(pc, x0, D, lo, hi, rev);
        } else {
          for (int r = 0; r < R; ++r) sumsq_rows<1>(pc + r, x0 + r * D, D, lo, hi, rev);
        }
      }
      for (int r = 0; r < R; ++r) {
        const int64_t n = n0 + r;
        float ss = part[r];
        if (S > 1) {
          NoiseKey row_key = ctx.key;
          row_key.call = ctx.key.call + static_cast<uint64_t>(n);
          order.set(D, S, ctx.order.kind, rng_derive(row_key, Stream::norm_order));
          ss = part[order.combine(0) * kRows + r];
          for (int i = 1; i < S; ++i) ss += part[order.combine(i) * kRows + r];
        }
        const float rs = 1.0f / std::sqrt(ss / static_cast<float>(D) + eps);
        const float* xr = x0 + r * D;
        float* y = out + n * D;
        for (int i = 0; i < D; ++i) y[i] = (xr[i] * rs) * weight[i];
        rstd[n] = rs;
      }
    }
  });
}

// dinp[N,D] +=, dweight[D] +=, dout[N,D], inp[N,D], weight[D], rstd[N] — formulas in ref/rmsnorm.cpp.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int D) {
  if (dinp) {
    const int blocks = (N + kRows - 1) / kRows;
    tbb::parallel_for(tbb::blocked_range<int>(0, blocks), [&](const tbb::blocked_range<int>& br) {
      for (int blk = br.begin(); blk < br.end(); ++blk) {
        const int64_t n0 = static_cast<int64_t>(blk) * kRows;
        const int R = std::min<int64_t>(kRows, N - n0);
        const float *x0 = inp + n0 * D, *dy0 = dout + n0 * D;
        float dot[kRows];  // Σ_j (dy_j·w_j)·x_j, one fma chain per row
        if (R == kRows) {
          gx_dot_rows<kRows>(dot, dy0, x0, weight, D);
        } else {
          for (int r = 0; r < R; ++r) gx_dot_rows<1>(dot + r, dy0 + r * D, x0 + r * D, weight, D);
        }
        for (int r = 0; r < R; ++r) {
          const float rs = rstd[n0 + r];
          const float coef = dot[r] * (rs * rs * rs) / static_cast<float>(D);
          const float *xr = x0 + r * D, *g = dy0 + r * D;
          float* dx = dinp + (n0 + r) * D;
          for (int i = 0; i < D; ++i) dx[i] += (g[i] * weight[i]) * rs - coef * xr[i];
        }
      }
    });
  }
  if (dweight) {
    constexpr int kCols = 64;  // a column block: whole cache lines, no false sharing
    const int blocks = (D + kCols - 1) / kCols;
    tbb::parallel_for(tbb::blocked_range<int>(0, blocks), [&](const tbb::blocked_range<int>& br) {
      for (int blk = br.begin(); blk < br.end(); ++blk) {
        const int lo = blk * kCols, hi = std::min(D, lo + kCols);
        for (int64_t n = 0; n < N; ++n) {
          const float rs = rstd[n];
          const float *xr = inp + n * D, *g = dout + n * D;
          for (int i = lo; i < hi; ++i) dweight[i] += g[i] * (xr[i] * rs);
        }
      }
    });
  }
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(rmsnorm_forward);
HWY_EXPORT(rmsnorm_backward);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D, float eps, const ReduceCtx& ctx) {
  HWY_DYNAMIC_DISPATCH(rmsnorm_forward)(out, rstd, inp, weight, N, D, eps, ctx);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight, const float* rstd, int N, int D) {
  HWY_DYNAMIC_DISPATCH(rmsnorm_backward)(dinp, dweight, dout, inp, weight, rstd, N, D);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
