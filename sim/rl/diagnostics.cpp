// diagnostics.cpp — see diagnostics.h.
#include "sim/rl/diagnostics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/io/results.h"
#include "sim/rl/ppo_terms.h"
#include "sim/rl/corrections.h"

namespace moerl {

namespace {
int prob_bucket(double logp) {
  const double p = std::exp(logp);
  int b = 0;
  while (b < kProbBuckets - 1 && p >= kProbBucketEdges[static_cast<size_t>(b)]) ++b;
  return b;
}

// (Σw)² / (n Σw²); 1 for an empty or all-zero set (nothing to be unequal).
double effective_sample_size(double sum, double sum_sq, double n) {
  return n > 0.0 && sum_sq > 0.0 ? sum * sum / (n * sum_sq) : 1.0;
}
// n Σw² / (Σw)² − 1, clamped at 0 against rounding; 0 for an empty or all-zero set.
double chi_square(double sum, double sum_sq, double n) {
  return n > 0.0 && sum > 0.0 ? std::max(0.0, n * sum_sq / (sum * sum) - 1.0) : 0.0;
}
}  // namespace

CorrectionDiagnostics correction_diagnostics(const LossConfig& c, const float* logp_old, const float* logp_rollout,
                                             const float* mask, int S, int R) {
  using rl::clamp20;
  CorrectionDiagnostics d;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  d.bucket_tokens.assign(kProbBuckets, 0.0);
  d.bucket_abs_log_ratio.assign(kProbBuckets, 0.0);
  d.bucket_ratio_gt2.assign(kProbBuckets, 0.0);
  const double log2 = std::log(2.0);
  double n = 0.0, rho_sum = 0.0, rho_sq = 0.0, seq_sum = 0.0, seq_sq = 0.0, seqs = 0.0;
  for (int i = 0; i < S; ++i) {
    const size_t row = static_cast<size_t>(i) * R;
    for (int t = 0; t < R; ++t) {
      const size_t j = row + t;
      if (mask && mask[j] == 0.0f) continue;
      const double x = static_cast<double>(logp_old[j]) - logp_rollout[j];
      const double xc = clamp20(x);
      const double rho = std::exp(xc);
      d.k1 -= x;
      d.k3 += std::expm1(xc) - xc;
      rho_sum += rho;
      rho_sq += rho * rho;
      n += 1.0;
      d.tis_truncated += rl::correction_weight(c, Correction::tis, rho) != rho;
      d.mis_masked += rl::correction_weight(c, Correction::mis, rho) == 0.0;
      d.icepop_masked += rl::correction_weight(c, Correction::icepop, rho) == 0.0;
      const int b = prob_bucket(logp_old[j]);
      d.bucket_tokens[b] += 1.0;
      d.bucket_abs_log_ratio[b] += std::fabs(x);
      d.bucket_ratio_gt2[b] += std::fabs(x) > log2;
    }
    const rl::SeqLogRatio s = rl::seq_log_ratio(logp_old + row, logp_rollout + row, mask ? mask + row : nullptr, R);
    if (s.len == 0.0) continue;  // a sequence left out of the loss entirely
    seqs += 1.0;
    const double rho_seq = std::exp(clamp20(s.sum));
    seq_sum += rho_seq;
    seq_sq += rho_seq * rho_seq;
    d.seq_log_ratio_abs_mean += std::fabs(s.sum);
    d.seq_tis_truncated += rl::seq_correction_weight(c, Correction::seq_tis, s) != rho_seq;
    d.seq_tis_geo_truncated += rl::seq_correction_weight(c, Correction::seq_tis_geo, s) != std::exp(clamp20(s.mean()));
    d.seq_mis_masked += rl::seq_correction_weight(c, Correction::seq_mis, s) == 0.0;
    d.seq_max_k3_masked += rl::seq_correction_weight(c, Correction::seq_max_k3, s) == 0.0;
  }
  const double nt = n > 0.0 ? n : 1.0, ns = seqs > 0.0 ? seqs : 1.0;
  d.k1 /= nt;
  d.k3 /= nt;
  d.chi2_token = chi_square(rho_sum, rho_sq, n);
  d.chi2_seq = chi_square(seq_sum, seq_sq, seqs);
  d.ess_token = effective_sample_size(rho_sum, rho_sq, n);
  d.ess_seq = effective_sample_size(seq_sum, seq_sq, seqs);
  d.seq_log_ratio_abs_mean /= ns;
  for (double* v : {&d.tis_truncated, &d.mis_masked, &d.icepop_masked}) *v /= nt;
  for (double* v : {&d.seq_tis_truncated, &d.seq_tis_geo_truncated, &d.seq_mis_masked, &d.seq_max_k3_masked}) *v /= ns;
  for (int b = 0; b < kProbBuckets; ++b) {
    const double k = d.bucket_tokens[b];
    d.bucket_abs_log_ratio[b] = k > 0.0 ? d.bucket_abs_log_ratio[b] / k : nan;
    d.bucket_ratio_gt2[b] = k > 0.0 ? d.bucket_ratio_gt2[b] / k : nan;
  }
  return d;
}

void correction_diagnostics_record(RunResults* res, const CorrectionDiagnostics& d) {
  res->set("rc_k1", d.k1);
  res->set("rc_k3", d.k3);
  res->set("rc_chi2_token", d.chi2_token);
  res->set("rc_chi2_seq", d.chi2_seq);
  res->set("rc_ess_token", d.ess_token);
  res->set("rc_ess_seq", d.ess_seq);
  res->set("rc_seq_log_ratio_abs_mean", d.seq_log_ratio_abs_mean);
  res->set("rc_tis_truncated_frac", d.tis_truncated);
  res->set("rc_mis_masked_frac", d.mis_masked);
  res->set("rc_icepop_masked_frac", d.icepop_masked);
  res->set("rc_seq_tis_truncated_frac", d.seq_tis_truncated);
  res->set("rc_seq_tis_geo_truncated_frac", d.seq_tis_geo_truncated);
  res->set("rc_seq_mis_masked_frac", d.seq_mis_masked);
  res->set("rc_seq_max_k3_masked_frac", d.seq_max_k3_masked);
  res->set_row("rc_bucket_tokens", {kProbBuckets}, d.bucket_tokens);
  res->set_row("rc_bucket_abs_log_ratio", {kProbBuckets}, d.bucket_abs_log_ratio);
  res->set_row("rc_bucket_ratio_gt2_frac", {kProbBuckets}, d.bucket_ratio_gt2);
}

}  // namespace moerl
