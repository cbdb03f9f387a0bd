// sampling.cpp — inverse-CDF token sampling over the tempered (and nucleus-truncated) softmax: the
// row function of kernels/cuda/hd/sampling.h, which the backends' sample_rows op runs as well.
#include "sim/step/sampling.h"

#include <vector>

#include "kernels/cuda/hd/sampling.h"

namespace moerl {

int32_t sampling_draw(const float* logits, int V, const SamplingConfig& s, Rng* rng) {
  if (s.temperature == 0.0f) return cuda::hd_sample_row(logits, V, 0.0f, s.top_p, 0.0, nullptr, nullptr);
  std::vector<double> w(static_cast<size_t>(V));
  std::vector<int> order(s.top_p < 1.0f ? static_cast<size_t>(V) : 0);
  return cuda::hd_sample_row(logits, V, s.temperature, s.top_p, rng->uniform_double(), w.data(), order.data());
}

}  // namespace moerl
