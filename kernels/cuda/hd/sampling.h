// hd/sampling.h — the rollout's sampler per row (sim/step/sampling.h, sim/rl/rollout.h) as
// host-device functions (kernels/hd.h): the token drawn from a row of logits and the entropy of a
// row of log-probs, in FP64 as the host sampler always had them. The host's sampling_draw and the
// backends' sample_rows op (kernels/ops.def) run these lines, so a CPU rollout keeps its bits and a
// device draws the same token up to its exp (≤ 1 ulp in FP64: a different token only where u
// falls within that of a boundary of the cumulative weights).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

// The token drawn from logits[V] at temperature t with the uniform u ∈ [0, 1). t = 0: greedy, the
// lowest index among equal maxima (u unused). Otherwise weights w_v = exp((x_v − max)·(1/t)) in
// FP64; top_p < 1 keeps the heaviest tokens (equal weights in index order) until their mass
// reaches top_p of the total and zeroes the rest; then the first v whose cumulative weight exceeds
// u·total (u within rounding of the total: the last token with weight). Scratch: w[V], and
// order[V] when top_p < 1.
MOERL_HD int32_t hd_sample_row(const float* logits, int V, float temperature, float top_p, double u, double* w,
                               int* order) {
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature == 0.0f) return best;
  const double m = logits[best], inv_t = hd_ddiv(1.0, static_cast<double>(temperature));
  double total = 0.0;
  for (int v = 0; v < V; ++v) {
    w[v] = hd_dexp(hd_dmul(hd_dsub(static_cast<double>(logits[v]), m), inv_t));
    total = hd_dadd(total, w[v]);
  }
  if (top_p < 1.0f) {
    for (int v = 0; v < V; ++v) order[v] = v;
    for (int i = 1; i < V; ++i) {  // stable insertion sort, heaviest first
      const int key = order[i];
      int j = i - 1;
      for (; j >= 0 && w[order[j]] < w[key]; --j) order[j + 1] = order[j];
      order[j + 1] = key;
    }
    const double target = hd_dmul(static_cast<double>(top_p), total);
    double kept = 0.0;
    int n = 0;
    while (n < V && kept < target) kept = hd_dadd(kept, w[order[n++]]);
    for (int i = n; i < V; ++i) w[order[i]] = 0.0;
    total = kept;
  }
  const double x = hd_dmul(u, total);
  double cum = 0.0;
  int32_t last = best;
  for (int v = 0; v < V; ++v) {
    if (w[v] <= 0.0) continue;
    cum = hd_dadd(cum, w[v]);
    last = v;
    if (x < cum) return v;
  }
  return last;
}

// H = −Σ_v exp(lp_v)·lp_v of a row of log-probs, in FP64, v ascending.
MOERL_HD double hd_entropy_row(const float* lp, int V) {
  double h = 0.0;
  for (int v = 0; v < V; ++v) {
    const double x = lp[v];
    h = hd_dsub(h, hd_dmul(hd_dexp(x), x));
  }
  return h;
}

}  // namespace moerl::cuda
