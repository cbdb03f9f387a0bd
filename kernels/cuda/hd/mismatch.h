// hd/mismatch.h — the train–inference mismatch per response position (sim/jobs/audit.h,
// sim/rl/response_metrics.h) as host-device functions (kernels/hd.h), in FP64 as the host
// metrics always had them: the KL between two rows of log-probs with the log ratio at the sampled
// token, and the spread and top-two margin of a row of logits. The host's audit and the backends'
// kl_rows and logit_stats_rows ops (kernels/ops.def) run these lines, so the CPU's metrics keep
// their bits and a device's differ by its FP64 exp/log (≤ 1 ulp).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

// log Σ_v exp(x_v) of a row in FP64: the maximum, then the max-subtracted sum, v ascending.
MOERL_HD double hd_row_logsumexp_f64(const float* x, int V) {
  double m = -INFINITY;
  for (int v = 0; v < V; ++v) {
    const double xv = x[v];
    m = m < xv ? xv : m;  // std::max(m, xv)
  }
  double s = 0.0;
  for (int v = 0; v < V; ++v) s = hd_dadd(s, hd_dexp(hd_dsub(static_cast<double>(x[v]), m)));
  return hd_dadd(m, hd_dlog(s));
}

// Rows a[V], b[V] (log-probs or logits: each is re-normalised in FP64, la = a − logsumexp a):
// *kl = KL(a‖b) = Σ_v p_a(v)·(la_v − lb_v) over the v with p_a(v) > 0, v ascending, and
// *log_ratio = lb_t − la_t at the token t.
MOERL_HD void hd_kl_row(double* kl, double* log_ratio, const float* a, const float* b, int32_t t, int V) {
  const double za = hd_row_logsumexp_f64(a, V), zb = hd_row_logsumexp_f64(b, V);
  double k = 0.0;
  for (int v = 0; v < V; ++v) {
    const double la = hd_dsub(static_cast<double>(a[v]), za), lb = hd_dsub(static_cast<double>(b[v]), zb);
    const double pa = hd_dexp(la);
    if (pa > 0.0) k = hd_dadd(k, hd_dmul(pa, hd_dsub(la, lb)));
  }
  *kl = k;
  *log_ratio = hd_dsub(hd_dsub(static_cast<double>(b[t]), zb), hd_dsub(static_cast<double>(a[t]), za));
}

// Of x_v = logits_v / τ in FP64: *stdev = √(Σ (x_v − mean)² / V) and *margin = the largest x
// minus the second largest (0 when V = 1).
MOERL_HD void hd_logit_stats_row(double* stdev, double* margin, const float* logits, int V, float tau) {
  const double t = tau;
  double mean = 0.0, top1 = -INFINITY, top2 = -INFINITY;
  for (int v = 0; v < V; ++v) {
    const double x = hd_ddiv(static_cast<double>(logits[v]), t);
    mean = hd_dadd(mean, x);
    if (x > top1) {
      top2 = top1;
      top1 = x;
    } else if (x > top2) {
      top2 = x;
    }
  }
  mean = hd_ddiv(mean, static_cast<double>(V));
  double sq = 0.0;
  for (int v = 0; v < V; ++v) {
    const double d = hd_dsub(hd_ddiv(static_cast<double>(logits[v]), t), mean);
    sq = hd_dadd(sq, hd_dmul(d, d));
  }
  *stdev = hd_dsqrt(hd_ddiv(sq, static_cast<double>(V)));
  *margin = V > 1 ? hd_dsub(top1, top2) : 0.0;
}

}  // namespace moerl::cuda
