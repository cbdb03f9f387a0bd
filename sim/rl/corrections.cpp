// corrections.cpp — the correction table (corrections.h): each row's weights, beside it.
#include "sim/rl/corrections.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/hd/policy_loss.h"
#include "sim/rl/ppo_terms.h"
#include "sim/rl/registry.h"

namespace moerl::rl {

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

namespace {
double one(const LossConfig&, double) { return 1.0; }
// tis: clamp(ρ, C_low, C); ρ > 0, so C_low = 0 leaves min(ρ, C) bit for bit.
double truncated(const LossConfig& c, double rho) {
  return std::min(std::max(rho, static_cast<double>(c.correction_cap_low)), static_cast<double>(c.correction_cap));
}
double masked_above_cap(const LossConfig& c, double rho) { return rho <= c.correction_cap ? rho : 0.0; }
double icepop_band(const LossConfig& c, double rho) { return rho >= c.icepop_low && rho <= c.icepop_high ? rho : 0.0; }

double product_truncated(const LossConfig& c, const SeqLogRatio& s) {
  return std::min(std::exp(clamp20(s.sum)), static_cast<double>(c.correction_cap));
}
double geometric_truncated(const LossConfig& c, const SeqLogRatio& s) {
  return std::min(std::exp(clamp20(s.mean())), static_cast<double>(c.correction_cap));
}
double geometric_band(const LossConfig& c, const SeqLogRatio& s) {
  const double geo = std::exp(clamp20(s.mean()));
  return geo >= c.seq_mask_low && geo <= c.seq_mask_high ? 1.0 : 0.0;
}
double max_k3_mask(const LossConfig& c, const SeqLogRatio& s) { return s.max_k3 <= c.seq_k3_max ? 1.0 : 0.0; }
}  // namespace

const std::vector<CorrectionInfo>& correction_registry() {
  using L = CorrectionLevel;
  static const std::vector<CorrectionInfo> table = {
      {Correction::none, L::token, "1", one, nullptr},
      {Correction::tis, L::token, "clamp(rho_t, C_low, C)", truncated, nullptr},
      {Correction::mis, L::token, "rho_t 1[rho_t <= C]", masked_above_cap, nullptr},
      {Correction::icepop, L::token, "rho_t 1[alpha <= rho_t <= beta] (rl.algorithm = icepop)", icepop_band, nullptr},
      {Correction::seq_tis, L::sequence, "min(rho_seq, C), rho_seq the product ratio", one, product_truncated},
      {Correction::seq_tis_geo, L::sequence, "min(geometric-mean ratio, C)", one, geometric_truncated},
      {Correction::seq_mis, L::sequence, "1[lo <= geometric-mean ratio <= hi]", one, geometric_band},
      {Correction::tis_seq_mis, L::sequence, "tis x seq-mis", truncated, geometric_band},
      {Correction::seq_max_k3, L::sequence, "1[max_t k3_t <= k]", one, max_k3_mask},
  };
  return table;
}

// The policy_loss_rows op's row function (kernels/cuda/hd/policy_loss.h) spells the codes too.
static_assert(cuda::kCorrNone == static_cast<int>(Correction::none) && cuda::kCorrTis == static_cast<int>(Correction::tis) &&
              cuda::kCorrMis == static_cast<int>(Correction::mis) && cuda::kCorrIcepop == static_cast<int>(Correction::icepop) &&
              cuda::kCorrSeqTis == static_cast<int>(Correction::seq_tis) &&
              cuda::kCorrSeqTisGeo == static_cast<int>(Correction::seq_tis_geo) &&
              cuda::kCorrSeqMis == static_cast<int>(Correction::seq_mis) &&
              cuda::kCorrTisSeqMis == static_cast<int>(Correction::tis_seq_mis) &&
              cuda::kCorrSeqMaxK3 == static_cast<int>(Correction::seq_max_k3) && cuda::kCorrCount == kCorrectionCount);

// The table is indexed by the enum (tests/rl/test_registry.cpp checks each row's place).
static_assert(kCorrectionNames.size() == kCorrectionCount);

const AlgorithmInfo* correction_forced_by(Correction kind) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (a.correction == kind) return &a;
  return nullptr;
}

std::vector<std::string> correction_settable_names() {
  std::vector<std::string> names;
  for (const CorrectionInfo& k : correction_registry())
    if (!correction_forced_by(k.kind)) names.emplace_back(correction_name(k.kind));
  return names;
}

std::string correction_must_be() {
  std::string msg = must_be(correction_settable_names());
  for (const CorrectionInfo& k : correction_registry())
    if (const AlgorithmInfo* a = correction_forced_by(k.kind))
      msg += std::string(" (for ") + correction_name(k.kind) + " set rl.algorithm = " + a->name + ")";
  return msg;
}

std::string correction_key_doc() {
  std::string doc = "train/inference IS correction, rho_t = pi_old/pi_rollout (docs/algorithms.md):";
  std::string composing, forcing;
  for (const CorrectionInfo& k : correction_registry())
    if (!correction_forced_by(k.kind)) doc += std::string(" ") + correction_name(k.kind) + " (" + k.doc + ");";
  for (const AlgorithmInfo& a : algorithm_registry())
    (a.correction ? forcing : composing) += std::string(", ") + a.name;
  return doc + " composes with " + composing.substr(2) + "; " + forcing.substr(2) +
         " ignores it (its own band mask); a no-op with rl.old_logprobs = rollout (rho = 1)";
}

}  // namespace moerl::rl
