// test_hd_rows.cpp — the CUDA backend's row ops (RMSNorm, softmax, log-softmax, softmax backward,
// log-prob) composed on the CPU from the MOERL_HD functions exactly as kernels/cuda/ops.cu's
// kernels compose them (per-thread chains, then the tree of hd/reduce.h; hd_compose.h), against
// kernels/ref.
// Only the reduction order differs from the references (and, on a GPU, expf/logf), so each
// comparison's tolerance is the FP32 error bound of an n-term sum in two orders, 2n·u relative to
// the sum of the terms' magnitudes (u = 2^-24), carried through the formula that uses it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "hd_compose.h"
#include "kernels/ref/ops.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

constexpr int T = kRowThreads;
const int kWidths[] = {1, 7, 129, 300, 1029};

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(HdRows, RmsnormForwardMatchesRef) {
  const int N = 5;
  for (int D : kWidths) {
    const auto x = normals(static_cast<size_t>(N) * D, 10, D), w = normals(D, 11, D);
    std::vector<float> out(x.size()), rstd(N), out_ref(x.size()), rstd_ref(N);
    hd_compose::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f);
    ref::rmsnorm_forward(out_ref.data(), rstd_ref.data(), x.data(), w.data(), N, D, 1e-5f);
    // ss differs by ≤ 2D·u relative (positive terms); rstd takes half of it plus 3 roundings,
    // out two more roundings.
    expect_close(rstd_ref, rstd, 0.0, (D + 6) * kEps, label("rstd D=%d", D));
    expect_close(out_ref, out, 0.0, (D + 8) * kEps, label("out D=%d", D));
  }
}

TEST(HdRows, RmsnormBackwardMatchesRef) {
  const int N = 6;
  for (int D : kWidths) {
    const auto x = normals(static_cast<size_t>(N) * D, 12, D), w = normals(D, 13, D);
    const auto dy = normals(x.size(), 14, D);
    std::vector<float> out(x.size()), rstd(N);
    ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f);
    auto dinp = normals(x.size(), 15, D), dw = normals(D, 16, D);  // '+=' onto these
    auto dinp_ref = dinp, dw_ref = dw;
    hd_compose::rmsnorm_backward(dinp.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);
    ref::rmsnorm_backward(dinp_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(),
                          rstd.data(), N, D);
    // dweight: rows added in the reference's order → the same bits.
    expect_bits(dw_ref, dw, label("dweight D=%d", D));
    // dinp: Σ(dy·w)·x has terms of both signs; its order error (≤ 2D·u·Σ|terms|) reaches dx
    // through coef·x, bounded relative to the tensor's scale; plus a few roundings per element.
    expect_close(dinp_ref, dinp, 2.0 * D * kEps * max_abs(dinp_ref), 8 * kEps,
                 label("dinp D=%d", D));
  }
}

// ---- softmax family (ops.cu: softmax_*_kernel, logprob_*_kernel) ------------------------------
float row_max_of(const float* x, int C) {
  float part[T];
  for (int t = 0; t < T; ++t) part[t] = hd_chain_max(x, C, t, T);
  return hd_tree_max(part, T);
}

TEST(HdRows, SoftmaxFamilyMatchesRef) {
  const int N = 4;
  for (int C : kWidths) {
    const auto x = normals(static_cast<size_t>(N) * C, 20, C, 0, 3.0f);
    const auto dy = normals(x.size(), 21, C);
    std::vector<float> p(x.size()), lp(x.size()), p_ref(x.size()), lp_ref(x.size());
    auto dx = normals(x.size(), 22, C);
    for (int64_t n = 0; n < N; ++n) {
      const float* xr = x.data() + n * C;
      float* y = p.data() + n * C;
      const float m = row_max_of(xr, C);
      for (int j = 0; j < C; ++j) y[j] = hd_softmax_exp(xr[j], m);
      const float sum = hd_row_sum(y, C);
      for (int j = 0; j < C; ++j) y[j] = hd_softmax_prob(y[j], sum);
      const float lse = hd_log(hd_row_sum_exp(xr, m, C));
      for (int j = 0; j < C; ++j) lp[n * C + j] = hd_log_softmax(xr[j], m, lse);
    }
    ref::softmax_forward(p_ref.data(), x.data(), N, C);
    ref::log_softmax_forward(lp_ref.data(), x.data(), N, C);
    // p = e/sum: sum's relative order error 2C·u plus 2 roundings.
    expect_close(p_ref, p, 0.0, (2 * C + 4) * kEps, label("softmax C=%d", C));
    // log(sum) turns sum's relative error into an absolute one; 3 roundings of y.
    expect_close(lp_ref, lp, (2 * C + 2) * kEps, 4 * kEps, label("log_softmax C=%d", C));

    auto dx_ref = dx;
    hd_compose::softmax_backward(dx.data(), dy.data(), p_ref.data(), N, C);
    double pg = 0.0;  // max over rows of Σ|p·dy|
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int j = 0; j < C; ++j) s += std::fabs(p_ref[n * C + j] * dy[n * C + j]);
      pg = std::max(pg, s);
    }
    ref::softmax_backward(dx_ref.data(), dy.data(), p_ref.data(), N, C);
    // the dot's order error (≤ 2C·u·Σ|p·dy|) times p ≤ 1, plus 3 roundings.
    expect_close(dx_ref, dx, 2.0 * C * kEps * pg, 4 * kEps, label("softmax_backward C=%d", C));
  }
}

TEST(HdRows, LogprobMatchesRef) {
  const int N = 7;
  for (int V : kWidths) {
    const auto x = normals(static_cast<size_t>(N) * V, 30, V, 0, 4.0f);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; ++n) tgt[n] = n == 2 ? -1 : (n * 7919) % V;  // one ignored row
    const auto dlogp = normals(N, 31, V);
    std::vector<float> lp(N, 9.0f), lp_ref(N, 9.0f);
    auto dl = normals(x.size(), 32, V);
    auto dl_ref = dl;
    for (int64_t n = 0; n < N; ++n) {
      if (tgt[n] < 0) {
        lp[n] = 0.0f;
        continue;
      }
      const float* xr = x.data() + n * V;
      const float m = row_max_of(xr, V);
      const float sum = hd_row_sum_exp(xr, m, V);
      lp[n] = hd_logprob(xr[tgt[n]], m, sum);
      for (int j = 0; j < V; ++j)
        dl[n * V + j] = hd_add(dl[n * V + j], hd_logprob_dlogit(dlogp[n], j == tgt[n], xr[j], m, sum));
    }
    ref::logprob_forward(lp_ref.data(), x.data(), tgt.data(), N, V);
    ref::logprob_backward(dl_ref.data(), dlogp.data(), x.data(), tgt.data(), N, V);
    expect_close(lp_ref, lp, (2 * V + 2) * kEps, 4 * kEps, label("logprob V=%d", V));
    // dlogp·(onehot − e/sum): e/sum's relative error (2V+4)·u, e/sum ≤ 1.
    expect_close(dl_ref, dl, max_abs(dlogp) * (2 * V + 4) * kEps, 4 * kEps,
                 label("logprob_backward V=%d", V));
    const int64_t skipped = 2 * static_cast<int64_t>(V);
    const auto dl0 = normals(x.size(), 32, V);
    EXPECT_TRUE(std::equal(dl.begin() + skipped, dl.begin() + skipped + V, dl0.begin() + skipped))
        << "a row with target < 0 must be left untouched";
  }
}

}  // namespace
}  // namespace moerl
