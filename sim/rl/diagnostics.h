// diagnostics.h — rollout-correction diagnostics of one step (docs/metrics.md, "Rollout
// correction diagnostics"): how far the rollout engine's μ is from the train engine's π_old on
// the sampled response tokens, what every correction would do to the batch with its configured
// thresholds (active or not), and where by token probability the mismatch lives.
//
// Computed on the whole batch (S sequences × R response positions, the tokens the loss mask keeps;
// sequences it leaves out entirely do not count), O(S·R).
// ρ_t = π_old/μ with log ρ_t = logp_old − logp_rollout; ρ_seq = exp(clamp(Σ_t log ρ_t, ±20)).
#pragma once

#include <array>
#include <vector>

#include "sim/rl/loss.h"

namespace moerl {

class RunResults;

// Upper edges of the probability buckets of the sampled token under π_old:
// [0, 1e-3), [1e-3, 1e-2), [1e-2, 0.1), [0.1, 0.5), [0.5, 1].
inline constexpr int kProbBuckets = 5;
inline constexpr std::array<double, kProbBuckets - 1> kProbBucketEdges = {1e-3, 1e-2, 1e-1, 0.5};

struct CorrectionDiagnostics {
  double k1 = 0.0;          // mean_t (log μ − log π_old) = −mean log ρ_t
  double k3 = 0.0;          // mean_t (ρ_t − 1 − log ρ_t)
  // χ² of the weights, self-normalised: mean w² / (mean w)² − 1 ≥ 0 (= mean w² − 1 when the
  // weights average 1, as the exact ρ does under μ); ESS = 1/(1 + χ²) of the same weights.
  double chi2_token = 0.0;  // over ρ_t
  double chi2_seq = 0.0;    // over ρ_seq,i
  double ess_token = 1.0;   // (Σ_t ρ_t)² / (n Σ_t ρ_t²), in (0, 1]
  double ess_seq = 1.0;     // (Σ_i ρ_seq,i)² / (S Σ_i ρ_seq,i²)
  double seq_log_ratio_abs_mean = 0.0;  // mean_i |Σ_t m·log ρ_t|
  // Shares of tokens (token-level corrections) or sequences (sequence-level ones) whose weight
  // each correction changes, with the configured thresholds:
  double tis_truncated = 0.0;          // tokens with ρ > C or ρ < C_low
  double mis_masked = 0.0;             // tokens with ρ > C
  double icepop_masked = 0.0;          // tokens with ρ ∉ [α, β]
  double seq_tis_truncated = 0.0;      // sequences with ρ_seq > C
  double seq_tis_geo_truncated = 0.0;  // sequences with exp(mean log ρ) > C
  double seq_mis_masked = 0.0;         // sequences with exp(mean log ρ) ∉ [lo, hi]
  double seq_max_k3_masked = 0.0;      // sequences with max_t k3 > k
  // Per bucket of π_old(y_t): tokens, mean |log μ − log π_old| (NaN when empty), share with
  // |log ρ_t| > log 2 (the ratio beyond 2 either way; NaN when empty).
  std::vector<double> bucket_tokens, bucket_abs_log_ratio, bucket_ratio_gt2;
};

// logp_old, logp_rollout, mask: [S, R] (mask null: every token); the bucket is read from logp_old.
CorrectionDiagnostics correction_diagnostics(const LossConfig& c, const float* logp_old, const float* logp_rollout,
                                             const float* mask, int S, int R);

// Writes every rc_* metric of the current step.
void correction_diagnostics_record(RunResults* res, const CorrectionDiagnostics& d);

}  // namespace moerl
