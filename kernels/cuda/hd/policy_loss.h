// hd/policy_loss.h — the RL policy loss of one sequence (sim/rl/loss.h, docs/algorithms.md) as a
// host-device function (kernels/hd.h): the rollout correction's weight, the ratio, PPO's clipped
// surrogate with the dual clip, the k3 KL to the reference, and the exact gradient with respect
// to the current log-probs, all in FP64. The policy_loss_rows op (kernels/ops.def) runs it a
// sequence at a time; on the CPU one accumulator goes through the rows in order, so every bit —
// the gradient, the per-token outputs and the totals — is that of sim/rl's policy_loss (its
// independent implementation, which tests/rl/test_loss_device.cpp compares against, bit for bit,
// for every algorithm, correction and aggregation). A device differs by its FP64 exp/expm1
// (≤ 1 ulp) and by summing the rows' totals in a fixed order.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd/arith.h"
#include "kernels/policy_loss_params.h"

namespace moerl::cuda {

// sim/rl/loss.h's Correction codes (a static_assert there checks them).
enum HdCorrection : int32_t {
  kCorrNone = 0, kCorrTis, kCorrMis, kCorrIcepop, kCorrSeqTis, kCorrSeqTisGeo, kCorrSeqMis, kCorrTisSeqMis,
  kCorrSeqMaxK3, kCorrCount
};

// std::clamp, std::min and std::max of doubles, with their comparisons (so NaNs fall as there).
MOERL_HD double hd_dclamp(double v, double lo, double hi) { return v < lo ? lo : (hi < v ? hi : v); }
MOERL_HD double hd_dclamp20(double x) { return hd_dclamp(x, -20.0, 20.0); }
MOERL_HD double hd_dmin(double a, double b) { return b < a ? b : a; }
MOERL_HD double hd_dmax(double a, double b) { return a < b ? b : a; }

MOERL_HD bool hd_correction_is_sequence_level(int32_t c) { return c >= kCorrSeqTis && c < kCorrCount; }

// The token part of a correction's weight at ρ = exp(clamp(log ρ_t, ±20)) (sim/rl/corrections.cpp).
MOERL_HD double hd_correction_token_weight(const PolicyLossParams& p, double rho) {
  switch (p.correction) {
    case kCorrTis:
    case kCorrTisSeqMis:
      return hd_dmin(hd_dmax(rho, static_cast<double>(p.correction_cap_low)), static_cast<double>(p.correction_cap));
    case kCorrMis: return rho <= p.correction_cap ? rho : 0.0;
    case kCorrIcepop: return rho >= p.icepop_low && rho <= p.icepop_high ? rho : 0.0;
    default: return 1.0;
  }
}

// The sequence factor from the sequence's log ratios log ρ_t = logp_old − logp_rollout over its
// masked tokens (1 for token-level corrections and fully masked sequences).
MOERL_HD double hd_correction_seq_weight(const PolicyLossParams& p, const float* lp_old, const float* lp_roll,
                                         const float* mask, int R) {
  if (!hd_correction_is_sequence_level(p.correction)) return 1.0;
  double sum = 0.0, len = 0.0, max_k3 = 0.0;
  for (int t = 0; t < R; ++t) {
    const double m = mask[t];
    if (m == 0.0) continue;
    const double x = hd_dsub(static_cast<double>(lp_old[t]), static_cast<double>(lp_roll[t]));
    const double xc = hd_dclamp20(x);
    sum = hd_dadd(sum, hd_dmul(m, x));
    len = hd_dadd(len, m);
    max_k3 = hd_dmax(max_k3, hd_dsub(hd_dexpm1(xc), xc));  // ρ − 1 − log ρ, accurate near ρ = 1
  }
  if (len == 0.0) return 1.0;
  const double mean = hd_ddiv(sum, len);
  switch (p.correction) {
    case kCorrSeqTis: return hd_dmin(hd_dexp(hd_dclamp20(sum)), static_cast<double>(p.correction_cap));
    case kCorrSeqTisGeo: return hd_dmin(hd_dexp(hd_dclamp20(mean)), static_cast<double>(p.correction_cap));
    case kCorrSeqMis:
    case kCorrTisSeqMis: {
      const double geo = hd_dexp(hd_dclamp20(mean));
      return geo >= p.seq_mask_low && geo <= p.seq_mask_high ? 1.0 : 0.0;
    }
    case kCorrSeqMaxK3: return max_k3 <= p.seq_k3_max ? 1.0 : 0.0;
    default: return 1.0;
  }
}

// One sequence's row of R response tokens (sim/rl/algorithm.cpp, policy_loss): for each token with
// mask[t] ≠ 0, dlogp[t] = scale·m·dℓ/dlogp_new; ratio[t], weight[t], term[t] as LossOutput's (1, 1,
// 0 where masked; each may be null); acc[kLossTotals] += the row's totals, token by token.
// lp_new and lp_ref are read only where mask[t] ≠ 0; gamma (null: 1) is RSPO's router-shift weight.
MOERL_HD void hd_policy_loss_row(float* dlogp, float* ratio, float* weight, float* term, double* acc,
                                 const float* lp_new, const float* lp_old, const float* lp_roll, const float* mask,
                                 const float* lp_ref, const float* gamma, double A, double scale, int R,
                                 const PolicyLossParams& p) {
  const double w_seq = hd_correction_seq_weight(p, lp_old, lp_roll, mask, R);
  double s_seq = 1.0, ds_seq = 0.0;  // GSPO's s_i and ds_i/dlogp_new
  if (p.ratio == PolicyRatio::sequence) {
    double sum = 0.0, len = 0.0;
    for (int t = 0; t < R; ++t) {
      if (mask[t] == 0.0f) continue;  // m·x = ±0 there: the sums are unchanged
      sum = hd_dadd(sum, hd_dmul(static_cast<double>(mask[t]), hd_dsub(static_cast<double>(lp_new[t]), static_cast<double>(lp_old[t]))));
      len = hd_dadd(len, static_cast<double>(mask[t]));
    }
    const double mean = hd_ddiv(sum, hd_dmax(len, 1.0));
    s_seq = hd_dexp(hd_dmin(mean, 10.0));
    ds_seq = mean < 10.0 ? s_seq : 0.0;
  }
  const double lo = 1.0 - p.clip_low, hi = 1.0 + p.clip_high;
  for (int t = 0; t < R; ++t) {
    if (mask[t] == 0.0f) {
      if (ratio) ratio[t] = 1.0f;
      if (weight) weight[t] = 1.0f;
      if (term) term[t] = 0.0f;
      continue;
    }
    const double m = mask[t];
    const double rho = hd_dexp(hd_dclamp20(hd_dsub(static_cast<double>(lp_old[t]), static_cast<double>(lp_roll[t]))));
    const double w = hd_dmul(hd_correction_token_weight(p, rho), w_seq);
    // the ratio: value x, its derivative dx, the weight it reports
    double x = s_seq, dx = ds_seq, xw = 1.0;
    if (p.ratio == PolicyRatio::token) {
      const double g = gamma ? static_cast<double>(gamma[t]) : 1.0;
      const double raw = hd_dsub(static_cast<double>(lp_new[t]), static_cast<double>(lp_old[t]));
      const double d = hd_dclamp20(raw);
      x = hd_dmul(g, hd_dexp(d));
      dx = raw == d ? x : 0.0;
      xw = g;
    }
    // PPO's clipped surrogate, then the dual clip for A < 0
    const double l1 = hd_dmul(-A, x);
    const double l2 = hd_dmul(-A, hd_dclamp(x, lo, hi));
    double s_val, s_grad = 0.0;
    bool clipped = false;
    if (l2 > l1) {
      s_val = l2;
      clipped = true;
    } else {
      s_val = l1;
      s_grad = hd_dmul(-A, dx);
    }
    if (p.dual_clip > 0.0f && A < 0.0 && s_val > hd_dmul(-A, static_cast<double>(p.dual_clip))) {
      s_val = hd_dmul(-A, static_cast<double>(p.dual_clip));
      s_grad = 0.0;
      clipped = true;
    }
    double tm = hd_dmul(w, s_val), grad = hd_dmul(w, s_grad);
    const double sm = hd_dmul(scale, m);
    if (p.kl_coef > 0.0f) {  // k3 = e^x − x − 1, x = logp_ref − logp_new (verl's low_var_kl)
      const double raw = hd_dsub(static_cast<double>(lp_ref[t]), static_cast<double>(lp_new[t]));
      const double xk = hd_dclamp20(raw);
      const double v = hd_dsub(hd_dsub(hd_dexp(xk), xk), 1.0);
      const double kv = hd_dclamp(v, -10.0, 10.0);
      const double kg = (raw == xk && v == kv) ? -hd_dsub(hd_dexp(xk), 1.0) : 0.0;
      const double beta = p.kl_coef;
      tm = hd_dadd(tm, hd_dmul(beta, kv));
      grad = hd_dadd(grad, hd_dmul(beta, kg));
      acc[kLossKl] = hd_dadd(acc[kLossKl], hd_dmul(hd_dmul(sm, beta), kv));
    }
    acc[kLossSum] = hd_dadd(acc[kLossSum], hd_dmul(sm, tm));
    dlogp[t] = static_cast<float>(hd_dmul(sm, grad));
    if (ratio) ratio[t] = static_cast<float>(x);
    if (weight) weight[t] = static_cast<float>(p.correction == kCorrNone ? xw : w);
    if (term) term[t] = static_cast<float>(tm);
    acc[kLossTokens] = hd_dadd(acc[kLossTokens], 1.0);
    acc[kLossClipped] = hd_dadd(acc[kLossClipped], clipped ? 1.0 : 0.0);
    acc[kLossMasked] = hd_dadd(acc[kLossMasked], w == 0.0 ? 1.0 : 0.0);
    if (A < 0.0) acc[kLossRatioMaxNegAdv] = hd_dmax(acc[kLossRatioMaxNegAdv], static_cast<double>(static_cast<float>(x)));
  }
}

}  // namespace moerl::cuda
