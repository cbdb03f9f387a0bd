// cpu/row_order.h — internal to kernels/cpu: the summation order of one row's reduction under a
// ReduceCtx (rmsnorm's sum of squares, attention's key-dimension sums).
//
// A reduction over K terms is cut into S = clamp(reduce_effective_split(ctx, rows, K), 1, K)
// contiguous chunks, chunk c covering [c·K/S, (c+1)·K/S) (integer division). Each chunk is summed
// sequentially from 0.0f — from its first element upward, or from its last downward when the
// order is `reversed`. With S = 1 that is exactly the reference's fixed (or reversed) order.
// With S > 1 the chunks' partial sums are combined as
//   total = part[perm[0]] + part[perm[1]] + … + part[perm[S-1]]   (left to right, no leading 0)
// where perm is ascending for `fixed`, descending for `reversed` (S > 1 there only from batch
// variance: deterministic, as a real kernel's blocking is), and for `split_k` a permutation drawn
// by Rng::shuffle from the caller's row stream, so the same key and row give the same bits and
// another key gives another order. The GEMM (cpu/gemm.cpp) follows the same convention.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/rng.h"

namespace moerl::cpu {

class RowOrder {
 public:
  // Number of chunks for a reduction over K terms in a call of `rows` rows.
  static int split_for(const ReduceCtx& ctx, int rows, int K) {
    return std::clamp(reduce_effective_split(ctx, rows, K), 1, std::max(K, 1));
  }

  // Sets up the order for one row; `state` seeds the chunk permutation (split_k with S > 1).
  void set(int K, int split, OrderKind kind, uint64_t state) {
    K_ = K;
    split_ = split;
    reversed_ = kind == OrderKind::reversed;
    perm_.resize(split);
    for (int c = 0; c < split; ++c) perm_[c] = reversed_ ? split - 1 - c : c;
    if (split > 1 && kind == OrderKind::split_k) Rng(state).shuffle(perm_.data(), split);
  }

  int split() const { return split_; }
  bool reversed() const { return reversed_; }
  // First index of chunk c of S over K terms (chunk c is [bound(c), bound(c+1))).
  static int bound(int c, int K, int S) {
    return static_cast<int>(static_cast<int64_t>(c) * K / S);
  }
  int begin(int c) const { return bound(c, K_, split_); }
  int end(int c) const { return bound(c + 1, K_, split_); }
  // i-th chunk in the combination order.
  int combine(int i) const { return perm_[i]; }

 private:
  int K_ = 0, split_ = 1;
  bool reversed_ = false;
  std::vector<int> perm_;
};

}  // namespace moerl::cpu
