// cpu/topk.cpp — top-k per row, TBB over rows, writes ids and vals with '='.
// Same total order as ref/topk.cpp (descending score, NaN ranked as −inf, exact ties by the tie
// rule's rank; random: Rng::shuffle from Stream::topk_tie with call = key.call + row), realised by
// repeated arg-max for small K and std::partial_sort otherwise. The order is total, so the result is the reference's
// bit for bit. The random permutation is drawn only for rows that contain an exact tie (the rank
// matters for nothing else).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_TOPK_CPP_ONCE_
#define MOERL_KERNELS_CPU_TOPK_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
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
constexpr int kSelectMax = 8;  // up to this K, selection by repeated arg-max; beyond, partial_sort
}

// ids[N,K], vals[N,K], scores[N,E]
void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key) {
  tbb::parallel_for(tbb::blocked_range<int>(0, N, 32), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> s(E), sorted(E);
    std::vector<int> idx(E), rank(E), perm(E);
    for (int n = br.begin(); n < br.end(); ++n) {
      const float* row = scores + static_cast<int64_t>(n) * E;
      for (int e = 0; e < E; ++e)
        s[e] = std::isnan(row[e]) ? -std::numeric_limits<float>::infinity() : row[e];
      for (int e = 0; e < E; ++e) rank[e] = tie == TieBreak::highest ? E - 1 - e : e;
      if (tie == TieBreak::random) {
        sorted = s;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
          NoiseKey row_key = key;
          row_key.call = key.call + static_cast<uint64_t>(n);
          Rng rng(rng_derive(row_key, Stream::topk_tie));
          for (int e = 0; e < E; ++e) perm[e] = e;
          rng.shuffle(perm.data(), E);
          for (int i = 0; i < E; ++i) rank[perm[i]] = i;
        }
      }
      auto before = [&](int a, int b) {
        return s[a] > s[b] || (s[a] == s[b] && rank[a] < rank[b]);
      };
      for (int e = 0; e < E; ++e) idx[e] = e;
      if (K <= kSelectMax) {  // K arg-max passes over the shrinking tail: cheaper for small K
        for (int slot = 0; slot < K; ++slot) {
          int best = slot;
          for (int i = slot + 1; i < E; ++i)
            if (before(idx[i], idx[best])) best = i;
          std::swap(idx[slot], idx[best]);
        }
      } else {
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), before);
      }
      for (int slot = 0; slot < K; ++slot) {
        ids[static_cast<int64_t>(n) * K + slot] = idx[slot];
        vals[static_cast<int64_t>(n) * K + slot] = row[idx[slot]];
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
