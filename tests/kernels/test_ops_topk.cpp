// test_ops_topk.cpp — top-k: cpu vs ref bit for bit (same total order: descending score, NaN as
// −inf, ties by the tie rule), crafted ties for each rule, NaN handling, and the random rule's
// reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::label;
using test_ops::normals;

struct TopK {
  std::vector<int32_t> ids;
  std::vector<float> vals;
};

TopK run_cpu(const std::vector<float>& s, int N, int E, int K, TieBreak tie, const NoiseKey& key) {
  TopK r{std::vector<int32_t>(static_cast<size_t>(N) * K, -7), std::vector<float>(static_cast<size_t>(N) * K)};
  cpu::topk_forward(r.ids.data(), r.vals.data(), s.data(), N, E, K, tie, key);
  return r;
}
TopK run_ref(const std::vector<float>& s, int N, int E, int K, TieBreak tie, const NoiseKey& key) {
  TopK r{std::vector<int32_t>(static_cast<size_t>(N) * K, -7), std::vector<float>(static_cast<size_t>(N) * K)};
  ref::topk_forward(r.ids.data(), r.vals.data(), s.data(), N, E, K, tie, key);
  return r;
}

NoiseKey key_of(uint64_t seed) {
  NoiseKey k;
  k.seed = seed;
  k.layer = 1;
  k.site = 6;
  k.call = 100;
  return k;
}

// Scores rounded to multiples of 1/4 (many exact ties, −0 and +0 among them) with some NaN/±inf.
std::vector<float> tied_scores(int N, int E, uint64_t tag) {
  auto s = normals(static_cast<size_t>(N) * E, tag, N, E, 2.0f);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i] = std::round(s[i] * 4.0f) / 4.0f;
    if (i % 37 == 5) s[i] = std::numeric_limits<float>::quiet_NaN();
    if (i % 53 == 7) s[i] = -std::numeric_limits<float>::infinity();
    if (i % 71 == 9) s[i] = std::numeric_limits<float>::infinity();
  }
  return s;
}

TEST(OpsTopk, CpuEqualsRefOnTiesNansAndAllRules) {
  for (int E : {4, 16, 63, 64, 256})
    for (int K : {1, 2, 3, 8, E}) {
      if (K > E) continue;
      const int N = 100;
      auto s = tied_scores(N, E, static_cast<uint64_t>(E * 1000 + K));
      for (TieBreak tie : {TieBreak::lowest, TieBreak::highest, TieBreak::random}) {
        TopK r = run_ref(s, N, E, K, tie, key_of(1)), c = run_cpu(s, N, E, K, tie, key_of(1));
        const std::string what = label("E%d K%d %s", E, K, tie_break_name(tie));
        ASSERT_EQ(r.ids, c.ids) << what;
        ASSERT_EQ(test_ops::bit_diffs(r.vals, c.vals), 0u) << what;
        // Sorted by descending score with NaN ranked as −inf; ids distinct and in range.
        for (int n = 0; n < N; ++n) {
          std::vector<char> seen(E, 0);
          for (int i = 0; i < K; ++i) {
            const int id = r.ids[n * K + i];
            ASSERT_TRUE(id >= 0 && id < E && !seen[id]) << what;
            seen[id] = 1;
            ASSERT_EQ(test_ops::bit_diffs(&r.vals[n * K + i], &s[static_cast<size_t>(n) * E + id], 1), 0u);
            auto key = [](float v) { return std::isnan(v) ? -INFINITY : v; };
            if (i > 0) {
              ASSERT_GE(key(r.vals[n * K + i - 1]), key(r.vals[n * K + i])) << what;
            }
          }
          // Nothing left out beats the last chosen score.
          const float last = std::isnan(r.vals[n * K + K - 1]) ? -INFINITY : r.vals[n * K + K - 1];
          for (int e = 0; e < E; ++e)
            if (!seen[e]) {
              const float se = s[static_cast<size_t>(n) * E + e];
              ASSERT_LE(std::isnan(se) ? -INFINITY : se, last) << what;
            }
        }
      }
    }
}

