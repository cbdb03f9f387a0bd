// response_metrics.h — the metrics of responses that have their own length (docs/metrics.md,
// "Response lengths"): length statistics, truncation, the groups rl.filter_groups dropped, the
// engines' mismatch and the rollout's entropy along the response by position bucket, and the
// distribution over sequences of the summed log-ratio between the engines.
//
// Every sequence counts with its own response tokens (positions r < len[s]), whatever the loss
// mask keeps: these describe what the rollout produced. With x_st = log π_train − log μ on the
// sampled token (π_train: the recomputed π_old), k3_st = e^x − 1 − x, and the sequence sum
// X_s = Σ_{r<len_s} x_sr. Percentiles are nearest-rank: p90 = the ⌈0.9·n⌉-th smallest value.
#pragma once

#include <cstdint>
#include <vector>

namespace moerl {

class RunResults;

// Buckets along the response: bucket b holds response positions [b·W, (b+1)·W), W =
// position_bucket_width(R_max) = ⌈R_max / kPositionBuckets⌉, so the buckets of a run do not move
// with each step's longest response.
inline constexpr int kPositionBuckets = 8;
inline int position_bucket_width(int R_max) { return (R_max + kPositionBuckets - 1) / kPositionBuckets; }

struct ResponseMetrics {
  double length_mean = 0.0, length_min = 0.0, length_max = 0.0, length_p90 = 0.0;  // tokens, EOS included
  double answer_length_mean = 0.0;   // the reference answers' mean length (what a right response has)
  double truncated_frac = 0.0;       // responses that reached R_max without EOS
  double filtered_group_frac = 0.0;  // groups dropped by rl.filter_groups
  double seq_log_ratio_mean = 0.0;     // mean_s X_s
  double seq_log_ratio_abs_p90 = 0.0;  // p90 of |X_s|
  double seq_log_ratio_abs_max = 0.0;  // max_s |X_s|
  // [kPositionBuckets]: response tokens in the bucket, their mean k3 and mean entropy of μ (NaN
  // where the bucket is empty).
  std::vector<double> tokens_by_position, k3_by_position, entropy_by_position;
};

// The train engine's decision margins on the positions that score each response's own tokens,
// from its π_old forward: do they shrink as the policy trains (so that the same numerical noise
// flips more choices)? Router: z_(K) − z_(K+1), the gap between the K-th and (K+1)-th largest
// router logits of a (position, layer) (logits after any router temperature, before a selection
// bias), over every layer — a flip needs the noise to cross it. LM head: the std of the logits
// over the vocabulary (their scale) and top-1 − top-2, at the sampling temperature.
struct ResponseMargins {
  double router_margin_mean = 0.0, router_margin_p10 = 0.0;  // NaN for a dense model or E = K
  double logit_std_mean = 0.0, logit_margin_mean = 0.0;
};
// router_top [L, S·T, 2]: each token's K-th and (K+1)-th largest router logit (ForwardResult::
// router_top; empty: dense, or E = K); len [S]; positions P−1..P−2+len[s]. logit_std and
// logit_margin: the logits' std and top-1 − top-2 at those positions in order (s, then the
// position), reduced where the logits are (the logit_stats_rows op: kernels/cuda/hd/mismatch.h).
ResponseMargins response_margins(const std::vector<float>& router_top, const std::vector<double>& logit_std,
                                 const std::vector<double>& logit_margin, const int32_t* len, int S, int P, int T,
                                 int L);
// Writes router_margin_mean, router_margin_p10, logit_std_mean, logit_margin_mean.
void response_margins_record(RunResults* res, const ResponseMargins& m);

// len, truncated, answer_len: [S]; logp_train, logp_rollout, entropy: [S, R] (R ≥ every len).
ResponseMetrics response_metrics(const int32_t* len, const int32_t* truncated, const int* answer_len,
                                 const float* logp_train,
                                 const float* logp_rollout, const float* entropy, int S, int R, int R_max,
                                 int groups, int groups_dropped);

// Writes response_length_{mean,min,max,p90}, answer_length_mean, truncated_frac, filtered_group_frac,
// seq_log_ratio_{mean,abs_p90,abs_max} and the rows {tokens,k3,entropy}_by_position.
void response_metrics_record(RunResults* res, const ResponseMetrics& m);

}  // namespace moerl
