// sampling.cpp — inverse-CDF token sampling.
#include "sim/sampling.h"

#include <cmath>
#include <vector>

namespace moerl {

int32_t sampling_draw(const float* logits, int V, float temperature, Rng* rng) {
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature == 0.0f) return best;
  const double m = logits[best], inv_t = 1.0 / temperature;
  std::vector<double> w(static_cast<size_t>(V));
  double total = 0.0;
  for (int v = 0; v < V; ++v) {
    w[static_cast<size_t>(v)] = std::exp((static_cast<double>(logits[v]) - m) * inv_t);
    total += w[static_cast<size_t>(v)];
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
