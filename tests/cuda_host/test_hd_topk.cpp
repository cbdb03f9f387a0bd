// test_hd_topk.cpp — top-k of one row (kernels/cuda/hd/topk.h) run on the CPU against
// cpu::topk_forward: the same ids and vals bit for bit for distinct scores, exact ties, NaN and
// ±inf, under every tie rule — the random rule through the same counter-based stream
// (rng_derive3 ≡ rng_derive with three coordinates).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "hd_compose.h"
#include "kernels/cpu/ops.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::label;
using test_ops::normals;

TEST(HdTopk, Derive3EqualsDerive) {
  Rng r(5);
  for (int i = 0; i < 200; ++i) {
    const uint64_t seed = r.next_u64(), stream = r.below(9), a = r.next_u64() >> (i % 64),
                   b = r.below(1000), c = r.next_u64();
    ASSERT_EQ(rng_derive3(seed, stream, a, b, c), rng_derive(seed, stream, {a, b, c})) << i;
  }
  NoiseKey key{42, 3, 6, 1000};
  EXPECT_EQ(rng_derive3(key.seed, static_cast<uint64_t>(Stream::topk_tie), key.layer, key.site, key.call),
            rng_derive(key, Stream::topk_tie));
}

void expect_same_topk(const std::vector<float>& s, int N, int E, int K, TieBreak tie,
                      const NoiseKey& key, const std::string& what) {
  std::vector<int32_t> ids(static_cast<size_t>(N) * K, -7), ids_cpu(ids.size(), -8);
  std::vector<float> vals(ids.size()), vals_cpu(ids.size());
  hd_compose::topk(ids.data(), vals.data(), s.data(), N, E, K, tie, key);
  cpu::topk_forward(ids_cpu.data(), vals_cpu.data(), s.data(), N, E, K, tie, key);
  ASSERT_EQ(ids_cpu, ids) << what;
  EXPECT_EQ(0, std::memcmp(vals_cpu.data(), vals.data(), vals.size() * sizeof(float))) << what;
}

const TieBreak kTies[] = {TieBreak::lowest, TieBreak::highest, TieBreak::random};

TEST(HdTopk, DistinctScoresMatchCpu) {
  const NoiseKey key{7, 1, 6, 100};
  for (TieBreak tie : kTies)
    for (int E : {1, 5, 64, 257})
      for (int K : {1, 2, 8, E}) {
        if (K > E) continue;
        const int N = 11;
        const auto s = normals(static_cast<size_t>(N) * E, 100, E, K);
        expect_same_topk(s, N, E, K, tie, key, label("E=%d K=%d tie=%s", E, K, tie_break_name(tie)));
      }
}

// Scores on a 1/4 grid (many exact ties, −0 and +0 among them), NaN and ±inf sprinkled in.
TEST(HdTopk, TiesNansAndInfsMatchCpu) {
  for (TieBreak tie : kTies)
    for (int E : {4, 16, 63, 256})
      for (int K : {1, 3, 8, E}) {
        if (K > E) continue;
        const int N = 33;
        auto s = normals(static_cast<size_t>(N) * E, 101, E, K, 2.0f);
        for (size_t i = 0; i < s.size(); ++i) {
          s[i] = std::round(s[i] * 4.0f) / 4.0f;
          if (i % 37 == 5) s[i] = std::numeric_limits<float>::quiet_NaN();
          if (i % 53 == 7) s[i] = -std::numeric_limits<float>::infinity();
          if (i % 71 == 9) s[i] = std::numeric_limits<float>::infinity();
          if (i % 29 == 3) s[i] = -0.0f;
        }
        for (uint64_t seed : {1u, 2u, 3u})
          expect_same_topk(s, N, E, K, tie, NoiseKey{seed, 2, 6, 50},
                           label("E=%d K=%d tie=%s seed=%d", E, K, tie_break_name(tie), int(seed)));
      }
}

// A row of all-equal scores is decided by the rule alone: lowest → 0, 1, …; highest → E−1, …;
// random → the stream's permutation, which differs between keys.
TEST(HdTopk, AllTiedRowFollowsTheRule) {
  const int E = 32, K = 4, N = 8;
  const std::vector<float> s(static_cast<size_t>(N) * E, 0.5f);
  std::vector<int32_t> ids(static_cast<size_t>(N) * K);
  std::vector<float> vals(ids.size());
  hd_compose::topk(ids.data(), vals.data(), s.data(), N, E, K, TieBreak::lowest, NoiseKey{});
  EXPECT_EQ((std::vector<int32_t>{0, 1, 2, 3}), std::vector<int32_t>(ids.begin(), ids.begin() + K));
  hd_compose::topk(ids.data(), vals.data(), s.data(), N, E, K, TieBreak::highest, NoiseKey{});
  EXPECT_EQ((std::vector<int32_t>{31, 30, 29, 28}), std::vector<int32_t>(ids.begin(), ids.begin() + K));
  expect_same_topk(s, N, E, K, TieBreak::random, NoiseKey{9, 0, 6, 3}, "random");
  std::vector<int32_t> other(ids.size());
  hd_compose::topk(ids.data(), vals.data(), s.data(), N, E, K, TieBreak::random, NoiseKey{9, 0, 6, 3});
  hd_compose::topk(other.data(), vals.data(), s.data(), N, E, K, TieBreak::random, NoiseKey{10, 0, 6, 3});
  EXPECT_NE(ids, other) << "another seed must draw other winners";
  // rows differ too: the row is the stream's entity (call + n)
  EXPECT_NE(std::vector<int32_t>(ids.begin(), ids.begin() + K),
            std::vector<int32_t>(ids.begin() + K, ids.begin() + 2 * K));
}

}  // namespace
}  // namespace moerl
