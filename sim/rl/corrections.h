// corrections.h — the rollout corrections (rl.correction; docs/algorithms.md, "Rollout
// corrections"), one row each in one table: a correction is a token weight from ρ_t = π_old/μ
// (a stop-gradient constant) and, for the sequence-level ones, a factor per sequence from the
// sequence's log ratios log ρ_t = log π_old − log μ, which the policy loss multiplies into every
// token's surrogate of that sequence. Names are kCorrectionNames (loss.h).
//
// Each weight is a pure function of one token's ρ or one sequence's R log ratios and mask, so
// the diagnostics (sim/rl/diagnostics.h) can ask what any correction would do, active or not.
#pragma once

#include <string>
#include <vector>

#include "sim/rl/loss.h"

namespace moerl {
struct AlgorithmInfo;
}

namespace moerl::rl {

// Statistics of one sequence's log ratios over its masked tokens, in double precision.
struct SeqLogRatio {
  double sum = 0.0;      // Σ_t m·log ρ_t  (log of the product ratio ρ_seq)
  double len = 0.0;      // Σ_t m
  double max_k3 = 0.0;   // max_t k3(ρ_t) = ρ_t − 1 − log ρ_t, ρ_t = exp(clamp(log ρ_t, ±20))
  double mean() const { return len > 0.0 ? sum / len : 0.0; }  // log of the geometric mean
};
// logp_old, logp_rollout: [R] rows of one sequence (mask may be null: all ones).
SeqLogRatio seq_log_ratio(const float* logp_old, const float* logp_rollout, const float* mask, int R);

// Where a correction's weight comes from: one token's ρ, or (also) its sequence's log ratios.
enum class CorrectionLevel : uint8_t { token = 0, sequence };

struct CorrectionInfo {
  Correction kind;        // its name: correction_name(kind)
  CorrectionLevel level;  // sequence: `sequence` is its factor per sequence (names need not say so)
  const char* doc;        // w on token t of sequence i
  // The token part of the weight, ρ = exp(clamp(log ρ_t, ±20)) > 0.
  double (*token)(const LossConfig& c, double rho);
  // The sequence factor (called only for sequences with masked tokens); nullptr at token level.
  double (*sequence)(const LossConfig& c, const SeqLogRatio& s);
};

// The table, indexed by Correction (a static_assert in corrections.cpp ties it to the enum).
const std::vector<CorrectionInfo>& correction_registry();
inline const CorrectionInfo& correction_info(Correction kind) {
  return correction_registry()[static_cast<size_t>(kind)];
}

// The token part of a correction's weight; sequence-level corrections multiply it by their
// sequence factor.
inline double correction_weight(const LossConfig& c, Correction kind, double rho) {
  return correction_info(kind).token(c, rho);
}
inline bool correction_is_sequence_level(Correction kind) {
  return correction_info(kind).level == CorrectionLevel::sequence;
}
// The sequence factor w_i of `kind`: 1 for token-level corrections and fully masked sequences.
inline double seq_correction_weight(const LossConfig& c, Correction kind, const SeqLogRatio& s) {
  const CorrectionInfo& k = correction_info(kind);
  return s.len == 0.0 || !k.sequence ? 1.0 : k.sequence(c, s);
}

// The algorithm whose row forces `kind` (AlgorithmInfo::correction: icepop's band is the icepop
// algorithm), or nullptr. rl.correction accepts exactly the corrections no algorithm forces.
const AlgorithmInfo* correction_forced_by(Correction kind);
// The names rl.correction accepts, in table order.
std::vector<std::string> correction_settable_names();
// The message of a bad rl.correction: "must be none, tis, … (for icepop set rl.algorithm = icepop)".
std::string correction_must_be();

// Doc of the rl.correction key: the names a scenario may set, with their weights.
std::string correction_key_doc();

}  // namespace moerl::rl
