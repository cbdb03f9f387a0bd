// seq_corrections.cpp — see seq_corrections.h.
#include "sim/rl/seq_corrections.h"

#include <algorithm>
#include <cmath>

#include "sim/rl/ppo_terms.h"

namespace moerl::rl {

bool correction_is_sequence_level(Correction kind) {
  switch (kind) {
    case Correction::seq_tis:
    case Correction::seq_tis_geo:
    case Correction::seq_mis:
    case Correction::tis_seq_mis:
    case Correction::seq_max_k3: return true;
    case Correction::none:
    case Correction::tis:
    case Correction::mis:
    case Correction::icepop: return false;
  }
  return false;
}

SeqLogRatio seq_log_ratio(const float* logp_old, const float* logp_rollout, const float* mask, int R) {
  SeqLogRatio s;
  for (int t = 0; t < R; ++t) {
    const double m = mask ? mask[t] : 1.0;
    if (m == 0.0) continue;
    const double x = static_cast<double>(logp_old[t]) - logp_rollout[t];
    const double xc = clamp20(x);
    s.sum += m * x;
    s.len += m;
    s.max_k3 = std::max(s.max_k3, std::expm1(xc) - xc);  // ρ − 1 − log ρ, accurate near ρ = 1
  }
  return s;
}

double seq_correction_weight(const LossConfig& c, Correction kind, const SeqLogRatio& s) {
  if (s.len == 0.0) return 1.0;
  const double cap = c.correction_cap;
  switch (kind) {
    case Correction::seq_tis: return std::min(std::exp(clamp20(s.sum)), cap);
    case Correction::seq_tis_geo: return std::min(std::exp(clamp20(s.mean())), cap);
    case Correction::seq_mis:
    case Correction::tis_seq_mis: {
      const double geo = std::exp(clamp20(s.mean()));
      return geo >= c.seq_mask_low && geo <= c.seq_mask_high ? 1.0 : 0.0;
    }
    case Correction::seq_max_k3: return s.max_k3 <= c.seq_k3_max ? 1.0 : 0.0;
    case Correction::none:
    case Correction::tis:
    case Correction::mis:
    case Correction::icepop: return 1.0;
  }
  return 1.0;
}

}  // namespace moerl::rl
