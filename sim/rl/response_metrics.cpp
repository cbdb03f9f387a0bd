// response_metrics.cpp — see response_metrics.h.
#include "sim/rl/response_metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "sim/io/results.h"
#include "sim/rl/ppo_terms.h"

namespace moerl {

namespace {
// The ⌈q·n⌉-th smallest of v (nearest rank); v is sorted in place. 0 for an empty v.
double nearest_rank(std::vector<double>* v, double q) {
  if (v->empty()) return 0.0;
  std::sort(v->begin(), v->end());
  const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v->size())));
  return (*v)[std::clamp<size_t>(k, 1, v->size()) - 1];
}
}  // namespace

ResponseMetrics response_metrics(const int32_t* len, const int32_t* truncated, const int* answer_len,
                                 const float* logp_train,
                                 const float* logp_rollout, const float* entropy, int S, int R, int R_max,
                                 int groups, int groups_dropped) {
  ResponseMetrics m;
  const int W = std::max(position_bucket_width(R_max), 1);
  m.tokens_by_position.assign(kPositionBuckets, 0.0);
  m.k3_by_position.assign(kPositionBuckets, 0.0);
  m.entropy_by_position.assign(kPositionBuckets, 0.0);
  std::vector<double> lengths(static_cast<size_t>(S)), abs_ratio(static_cast<size_t>(S));
  double len_sum = 0.0, answer_sum = 0.0, trunc = 0.0, ratio_sum = 0.0;
  for (int s = 0; s < S; ++s) {
    const size_t row = static_cast<size_t>(s) * R;
    double X = 0.0;
    for (int r = 0; r < len[s]; ++r) {
      const double x = static_cast<double>(logp_train[row + r]) - logp_rollout[row + r];
      const double xc = rl::clamp20(x);
      const int b = std::min(r / W, kPositionBuckets - 1);
      m.tokens_by_position[b] += 1.0;
      m.k3_by_position[b] += std::expm1(xc) - xc;
      m.entropy_by_position[b] += entropy[row + r];
      X += x;
    }
    lengths[s] = len[s];
    len_sum += len[s];
    answer_sum += answer_len[s];
    trunc += truncated[s] != 0;
    ratio_sum += X;
    abs_ratio[s] = std::fabs(X);
  }
  const double ns = S > 0 ? S : 1.0;
  m.length_mean = len_sum / ns;
  m.answer_length_mean = answer_sum / ns;
  m.truncated_frac = trunc / ns;
  m.filtered_group_frac = groups > 0 ? static_cast<double>(groups_dropped) / groups : 0.0;
  m.seq_log_ratio_mean = ratio_sum / ns;
  if (S > 0) {
    m.length_min = *std::min_element(lengths.begin(), lengths.end());
    m.length_max = *std::max_element(lengths.begin(), lengths.end());
    m.seq_log_ratio_abs_max = *std::max_element(abs_ratio.begin(), abs_ratio.end());
  }
  m.length_p90 = nearest_rank(&lengths, 0.9);
  m.seq_log_ratio_abs_p90 = nearest_rank(&abs_ratio, 0.9);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int b = 0; b < kPositionBuckets; ++b) {
    const double n = m.tokens_by_position[b];
    m.k3_by_position[b] = n > 0.0 ? m.k3_by_position[b] / n : nan;
    m.entropy_by_position[b] = n > 0.0 ? m.entropy_by_position[b] / n : nan;
  }
  return m;
}

void response_metrics_record(RunResults* res, const ResponseMetrics& m) {
  res->set("response_length_mean", m.length_mean);
  res->set("response_length_min", m.length_min);
  res->set("response_length_max", m.length_max);
  res->set("response_length_p90", m.length_p90);
  res->set("answer_length_mean", m.answer_length_mean);
  res->set("truncated_frac", m.truncated_frac);
  res->set("filtered_group_frac", m.filtered_group_frac);
  res->set("seq_log_ratio_mean", m.seq_log_ratio_mean);
  res->set("seq_log_ratio_abs_p90", m.seq_log_ratio_abs_p90);
  res->set("seq_log_ratio_abs_max", m.seq_log_ratio_abs_max);
  res->set_row("tokens_by_position", {kPositionBuckets}, m.tokens_by_position);
  res->set_row("k3_by_position", {kPositionBuckets}, m.k3_by_position);
  res->set_row("entropy_by_position", {kPositionBuckets}, m.entropy_by_position);
}

ResponseMargins response_margins(const std::vector<float>& router_top, const std::vector<double>& logit_std,
                                 const std::vector<double>& logit_margin, const int32_t* len, int S, int P, int T,
                                 int L) {
  ResponseMargins m;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> router;
  if (!router_top.empty()) {
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < S; ++s)
        for (int t = P - 1; t < P - 1 + len[s]; ++t) {
          const float* top = &router_top[((static_cast<size_t>(l) * S + s) * T + t) * 2];
          router.push_back(static_cast<double>(top[0]) - top[1]);  // K-th − (K+1)-th largest
        }
  }
  if (router.empty()) {
    m.router_margin_mean = m.router_margin_p10 = nan;
  } else {
    double sum = 0.0;
    for (double x : router) sum += x;
    m.router_margin_mean = sum / static_cast<double>(router.size());
    m.router_margin_p10 = nearest_rank(&router, 0.1);
  }
  double std_sum = 0.0, margin_sum = 0.0, n = 0.0;
  for (size_t j = 0; j < logit_std.size(); ++j) {
    std_sum += logit_std[j];
    margin_sum += logit_margin[j];
    n += 1.0;
  }
  m.logit_std_mean = n > 0.0 ? std_sum / n : nan;
  m.logit_margin_mean = n > 0.0 ? margin_sum / n : nan;
  return m;
}

void response_margins_record(RunResults* res, const ResponseMargins& m) {
  res->set("router_margin_mean", m.router_margin_mean);
  res->set("router_margin_p10", m.router_margin_p10);
  res->set("logit_std_mean", m.logit_std_mean);
  res->set("logit_margin_mean", m.logit_margin_mean);
}

}  // namespace moerl
