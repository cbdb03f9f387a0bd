// test_hd_reduce.cpp — the CUDA row-reduction order (kernels/cuda/hd/reduce.h) run on the CPU:
// every term counted once, the documented tree order, and agreement with the references'
// sequential sums within FP32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "kernels/cuda/hd/reduce.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

const int kSizes[] = {1, 2, 3, 7, 255, 256, 257, 511, 1000, 4099};

// Integers below 2^24 add exactly in any order: the tree's sum must be the exact total, which
// fails if a term is dropped or counted twice (thread striding, tree bounds).
TEST(HdReduce, EveryTermCountedOnce) {
  for (int n : kSizes) {
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i + 1);
    EXPECT_EQ(hd_row_sum(x.data(), n), 0.5f * n * (n + 1.0f)) << label("n=%d", n);
    std::vector<float> ones(n, 1.0f);
    EXPECT_EQ(hd_row_dot(x.data(), ones.data(), n), 0.5f * n * (n + 1.0f)) << label("n=%d", n);
  }
}

// The max is order-free: it must be exact, also for rows of negatives only (chains start at −inf).
TEST(HdReduce, MaxIsExact) {
  for (int n : kSizes) {
    auto x = normals(n, 1, n);
    for (auto& v : x) v = -std::fabs(v) - 1.0f;
    float want = x[0];
    for (float v : x) want = v > want ? v : want;
    EXPECT_EQ(hd_row_max(x.data(), n), want) << label("n=%d", n);
  }
}

// n = 3: threads 0, 1, 2 hold x0, x1, x2, the tree gives (x0 + x2) + x1. With x0 = x2 = 2^-24 and
// x1 = 1 that is 1 + 2^-23, while the sequential (x0 + x1) + x2 rounds to 1 twice: the device
// order, not the reference's, is what hd_row_sum computes.
TEST(HdReduce, FollowsTheDocumentedTree) {
  const float tiny = std::ldexp(1.0f, -24);
  const float x[3] = {tiny, 1.0f, tiny};
  EXPECT_EQ(hd_row_sum(x, 3), 1.0f + 2 * tiny);
  EXPECT_EQ((x[0] + x[1]) + x[2], 1.0f);
}

// Against the references' sequential chains: two orders of an n-term sum each err by at most
// (n−1)·u·Σ|terms| (u = 2^-24), so they differ by at most 2n·u·Σ|terms|.
TEST(HdReduce, AgreesWithSequentialSums) {
  for (int n : kSizes) {
    const auto a = normals(n, 2, n), b = normals(n, 3, n);
    float seq_dot = 0.0f, seq_sq = 0.0f, seq_exp = 0.0f, seq_sum = 0.0f;
    double abs_dot = 0.0, abs_sum = 0.0;
    for (int i = 0; i < n; ++i) {
      seq_dot = std::fma(a[i], b[i], seq_dot);
      seq_sq = std::fma(a[i], a[i], seq_sq);
      seq_exp += std::exp(a[i] - 0.5f);
      seq_sum += a[i];
      abs_dot += std::fabs(a[i] * b[i]);
      abs_sum += std::fabs(a[i]);
    }
    const double bound = 2.0 * n * kEps;
    EXPECT_NEAR(hd_row_dot(a.data(), b.data(), n), seq_dot, bound * abs_dot) << label("n=%d", n);
    float part[kRowThreads];
    for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_sumsq(a.data(), n, t, kRowThreads);
    EXPECT_NEAR(hd_tree_sum(part, kRowThreads), seq_sq, bound * seq_sq) << label("n=%d", n);
    EXPECT_NEAR(hd_row_sum_exp(a.data(), 0.5f, n), seq_exp, bound * seq_exp) << label("n=%d", n);
    EXPECT_NEAR(hd_row_sum(a.data(), n), seq_sum, bound * abs_sum) << label("n=%d", n);
  }
}

}  // namespace
}  // namespace moerl
