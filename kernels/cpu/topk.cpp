// cpu/topk.cpp — top-k per row, TBB over rows, writes ids and vals with '='.
// Same total order as ref/topk.cpp (descending score, NaN ranked as −inf, exact ties by the tie
// rule's rank; random: Rng::shuffle from Stream::topk_tie with call = key.call + row), realised by
// one insertion pass that keeps the K first sorted, over the candidates a bound on the K-th score
// leaves (`candidates`). The order is total, so the result is the reference's bit for bit. The
// random permutation is drawn only for rows where an exact tie reaches the top K (the rank decides
// nothing else; each row's draw is its own stream, so skipping it changes no other row).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_TOPK_CPP_ONCE_
#define MOERL_KERNELS_CPU_TOPK_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/rng.h"

#endif  // MOERL_KERNELS_CPU_TOPK_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/topk.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {
// The K first of the candidates cand[0..C) under the total order `before` (descending score, then
// ascending rank), by one pass that keeps them sorted: a candidate is compared with the K-th kept,
// and inserted only when it comes before it. top[K] receives the ids in order.
template <class Before>
void select_sorted(int* top, const int* cand, int C, int K, const Before& before) {
  int kept = 0;
  for (int c = 0; c < C; ++c) {
    const int e = cand[c];
    if (kept == K && !before(e, top[K - 1])) continue;
    int i = kept < K ? kept++ : K - 1;
    for (; i > 0 && before(e, top[i - 1]); --i) top[i] = top[i - 1];
    top[i] = e;
  }
}

// The ids that can be among the K first of the row s[E] (NaN already read as −inf), in ascending
// order, into cand; returns their count (at least K). The row is cut into G = 2K interleaved
// groups (e mod G) and `bound` is the K-th largest of the G group maxima: K distinct entries score
// at least `bound`, so an entry scoring below it comes after K others under any tie rule and is
// left out. Which entries are kept depends only on the scores, so the selection over the
// candidates is the selection over the row, bit for bit. Short rows (E < 4K) keep every id.
int candidates(int* cand, float* group_max, const float* s, int E, int K) {
  const int G = 2 * K;
  if (E < 2 * G) {
    for (int e = 0; e < E; ++e) cand[e] = e;
    return E;
  }
  for (int g = 0; g < G; ++g) group_max[g] = s[g];
  int e = G;
  for (; e + G <= E; e += G)
    for (int g = 0; g < G; ++g) group_max[g] = std::max(group_max[g], s[e + g]);
  for (int g = 0; e + g < E; ++g) group_max[g] = std::max(group_max[g], s[e + g]);
  std::nth_element(group_max, group_max + (K - 1), group_max + G, std::greater<float>());
  const float bound = group_max[K - 1];
  int C = 0;
  for (int id = 0; id < E; ++id) {
    cand[C] = id;
    C += s[id] >= bound;
  }
  return C;
}
}  // namespace

// ids[N,K], vals[N,K], scores[N,E]
void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key) {
  tbb::parallel_for(tbb::blocked_range<int>(0, N, 32), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> s(E), group_max(2 * static_cast<size_t>(K));
    std::vector<int> top(K), cand(E), rank, perm;
    for (int n = br.begin(); n < br.end(); ++n) {
      const float* row = scores + static_cast<int64_t>(n) * E;
      for (int e = 0; e < E; ++e)
        s[e] = std::isnan(row[e]) ? -std::numeric_limits<float>::infinity() : row[e];
      const int C = candidates(cand.data(), group_max.data(), s.data(), E, K);
      // lowest and random: rank = id; highest: rank = E − 1 − id
      const bool highest = tie == TieBreak::highest;
      select_sorted(top.data(), cand.data(), C, K, [&](int a, int b) {
        return s[a] > s[b] || (s[a] == s[b] && (highest ? a > b : a < b));
      });
      if (tie == TieBreak::random) {
        // The rank decides the result only where an exact tie reaches the top K: two kept ids of
        // one score (they are neighbours in order), or a left-out id with the K-th score (a
        // candidate: every other id scores below the K-th). Only then is the row's permutation
        // drawn and the selection redone under it.
        bool tied = false;
        for (int i = 1; i < K && !tied; ++i) tied = s[top[i]] == s[top[i - 1]];
        const float kth = s[top[K - 1]];
        int at_least = 0;
        for (int c = 0; c < C && !tied; ++c) tied = (at_least += s[cand[c]] >= kth) > K;
        if (tied) {
          NoiseKey row_key = key;
          row_key.call = key.call + static_cast<uint64_t>(n);
          Rng rng(rng_derive(row_key, Stream::topk_tie));
          perm.resize(E);
          rank.resize(E);
          for (int e = 0; e < E; ++e) perm[e] = e;
          rng.shuffle(perm.data(), E);
          for (int i = 0; i < E; ++i) rank[perm[i]] = i;
          select_sorted(top.data(), cand.data(), C, K, [&](int a, int b) {
            return s[a] > s[b] || (s[a] == s[b] && rank[a] < rank[b]);
          });
        }
      }
      for (int slot = 0; slot < K; ++slot) {
        ids[static_cast<int64_t>(n) * K + slot] = top[slot];
        vals[static_cast<int64_t>(n) * K + slot] = row[top[slot]];
      }
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(topk_forward);

void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K, TieBreak tie, const NoiseKey& key) {
  HWY_DYNAMIC_DISPATCH(topk_forward)(ids, vals, scores, N, E, K, tie, key);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