// The field's router shapes (64 and 128 experts, top-4 and top-8) on continuous scores, where the
// cpu kernel leaves out every id scoring below a bound on the K-th score before it selects; and
// rows where many ids equal that bound (each group's maximum the same score).
TEST(OpsTopk, CpuEqualsRefOnFieldShapesAndBoundTies) {
  for (int E : {64, 128})
    for (int K : {4, 8}) {
      const int N = 200;
      auto s = normals(static_cast<size_t>(N) * E, static_cast<uint64_t>(E * 7 + K), N, E, 1.0f);
      for (int n = 0; n < N / 4; ++n)  // a quarter of the rows: every score one of two values
        for (int e = 0; e < E; ++e) s[static_cast<size_t>(n) * E + e] = (e * 5 + n) % 3 == 0 ? 1.5f : -0.5f;
      for (TieBreak tie : {TieBreak::lowest, TieBreak::highest, TieBreak::random}) {
        TopK r = run_ref(s, N, E, K, tie, key_of(3)), c = run_cpu(s, N, E, K, tie, key_of(3));
        const std::string what = label("E%d K%d %s", E, K, tie_break_name(tie));
        ASSERT_EQ(r.ids, c.ids) << what;
        ASSERT_EQ(test_ops::bit_diffs(r.vals, c.vals), 0u) << what;
      }
    }
}

TEST(OpsTopk, CraftedTiesFollowTheRule) {
  //                      0     1     2     3     4     5
  std::vector<float> s = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -0.0f};
  for (auto run : {run_ref, run_cpu}) {
    TopK lo = run(s, 1, 6, 4, TieBreak::lowest, key_of(1));
    EXPECT_EQ(lo.ids, (std::vector<int32_t>{1, 2, 4, 3}));
    TopK hi = run(s, 1, 6, 4, TieBreak::highest, key_of(1));
    EXPECT_EQ(hi.ids, (std::vector<int32_t>{4, 2, 1, 3}));
    EXPECT_EQ(hi.vals, (std::vector<float>{3.0f, 3.0f, 3.0f, 2.0f}));
  }
  // −0 and +0 are equal scores: the tie rule decides.
  std::vector<float> z = {-0.0f, 0.0f, -1.0f};
  EXPECT_EQ(run_cpu(z, 1, 3, 1, TieBreak::lowest, key_of(1)).ids[0], 0);
  EXPECT_EQ(run_cpu(z, 1, 3, 1, TieBreak::highest, key_of(1)).ids[0], 1);
}

TEST(OpsTopk, NanRanksAsMinusInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {nan, 1.0f, -inf, 0.0f, nan};
  for (auto run : {run_ref, run_cpu}) {
    TopK lo = run(s, 1, 5, 5, TieBreak::lowest, key_of(1));
    EXPECT_EQ(lo.ids, (std::vector<int32_t>{1, 3, 0, 2, 4}));  // NaN ties −inf, lowest index first
    EXPECT_TRUE(std::isnan(lo.vals[2]));                       // the NaN is reported as NaN
    TopK hi = run(s, 1, 5, 2, TieBreak::highest, key_of(1));
    EXPECT_EQ(hi.ids, (std::vector<int32_t>{1, 3}));
  }
}

// Rows with scores {5, 5, 0, 0} and K = 1: the random rule picks 0 or 1 per row (entity
// key.call + row), reproducibly; across 200 rows both must occur, and another seed changes rows.
TEST(OpsTopk, RandomTieBreakIsReproducibleAndUnbiasedEnough) {
  const int N = 200, E = 4;
  std::vector<float> s;
  for (int n = 0; n < N; ++n) s.insert(s.end(), {5.0f, 5.0f, 0.0f, 0.0f});
  TopK a = run_cpu(s, N, E, 1, TieBreak::random, key_of(1));
  TopK b = run_cpu(s, N, E, 1, TieBreak::random, key_of(1));
  TopK c = run_cpu(s, N, E, 1, TieBreak::random, key_of(2));
  TopK r = run_ref(s, N, E, 1, TieBreak::random, key_of(1));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.ids, r.ids);
  int first = 0;
  for (int id : a.ids) {
    ASSERT_TRUE(id == 0 || id == 1);
    first += id == 0;
  }
  // Binomial(200, 1/2): 60..140 holds with probability 1 − 1e-8.
  EXPECT_GT(first, 60);
  EXPECT_LT(first, 140);
  EXPECT_NE(a.ids, c.ids);
  // The row entity is key.call + row: row n of call 100 is row n−1 of call 101.
  NoiseKey shifted = key_of(1);
  shifted.call += 1;
  std::vector<float> tail(s.begin() + E, s.end());
  TopK d = run_cpu(tail, N - 1, E, 1, TieBreak::random, shifted);
  EXPECT_EQ(std::vector<int32_t>(a.ids.begin() + 1, a.ids.end()), d.ids);
}

}  // namespace
}  // namespace moerl
