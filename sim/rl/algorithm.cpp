// algorithm.cpp — aggregation and the per-token driver every algorithm shares (policy_loss.h).
#include "sim/rl/policy_loss.h"

#include <algorithm>

namespace moerl {

namespace rl {

void aggregation_scales(double* scale, Aggregation agg, const LossBatch& b) {
  double tokens = 0.0, seqs = 0.0;
  std::vector<double> len(b.S, 0.0);
  for (int i = 0; i < b.S; ++i) {
    for (int t = 0; t < b.R; ++t) len[i] += b.mask[static_cast<size_t>(i) * b.R + t];
    tokens += len[i];
    seqs += len[i] > 0.0 ? 1.0 : 0.0;
  }
  const double nt = b.norm_tokens > 0.0 ? b.norm_tokens : std::max(tokens, 1.0);
  const double ns = b.norm_seqs > 0.0 ? b.norm_seqs : std::max(seqs, 1.0);
  const double nl = b.norm_len > 0.0 ? b.norm_len : std::max(b.R, 1);
  for (int i = 0; i < b.S; ++i) {
    switch (agg) {
      case Aggregation::token_mean: scale[i] = 1.0 / nt; break;
      case Aggregation::seq_mean_token_mean: scale[i] = len[i] > 0.0 ? 1.0 / (len[i] * ns) : 0.0; break;
      case Aggregation::seq_mean_token_sum: scale[i] = 1.0 / ns; break;
      case Aggregation::seq_mean_token_sum_norm: scale[i] = 1.0 / (ns * nl); break;
    }
  }
}

void policy_loss(LossOutput* out, const LossBatch& b, const LossConfig& c, Aggregation agg,
                 Correction corr, const RatioFn& ratio_of, const SurrogateFn& surrogate_of) {
  const size_t n = static_cast<size_t>(b.S) * b.R;
  out->dlogp.assign(n, 0.0f);
  out->ratio.assign(n, 1.0f);
  out->weight.assign(n, 1.0f);
  out->term.assign(n, 0.0f);
  out->loss = out->kl_loss = 0.0;
  out->clipped_tokens = out->masked_tokens = out->tokens = out->ratio_max_neg_adv = 0.0;
  std::vector<double> scale(b.S);
  aggregation_scales(scale.data(), agg, b);
  const bool seq_level = correction_is_sequence_level(corr);
  for (int i = 0; i < b.S; ++i) {
    const double A = b.advantages[i];
    const size_t row = static_cast<size_t>(i) * b.R;
    const double w_seq = seq_level ? seq_correction_weight(c, corr, seq_log_ratio(b.logp_old + row, b.logp_rollout + row,
                                                                                  b.mask + row, b.R))
                                   : 1.0;
    for (int t = 0; t < b.R; ++t) {
      const size_t j = row + t;
      if (b.mask[j] == 0.0f) continue;
      const double m = b.mask[j];
      const double rho = std::exp(clamp20(static_cast<double>(b.logp_old[j]) - b.logp_rollout[j]));
      const double w = correction_weight(c, corr, rho) * w_seq;  // × 1.0 is exact: token corrections unchanged
      const RatioValue x = ratio_of(i, t);
      const Surrogate s = surrogate_of ? surrogate_of(A, x, b.logp_new[j]) : surrogate(A, x.value, x.grad, c);
      double term = w * s.value, grad = w * s.grad;
      if (c.kl_coef > 0.0f) {
        double kv, kg;
        k3(b.logp_ref[j], b.logp_new[j], &kv, &kg);
        term += c.kl_coef * kv;
        grad += c.kl_coef * kg;
        out->kl_loss += scale[i] * m * c.kl_coef * kv;
      }
      out->loss += scale[i] * m * term;
      out->dlogp[j] = static_cast<float>(scale[i] * m * grad);
      out->ratio[j] = static_cast<float>(x.value);
      out->weight[j] = static_cast<float>(corr == Correction::none ? x.weight : w);
      out->term[j] = static_cast<float>(term);
      out->tokens += 1.0;
      out->clipped_tokens += s.clipped ? 1.0 : 0.0;
      out->masked_tokens += w == 0.0 ? 1.0 : 0.0;
      if (A < 0.0) out->ratio_max_neg_adv = std::max(out->ratio_max_neg_adv, static_cast<double>(out->ratio[j]));
    }
  }
}

}  // namespace rl

PolicyLossParams policy_loss_params(const LossConfig& c, PolicyRatio ratio) {
  PolicyLossParams p;
  p.clip_low = c.clip_low;
  p.clip_high = c.clip_high;
  p.dual_clip = c.dual_clip;
  p.correction = static_cast<int32_t>(c.correction);
  p.correction_cap = c.correction_cap;
  p.correction_cap_low = c.correction_cap_low;
  p.seq_mask_low = c.seq_mask_low;
  p.seq_mask_high = c.seq_mask_high;
  p.seq_k3_max = c.seq_k3_max;
  p.icepop_low = c.icepop_low;
  p.icepop_high = c.icepop_high;
  p.kl_coef = c.kl_coef;
  p.ratio = ratio;
  return p;
}

}  // namespace moerl
