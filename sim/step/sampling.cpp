// sampling.cpp — inverse-CDF token sampling over the tempered (and nucleus-truncated) softmax.
#include "sim/step/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace moerl {

int32_t sampling_draw(const float* logits, int V, const SamplingConfig& s, Rng* rng) {
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  if (s.temperature == 0.0f) return best;
  const double m = logits[best], inv_t = 1.0 / s.temperature;
  std::vector<double> w(static_cast<size_t>(V));
  double total = 0.0;
  for (int v = 0; v < V; ++v) {
    w[static_cast<size_t>(v)] = std::exp((static_cast<double>(logits[v]) - m) * inv_t);
    total += w[static_cast<size_t>(v)];
  }
  if (s.top_p < 1.0f) {
    // Keep the most probable tokens until their mass reaches top_p (stable order: equal weights
    // keep index order), zero the rest.
    std::vector<int> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
    double kept = 0.0;
    size_t n = 0;
    while (n < order.size() && kept < s.top_p * total) kept += w[static_cast<size_t>(order[n++])];
    for (size_t i = n; i < order.size(); ++i) w[static_cast<size_t>(order[i])] = 0.0;
    total = kept;
  }
  const double u = rng->uniform_double() * total;
  double cum = 0.0;
  int32_t last = best;
  for (int v = 0; v < V; ++v) {
    if (w[static_cast<size_t>(v)] <= 0.0) continue;
    cum += w[static_cast<size_t>(v)];
    last = v;
    if (u < cum) return v;
  }
  return last;  // u within rounding of the total: the last token with nonzero weight
}

}  // namespace moerl
