// ref/topk.cpp — top-k selection per row, scalar reference (selection by repeated arg-max).
// Writes ids and vals with '='.
//
// Order: descending score; NaN scores rank as −inf (a NaN row entry can only be chosen after every
// finite/infinite score, and its val is written as the NaN it is, so the corruption stays
// visible). −0 and +0 are equal scores. Exactly equal scores are ordered by the tie rule:
//   lowest:  lower expert index first;   highest: higher index first;
//   random:  by a random permutation of 0..E-1 drawn per row from Stream::topk_tie with the key's
//            call replaced by key.call + row (Rng::shuffle of the identity).
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ref/ops.h"
#include "kernels/rng.h"

namespace moerl::ref {

// ids[N,K], vals[N,K], scores[N,E]
void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                  TieBreak tie, const NoiseKey& key) {
  std::vector<int> rank(E), perm(E);
  std::vector<char> taken(E);
  for (int n = 0; n < N; ++n) {
    const float* s = scores + static_cast<int64_t>(n) * E;
    for (int e = 0; e < E; ++e) rank[e] = tie == TieBreak::highest ? E - 1 - e : e;
    if (tie == TieBreak::random) {
      NoiseKey row_key = key;
      row_key.call = key.call + static_cast<uint64_t>(n);
      Rng rng(rng_derive(row_key, Stream::topk_tie));
      for (int e = 0; e < E; ++e) perm[e] = e;
      rng.shuffle(perm.data(), E);
      for (int i = 0; i < E; ++i) rank[perm[i]] = i;
    }
    for (int e = 0; e < E; ++e) taken[e] = 0;
    for (int slot = 0; slot < K; ++slot) {
      int best = -1;
      float best_s = 0.0f;
      for (int e = 0; e < E; ++e) {
        if (taken[e]) continue;
        float se = std::isnan(s[e]) ? -std::numeric_limits<float>::infinity() : s[e];
        if (best < 0 || se > best_s || (se == best_s && rank[e] < rank[best])) {
          best = e;
          best_s = se;
        }
      }
      taken[best] = 1;
      ids[static_cast<int64_t>(n) * K + slot] = best;
      vals[static_cast<int64_t>(n) * K + slot] = s[best];
    }
  }
}

}  // namespace moerl::ref
