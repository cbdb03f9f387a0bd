// bench_backend.h — the Backend `moerl bench` runs its model on: every op forwards to the
// backend run.backend selected (the CPU's or a GPU's), unchanged, and the bench watches through it
// what it cannot see from outside the model:
//  * the time of every op (TimingBackend), so each phase's time splits into the linear layers,
//    attention, the other ops and what runs outside any op (the model's own loops, copies and
//    zero-fills, the MoE dispatcher's permutations, the sampler) — measured, not estimated;
//  * during a rollout, the end of every LM-head call (the prefill's, then one per decode step),
//    so the time of each decode step and its attention are known position by position;
//  * the long-answer workload's length schedule (sim/bench/workload.h): during a rollout armed
//    with targets, the LM head's output for sequence s gets its EOS logit set to −10⁴ before
//    response position ℓ_s − 1 and to +10⁴ at it, so sampling draws EOS exactly there (w = 0 and
//    w = 1 in the sampler's double arithmetic). rollout_generate, the model and the sampler run
//    as in the RL step; only that one logit column is edited. When the decode batch is compacted
//    (finished rows leave it), the row of each sequence follows from the schedule itself: the
//    rows of the sequences that drew EOS leave as rollout_compact_plan says.
// What it is not: a second backend. A step on it computes the bits of a step on the inner backend
// (the edit aside), and nothing is copied or reordered; the clock reads cost ≈ 50 ns per op call
// (≈ 2 ms of a 256-step rollout).
//
// The ops are called from the model's thread (one call per layer and phase, parallel inside), so
// the rollout bookkeeping needs no locks; the time counters are atomic only to stay correct if a
// caller ever runs ops concurrently.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace moerl {

// Every op forwarded to `inner` (generated from kernels/ops.def, like OpsBackend) and timed.
class TimingBackend : public Backend {
 public:
  explicit TimingBackend(const Backend& inner) : inner_(inner) {}
  BackendKind kind() const override { return inner_.kind(); }
  std::string describe() const override { return inner_.describe(); }
  MOERL_BACKEND_FORWARD_MEMORY(inner_)
#define MOERL_OP(name, params, args)                     \
  void name params const override {                      \
    const Clock::time_point moerl_start_ = Clock::now(); \
    inner_.name args;                                    \
    add_time(Op::name, moerl_start_);                    \
  }
#include "kernels/ops.def"

  // Seconds spent in op since construction (read differences).
  double op_seconds(Op op) const { return 1e-9 * static_cast<double>(ns_[static_cast<size_t>(op)].load()); }
  // [kOpCount] the same for every op.
  std::vector<double> op_seconds() const;
  // attention_forward + attention_backward + attention_decode.
  double attention_seconds() const;

 protected:
  using Clock = std::chrono::steady_clock;
  void add_time(Op op, Clock::time_point t0) const {
    ns_[static_cast<size_t>(op)] += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
  const Backend& inner_;

 private:
  mutable std::array<std::atomic<int64_t>, kOpCount> ns_{};
};

class BenchBackend final : public TimingBackend {
 public:
  explicit BenchBackend(const Backend& inner) : TimingBackend(inner) {}

  // Between rollout_begin and rollout_end, LM-head calls are the rollout's: call 0 (the prefill)
  // gives the logits of response position 0, the decode step at position P + r − 1 those of r.
  // targets (n rows, this rank's block; null = no edit): response length ℓ of each row, EOS
  // included; eos the token id (≥ 0 when targets are given).
  void rollout_begin(int P, int eos, const int32_t* targets, int n);
  void rollout_end();
  // The last rollout's decode steps: [steps] seconds from one LM-head call to the next (the
  // sampling of position r − 1, then the decode step feeding it, attending over P + r keys), and
  // the seconds of attention inside each; prefill_seconds from rollout_begin to the prefill's LM
  // head.
  const std::vector<double>& step_seconds() const { return step_s_; }
  const std::vector<double>& step_attention_seconds() const { return step_att_s_; }
  double prefill_seconds() const { return prefill_s_; }

  void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                      const LinearNumerics& nm) const override;

 private:
  mutable bool in_rollout_ = false;
  mutable int P_ = 0, eos_ = -1, n_ = 0;
  mutable const int32_t* targets_ = nullptr;
  // Decode compaction (rollout_generate under a row-independent profile): the sequence of each
  // row of the decode batch, followed as rollout_compact_plan drops the rows of the sequences
  // that drew their EOS (the schedule says which); masked_: the rows kept their places.
  mutable std::vector<int32_t> rows_;
  mutable std::vector<uint8_t> done_;
  mutable bool masked_ = false;
  mutable Clock::time_point begin_, last_mark_;
  mutable double att_at_mark_ = 0.0;
  mutable int marks_ = 0;
  mutable double prefill_s_ = 0.0;
  mutable std::vector<double> step_s_, step_att_s_;
};

}  // namespace moerl
