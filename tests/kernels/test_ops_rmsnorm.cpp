// test_ops_rmsnorm.cpp — RMSNorm: cpu vs ref (bit-exact for ReduceCtx{} and for the backward),
// finite differences on the reference backward, reduction orders, noise keys, batch variance.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::bit_diffs;
using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

constexpr float kNormEps = 1e-5f;
const int kRowsGrid[] = {1, 3, 17, 100};
const int kWidthGrid[] = {1, 5, 64, 130};

ReduceCtx make_ctx(OrderKind kind, int split, uint64_t seed = 3, bool batch_invariant = true) {
  ReduceCtx ctx;
  ctx.order.kind = kind;
  ctx.order.split = split;
  ctx.batch_invariant = batch_invariant;
  ctx.key.seed = seed;
  ctx.key.layer = 1;
  ctx.key.site = 4;
  ctx.key.call = 5;
  return ctx;
}

struct Result {
  std::vector<float> out, rstd;
};

Result run_cpu(const std::vector<float>& x, const std::vector<float>& w, int N, int D,
               const ReduceCtx& ctx) {
  Result r{std::vector<float>(static_cast<size_t>(N) * D, -1.0f), std::vector<float>(N, -1.0f)};
  cpu::rmsnorm_forward(r.out.data(), r.rstd.data(), x.data(), w.data(), N, D, kNormEps, ctx);
  return r;
}
Result run_ref(const std::vector<float>& x, const std::vector<float>& w, int N, int D) {
  Result r{std::vector<float>(static_cast<size_t>(N) * D, -1.0f), std::vector<float>(N, -1.0f)};
  ref::rmsnorm_forward(r.out.data(), r.rstd.data(), x.data(), w.data(), N, D, kNormEps);
  return r;
}

TEST(OpsRmsnorm, ForwardCpuEqualsRefBitwise) {
  for (int N : kRowsGrid)
    for (int D : kWidthGrid) {
      auto x = normals(static_cast<size_t>(N) * D, 1, N, D, 3.0f);
      auto w = normals(D, 2, D);
      Result r = run_ref(x, w, N, D), c = run_cpu(x, w, N, D, ReduceCtx{});
      const std::string what = label("N%d D%d", N, D);
      expect_bits(r.out, c.out, label("out %s", what.c_str()));
      expect_bits(r.rstd, c.rstd, label("rstd %s", what.c_str()));
      // Sanity of the reference itself: rstd ≈ 1/rms in double.
      for (int n = 0; n < N; ++n) {
        double ss = 0.0;
        for (int i = 0; i < D; ++i) ss += static_cast<double>(x[n * D + i]) * x[n * D + i];
        ASSERT_NEAR(r.rstd[n], 1.0 / std::sqrt(ss / D + kNormEps), 1e-5 * r.rstd[n]) << what;
      }
    }
}

// Reordering a sum of D positive squares changes it by ≤ D·eps relative; rstd moves by half of
// that (+2 roundings) and out = x·rstd·w inherits it (+2 roundings): |Δ| ≤ |ref|·(D + 4)·eps.
TEST(OpsRmsnorm, ReorderedWithinToleranceOfFixed) {
  const int N = 100, D = 130;
  auto x = normals(N * D, 3, N, D, 3.0f);
  auto w = normals(D, 4, D);
  Result r = run_ref(x, w, N, D);
  for (ReduceCtx ctx : {make_ctx(OrderKind::reversed, 1), make_ctx(OrderKind::split_k, 4),
                        make_ctx(OrderKind::split_k, 64)}) {
    Result c = run_cpu(x, w, N, D, ctx);
    const std::string name = reduce_order_name(ctx.order);
    expect_close(r.out, c.out, 0.0, (D + 4) * kEps, label("out %s", name.c_str()));
    expect_close(r.rstd, c.rstd, 0.0, (D + 4) * kEps, label("rstd %s", name.c_str()));
    EXPECT_GT(bit_diffs(r.rstd, c.rstd), 0u) << name << " should change some rstd bits";
  }
}

