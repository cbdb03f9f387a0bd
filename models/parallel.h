// parallel.h — how one model is spread over ranks, and the sums that make its results independent
// of that spread (deterministic mode).
//
// Expert parallelism (EP): rank r of an EP group of n owns experts [r·E/n, (r+1)·E/n); dense
// weights are replicated. Data parallelism (DP): the B sequences of a batch are split into
// contiguous blocks, rank r holding [r·B/n, (r+1)·B/n); concatenated in rank order they are the
// batch in order. Here the EP and DP groups are the same ranks in the same order, so the tokens an
// expert receives, taken in source-rank order, are in global token order.
//
// Deterministic mode (reduce_chunks = C ≥ 1): every sum over the tokens or sequences of a batch —
// dense weight gradients, router statistics of the aux losses, loss normalisers — is formed as C
// partial sums over fixed contiguous chunks of the batch's sequences (chunk c = sequences
// [c·B/C, (c+1)·B/C)), and the C partials are added in chunk order on every rank. One rank computes
// all C partials, each of n ranks C/n of them (n must divide C), so the bits do not depend on n.
// Plain mode (reduce_chunks = 0): one partial per rank, all-reduced — on one rank exactly the
// serial sums of a model without parallelism.
#pragma once

#include <cstdint>
#include <vector>

#include "models/collectives.h"
#include "models/config.h"

namespace moerl {

struct ModelParallel {
  Collectives* ep = nullptr;  // expert-parallel group (null: one rank owns every expert)
  Collectives* dp = nullptr;  // data-parallel group (null: the whole batch is here)
  int reduce_chunks = 0;      // C of deterministic mode; 0 = plain sums

  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  int dp_size() const { return dp ? dp->size() : 1; }
  int dp_rank() const { return dp ? dp->rank() : 0; }
  bool canonical() const { return reduce_chunks > 0; }
  // Throws std::invalid_argument naming the conflicting values: n_experts % EP, C % DP, EP ≠ DP.
  void validate(const ModelConfig& cfg) const;
};

// Sequences [begin, end) of the batch held by rank r of n.
struct SeqBlock {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline SeqBlock dp_block(int64_t B, int n, int r) {
  return SeqBlock{B * r / n, B * (r + 1) / n};
}

// Experts [begin, end) owned by rank r of n (n divides E).
struct ExpertRange {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
  bool owns(int e) const { return e >= begin && e < end; }
};
inline ExpertRange ep_experts(int E, int n, int r) { return ExpertRange{E / n * r, E / n * (r + 1)}; }

// Sums over the rows (tokens) of this rank's block, formed the same way on any number of ranks:
// the local rows are cut into groups (the canonical chunks held here, or one group in plain mode),
// each group is summed on its own, and combine() adds the groups of all ranks.
class RowSums {
 public:
  RowSums() = default;
  // This rank holds B of the B_total sequences of the batch, T rows each.
  RowSums(const ModelParallel& par, int64_t B_total, int B, int T);
  // Sequences of their own length (the packed layout): local sequence b holds rows
  // [seq_begin[b], seq_begin[b+1]) (seq_begin[B+1], seq_begin[0] = 0), and the whole batch, all
  // ranks together, rows_total rows. With seq_begin[b] = b·T it is the constructor above.
  RowSums(const ModelParallel& par, int64_t B_total, std::vector<int> seq_begin, int64_t rows_total);

  int groups() const { return static_cast<int>(bounds_.size()) - 1; }
  const std::vector<int>& bounds() const { return bounds_; }  // [groups()+1]
  int begin(int g) const { return bounds_[g]; }  // local rows of group g
  int end(int g) const { return bounds_[g + 1]; }
  int64_t rows_total() const { return rows_total_; }  // rows of the whole batch
  const std::vector<int>& seq_begin() const { return seq_begin_; }  // [B+1] local sequences' rows
  int64_t seqs_total() const { return seqs_total_; }
  bool canonical() const { return canonical_; }
  Collectives* dp() const { return dp_; }

  // partials[groups() · m] (group-major) → total[m], bit-identical on every rank and, in
  // deterministic mode, for every number of ranks.
  void combine(double* total, const double* partials, int m) const;
  // Element-wise: total[m] = the same combination of float partials (group-major).
  void combine(float* total, const float* partials, int64_t m) const;

 private:
  std::vector<int> bounds_{0, 0};
  std::vector<int> seq_begin_{0};
  int64_t rows_total_ = 0, seqs_total_ = 0;
  bool canonical_ = false;
  Collectives* dp_ = nullptr;
};

}  // namespace moerl
