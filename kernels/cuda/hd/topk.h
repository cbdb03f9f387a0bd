// hd/topk.h — top-k of one row under the references' total order (ref/topk.cpp): descending score,
// NaN ranked as −inf (its val written back as the NaN it is), −0 == +0, exact ties by rank:
//   lowest: rank e;  highest: rank E−1−e;
//   random: rank[perm[i]] = i for perm = Rng(rng_derive(seed, topk_tie, {layer, site, call + row}))
//           .shuffle of the identity — the CPU's stream, so the same ids for the same key.
// (The CPU draws the permutation only for rows that hold a tie; the rank decides nothing else,
// so drawing it always gives the same ids.)
// Selection: slot 0 takes the first element of the order; slot k the first element after slot
// k−1's — K passes over the row, no "taken" flags.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd/arith.h"
#include "kernels/numerics.h"
#include "kernels/rng.h"

namespace moerl::cuda {

MOERL_HD float hd_topk_key(float s) { return hd_isnan(s) ? -INFINITY : s; }

// rank[E] and perm[E] (scratch) of a row in random mode.
MOERL_HD void hd_topk_random_ranks(int* rank, int* perm, int E, const NoiseKey& key, int64_t row) {
  Rng rng(rng_derive3(key.seed, static_cast<uint64_t>(Stream::topk_tie), key.layer, key.site,
                      noise_call(key) + static_cast<uint64_t>(row)));
  for (int e = 0; e < E; ++e) perm[e] = e;
  rng.shuffle(perm, E);
  for (int i = 0; i < E; ++i) rank[perm[i]] = i;
}

// Rank of element e (rank: the random ranks, read only in random mode).
MOERL_HD int hd_topk_rank(int e, int E, TieBreak tie, const int* rank) {
  return tie == TieBreak::random ? rank[e] : tie == TieBreak::highest ? E - 1 - e : e;
}

// True when element a (key sa, rank ra) comes before b in the order.
MOERL_HD bool hd_topk_before(float sa, int ra, float sb, int rb) {
  return sa > sb || (sa == sb && ra < rb);
}

// ids[K], vals[K] of row[E].
MOERL_HD void hd_topk_row(int32_t* ids, float* vals, const float* row, int E, int K, TieBreak tie,
                          const int* rank) {
  int prev = -1;
  float prev_s = 0.0f;
  int prev_r = 0;
  for (int slot = 0; slot < K; ++slot) {
    int best = -1;
    float best_s = 0.0f;
    int best_r = 0;
    for (int e = 0; e < E; ++e) {
      const float se = hd_topk_key(row[e]);
      const int re = hd_topk_rank(e, E, tie, rank);
      if (prev >= 0 && !hd_topk_before(prev_s, prev_r, se, re)) continue;  // at or before prev
      if (best < 0 || hd_topk_before(se, re, best_s, best_r)) {
        best = e;
        best_s = se;
        best_r = re;
      }
    }
    ids[slot] = best;
    vals[slot] = best >= 0 ? row[best] : NAN;
    prev = best;
    prev_s = best_s;
    prev_r = best_r;
  }
}

}  // namespace moerl::cuda
