// bench_backend.cpp — see bench_backend.h.
#include "sim/bench/bench_backend.h"

#include <stdexcept>
#include <string>

#include "models/sites.h"
#include "sim/rl/rollout.h"

namespace moerl {

namespace {
// The EOS logit's edit: far enough from any logit of a model with finite weights that exp of the
// difference is 0 in double (exp(−10⁴) underflows), close enough to stay finite in every sum.
constexpr float kForce = 1e4f;
}  // namespace

std::vector<double> TimingBackend::op_seconds() const {
  std::vector<double> v(kOpCount);
  for (int i = 0; i < kOpCount; ++i) v[i] = op_seconds(static_cast<Op>(i));
  return v;
}

double TimingBackend::attention_seconds() const {
  return op_seconds(Op::attention_forward) + op_seconds(Op::attention_backward) + op_seconds(Op::attention_decode);
}

void BenchBackend::rollout_begin(int P, int eos, const int32_t* targets, int n) {
  if (targets && eos < 0) throw std::invalid_argument("BenchBackend: targets need an eos id >= 0");
  in_rollout_ = true;
  P_ = P;
  eos_ = eos;
  targets_ = targets;
  n_ = n;
  rows_.resize(static_cast<size_t>(n));
  for (int b = 0; b < n; ++b) rows_[static_cast<size_t>(b)] = b;
  done_.assign(static_cast<size_t>(n), 0);
  masked_ = false;
  marks_ = 0;
  prefill_s_ = 0.0;
  step_s_.clear();
  step_att_s_.clear();
  begin_ = Clock::now();
  att_at_mark_ = attention_seconds();
}

void BenchBackend::rollout_end() {
  in_rollout_ = false;
  targets_ = nullptr;
}

void BenchBackend::linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                                  const LinearNumerics& nm) const {
  TimingBackend::linear_forward(out, inp, w, M, nm);
  if (!in_rollout_ || nm.reduce.key.site != static_cast<uint32_t>(Site::lm_head)) return;
  // Response position whose logits these are: the prefill (call 0) scores position 0, the decode
  // step at position P + r − 1 (call = P + r − 1) position r.
  const int64_t call = static_cast<int64_t>(nm.reduce.key.call);
  const int64_t r = call == 0 ? 0 : call - P_ + 1;
  if (targets_) {
    // The logits of position r come from the step fed position r − 1; rows of sequences that drew
    // EOS at r − 2 or before have left a compacted batch.
    if (r >= 2 && !masked_) {
      for (int s = 0; s < n_; ++s)
        if (targets_[s] - 1 == r - 2) done_[static_cast<size_t>(s)] = 1;
      rollout_compact_plan(&rows_, done_);
    }
    if (M == n_ && static_cast<int>(rows_.size()) != n_) masked_ = true;  // finished rows stayed
    if (masked_) {
      rows_.resize(static_cast<size_t>(n_));
      for (int b = 0; b < n_; ++b) rows_[static_cast<size_t>(b)] = b;
    }
    if (M != static_cast<int>(rows_.size()))
      throw std::logic_error("BenchBackend: LM head over " + std::to_string(M) + " rows in a rollout of " +
                             std::to_string(n_) + " sequences, " + std::to_string(rows_.size()) + " of them going");
    const int V = w.N;
    for (int b = 0; b < M; ++b) {
      const int64_t at = static_cast<int64_t>(targets_[rows_[static_cast<size_t>(b)]]) - 1;  // EOS's response position
      if (r < at) out[static_cast<size_t>(b) * V + eos_] = -kForce;
      else if (r == at) out[static_cast<size_t>(b) * V + eos_] = kForce;
    }
  }
  const Clock::time_point now = Clock::now();
  const double att = attention_seconds();
  if (marks_ == 0) {
    prefill_s_ = std::chrono::duration<double>(now - begin_).count();
  } else {
    step_s_.push_back(std::chrono::duration<double>(now - last_mark_).count());
    step_att_s_.push_back(att - att_at_mark_);
  }
  ++marks_;
  last_mark_ = now;
  att_at_mark_ = att;
}

}  // namespace moerl
