// ref/sampling.cpp — the rollout's sampler and the mismatch metrics per row, written plainly
// (kernels/ref/ops.h): the references the host-device row functions (kernels/cuda/hd/sampling.h,
// mismatch.h) are checked against.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/ref/ops.h"

namespace moerl::ref {

void sample_rows(int32_t* tokens, float* logp, float* entropy, const float* logits, const float* lp,
                 const double* uniform, int N, int V, float temperature, float top_p) {
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<size_t>(n) * V;
    const float* l = lp + static_cast<size_t>(n) * V;
    const int32_t best = static_cast<int32_t>(std::max_element(x, x + V) - x);  // the first maximum
    int32_t tok = best;
    if (temperature != 0.0f) {
      std::vector<double> w(static_cast<size_t>(V));
      for (int v = 0; v < V; ++v) w[v] = std::exp((static_cast<double>(x[v]) - x[best]) * (1.0 / temperature));
      double total = 0.0;
      for (double wv : w) total += wv;
      if (top_p < 1.0f) {
        std::vector<int> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
        double kept = 0.0;
        size_t k = 0;
        while (k < order.size() && kept < static_cast<double>(top_p) * total) kept += w[order[k++]];
        for (size_t i = k; i < order.size(); ++i) w[order[i]] = 0.0;
        total = kept;
      }
      const double u = uniform[n] * total;
      double cum = 0.0;
      for (int v = 0; v < V; ++v) {
        if (w[v] <= 0.0) continue;
        cum += w[v];
        tok = v;
        if (u < cum) break;
      }
    }
    tokens[n] = tok;
    logp[n] = l[tok];
    double h = 0.0;
    for (int v = 0; v < V; ++v) h -= std::exp(static_cast<double>(l[v])) * l[v];
    entropy[n] = static_cast<float>(h);
  }
}

void scatter_rows(float* dst, const float* src, const int32_t* dst_row, int N, int C) {
  for (int n = 0; n < N; ++n)
    if (dst_row[n] >= 0) std::copy_n(src + static_cast<size_t>(n) * C, C, dst + static_cast<size_t>(dst_row[n]) * C);
}

namespace {
std::vector<double> log_softmax_f64(const float* x, int V) {
  double m = -std::numeric_limits<double>::infinity();
  for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(x[v]));
  double s = 0.0;
  for (int v = 0; v < V; ++v) s += std::exp(static_cast<double>(x[v]) - m);
  std::vector<double> out(static_cast<size_t>(V));
  for (int v = 0; v < V; ++v) out[v] = static_cast<double>(x[v]) - (m + std::log(s));
  return out;
}
}  // namespace

void kl_rows(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
             const int32_t* b_row, const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const std::vector<double> la = log_softmax_f64(a + static_cast<size_t>(a_row[n]) * V, V);
    const std::vector<double> lb = log_softmax_f64(b + static_cast<size_t>(b_row[n]) * V, V);
    double k = 0.0;
    for (int v = 0; v < V; ++v) {
      const double pa = std::exp(la[v]);
      if (pa > 0.0) k += pa * (la[v] - lb[v]);
    }
    kl[n] = k;
    log_ratio[n] = lb[targets[n]] - la[targets[n]];
  }
}

void logit_stats_rows(double* stdev, double* margin, const float* logits, const int32_t* rows, int N, int V,
                      float tau) {
  for (int n = 0; n < N; ++n) {
    const float* row = logits + static_cast<size_t>(rows[n]) * V;
    std::vector<double> x(static_cast<size_t>(V));
    for (int v = 0; v < V; ++v) x[v] = static_cast<double>(row[v]) / tau;
    double mean = 0.0;
    for (double xv : x) mean += xv;
    mean /= V;
    double sq = 0.0;
    for (double xv : x) sq += (xv - mean) * (xv - mean);
    stdev[n] = std::sqrt(sq / V);
    std::vector<double> sorted = x;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    margin[n] = V > 1 ? sorted[0] - sorted[1] : 0.0;
  }
}

}  // namespace moerl::ref