TEST(OpsRmsnorm, SplitOrderIsKeyedAndReproducible) {
  const int N = 100, D = 130;
  auto x = normals(N * D, 5, N, D);
  auto w = normals(D, 6, D);
  Result a = run_cpu(x, w, N, D, make_ctx(OrderKind::split_k, 4, 3));
  Result b = run_cpu(x, w, N, D, make_ctx(OrderKind::split_k, 4, 3));
  Result c = run_cpu(x, w, N, D, make_ctx(OrderKind::split_k, 4, 9));
  EXPECT_EQ(bit_diffs(a.out, b.out), 0u);
  EXPECT_EQ(bit_diffs(a.rstd, b.rstd), 0u);
  EXPECT_GT(bit_diffs(a.rstd, c.rstd), 0u) << "another seed should draw other chunk orders";
  // The row entity is key.call + row: rows 1.. of a call at call = 5 are rows 0.. of a call at 6.
  ReduceCtx shifted = make_ctx(OrderKind::split_k, 4, 3);
  shifted.key.call += 1;
  std::vector<float> x_tail(x.begin() + D, x.end());
  Result d = run_cpu(x_tail, w, N - 1, D, shifted);
  EXPECT_EQ(bit_diffs(a.rstd.data() + 1, d.rstd.data(), N - 1), 0u);
}

// 40 rows alone (< 64 rows → more chunks when batch-variant) vs the same rows in a 600-row call.
TEST(OpsRmsnorm, BatchVarianceOnlyWhenRequested) {
  const int D = 130, few = 40, many = 600;
  auto x = normals(static_cast<size_t>(many) * D, 7, many, D);
  auto w = normals(D, 8, D);
  std::vector<float> x_few(x.begin(), x.begin() + static_cast<size_t>(few) * D);
  for (bool invariant : {true, false}) {
    for (OrderKind kind : {OrderKind::fixed, OrderKind::split_k}) {
      ReduceCtx ctx = make_ctx(kind, kind == OrderKind::split_k ? 2 : 1, 3, invariant);
      Result a = run_cpu(x_few, w, few, D, ctx), b = run_cpu(x, w, many, D, ctx);
      const size_t d = bit_diffs(a.rstd.data(), b.rstd.data(), few);
      if (invariant)
        EXPECT_EQ(d, 0u);
      else
        EXPECT_GT(d, 0u);
    }
  }
}

TEST(OpsRmsnorm, BackwardCpuEqualsRefBitwise) {
  for (int N : kRowsGrid)
    for (int D : kWidthGrid) {
      auto x = normals(static_cast<size_t>(N) * D, 10, N, D, 2.0f);
      auto w = normals(D, 11, D);
      Result r = run_ref(x, w, N, D);
      auto dout = normals(x.size(), 12, N, D);
      // Non-zero initial gradients: both must accumulate with '+='.
      auto dx_r = normals(x.size(), 13, N, D), dw_r = normals(D, 14, D);
      auto dx_c = dx_r, dw_c = dw_r;
      ref::rmsnorm_backward(dx_r.data(), dw_r.data(), dout.data(), x.data(), w.data(),
                            r.rstd.data(), N, D);
      cpu::rmsnorm_backward(dx_c.data(), dw_c.data(), dout.data(), x.data(), w.data(),
                            r.rstd.data(), N, D);
      const std::string what = label("N%d D%d", N, D);
      expect_bits(dx_r, dx_c, label("dinp %s", what.c_str()));
      expect_bits(dw_r, dw_c, label("dweight %s", what.c_str()));
      // Null gradient pointers are skipped.
      cpu::rmsnorm_backward(nullptr, dw_c.data(), dout.data(), x.data(), w.data(), r.rstd.data(), N, D);
      cpu::rmsnorm_backward(dx_c.data(), nullptr, dout.data(), x.data(), w.data(), r.rstd.data(), N, D);
    }
}

TEST(OpsRmsnorm, BackwardMatchesFiniteDifferences) {
  for (auto [N, D] : {std::pair{1, 1}, std::pair{3, 5}, std::pair{17, 64}}) {
    auto x = normals(static_cast<size_t>(N) * D, 20, N, D);
    auto wt = normals(D, 21, D);
    auto wj = normals(x.size(), 22, N, D);  // objective weights
    Result r = run_ref(x, wt, N, D);
    std::vector<float> dx(x.size(), 0.0f), dw(D, 0.0f);
    ref::rmsnorm_backward(dx.data(), dw.data(), wj.data(), x.data(), wt.data(), r.rstd.data(), N, D);
    auto J = [&] { return test_ops::weighted_sum(wj, run_ref(x, wt, N, D).out); };
    const std::string what = label("N%d D%d", N, D);
    test_ops::check_grad(x, dx, J, label("dinp %s", what.c_str()));
    test_ops::check_grad(wt, dw, J, label("dweight %s", what.c_str()));
  }
}

}  // namespace
}  // namespace moerl
