// parallel.cpp — see parallel.h.
#include "models/parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace moerl {

void ModelParallel::validate(const ModelConfig& cfg) const {
  const int ep_n = ep_size(), dp_n = dp_size();
  if (ep_n != dp_n)
    throw std::invalid_argument("parallel: expert-parallel size " + std::to_string(ep_n) +
                                " differs from data-parallel size " + std::to_string(dp_n) +
                                " (expert-data parallelism is not implemented: EP = DP = the run's ranks)");
  if (cfg.is_moe() && cfg.n_experts % ep_n != 0)
    throw std::invalid_argument("model.n_experts = " + std::to_string(cfg.n_experts) +
                                ": not divisible by the " + std::to_string(ep_n) +
                                " expert-parallel ranks (each rank owns n_experts / ranks experts)");
  if (reduce_chunks < 0)
    throw std::invalid_argument("run.reduce_chunks = " + std::to_string(reduce_chunks) + ": must be >= 1");
  if (reduce_chunks > 0 && reduce_chunks % dp_n != 0)
    throw std::invalid_argument("run.reduce_chunks = " + std::to_string(reduce_chunks) +
                                ": deterministic mode needs the " + std::to_string(dp_n) +
                                " data-parallel ranks to divide it (each rank sums whole chunks)");
}

namespace {
std::vector<int> uniform_seq_begin(int B, int T) {
  std::vector<int> b0(static_cast<size_t>(B) + 1);
  for (int b = 0; b <= B; ++b) b0[b] = b * T;
  return b0;
}
}  // namespace

RowSums::RowSums(const ModelParallel& par, int64_t B_total, int B, int T)
    : RowSums(par, B_total, uniform_seq_begin(B, T), B_total * T) {}

RowSums::RowSums(const ModelParallel& par, int64_t B_total, std::vector<int> seq_begin, int64_t rows_total)
    : seq_begin_(std::move(seq_begin)), rows_total_(rows_total), seqs_total_(B_total),
      canonical_(par.canonical()), dp_(par.dp) {
  const int B = static_cast<int>(seq_begin_.size()) - 1;
  if (!canonical_) {
    bounds_ = {0, seq_begin_[B]};
    return;
  }
  const int n = par.dp_size(), r = par.dp_rank(), C = par.reduce_chunks;
  const SeqBlock mine = dp_block(B_total, n, r);
  bounds_.clear();
  for (int c = C / n * r; c <= C / n * (r + 1); ++c)
    bounds_.push_back(seq_begin_[static_cast<size_t>(B_total * c / C - mine.begin)]);
}

namespace {
template <class F>
void combine_impl(F* total, const F* partials, int64_t m, int groups, bool canonical,
                  Collectives* dp) {
  if (!canonical) {  // one group per rank: the plain (serial on one rank) sum
    std::copy_n(partials, m, total);
    if (dp && dp->size() > 1) dp->allreduce_sum(total, m);
    return;
  }
  std::vector<F> all;
  const F* p = partials;
  if (dp && dp->size() > 1) {
    const std::vector<int64_t> counts(static_cast<size_t>(dp->size()), groups * m);
    all.resize(static_cast<size_t>(groups * m * dp->size()));
    dp->allgatherv(all.data(), counts.data(), partials);
    p = all.data();
    groups *= dp->size();
  }
  std::copy_n(p, m, total);
  for (int g = 1; g < groups; ++g)
    for (int64_t j = 0; j < m; ++j) total[j] += p[g * m + j];
}
}  // namespace

void RowSums::combine(double* total, const double* partials, int m) const {
  combine_impl(total, partials, m, groups(), canonical_, dp_);
}
void RowSums::combine(float* total, const float* partials, int64_t m) const {
  combine_impl(total, partials, m, groups(), canonical_, dp_);
}

}  // namespace moerl
