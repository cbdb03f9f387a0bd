// seq_corrections.h — the sequence-level rollout corrections (docs/algorithms.md, "Rollout
// corrections"): one weight per sequence from the per-token log ratios log ρ_t = log π_old −
// log π_rollout (stop-gradient constants), which the policy loss multiplies into every token's
// surrogate of that sequence. The token-level part of a correction stays in ppo_terms.h.
//
// Each weight is a pure function of one sequence's R log ratios and mask, so the diagnostics
// (sim/rl/diagnostics.h) can ask what any correction would do, active or not.
#pragma once

#include "sim/rl/loss.h"

namespace moerl::rl {

// Whether a correction has a sequence factor (seq-tis, seq-tis-geo, seq-mis, tis+seq-mis,
// seq-max-k3).
bool correction_is_sequence_level(Correction kind);

// Statistics of one sequence's log ratios over its masked tokens, in double precision.
struct SeqLogRatio {
  double sum = 0.0;      // Σ_t m·log ρ_t  (log of the product ratio ρ_seq)
  double len = 0.0;      // Σ_t m
  double max_k3 = 0.0;   // max_t k3(ρ_t) = ρ_t − 1 − log ρ_t, ρ_t = exp(clamp(log ρ_t, ±20))
  double mean() const { return len > 0.0 ? sum / len : 0.0; }  // log of the geometric mean
};
// logp_old, logp_rollout, mask: [R] rows of one sequence (mask may be null: all ones).
SeqLogRatio seq_log_ratio(const float* logp_old, const float* logp_rollout, const float* mask, int R);

// The sequence factor w_i of `kind` (1 for token-level corrections and fully masked sequences):
// seq-tis min(exp(clamp(sum, ±20)), C); seq-tis-geo min(exp(clamp(mean, ±20)), C);
// seq-mis and tis+seq-mis 1[lo ≤ exp(mean) ≤ hi]; seq-max-k3 1[max_k3 ≤ k].
double seq_correction_weight(const LossConfig& c, Correction kind, const SeqLogRatio& s);

}  // namespace moerl::rl
