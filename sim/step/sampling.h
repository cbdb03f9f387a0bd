// sampling.h — token sampling from logits: temperature, nucleus (top-p), greedy at temperature 0.
// One draw consumes exactly one uniform from the given stream (none when greedy), so a sequence's
// tokens depend only on its own stream.
#pragma once

#include <cstdint>

#include "kernels/rng.h"

namespace moerl {

struct SamplingConfig {
  float temperature = 1.0f;  // 0 = greedy (lowest index among equal maxima)
  float top_p = 1.0f;        // keep the most probable tokens up to this probability mass
};

int32_t sampling_draw(const float* logits, int V, const SamplingConfig& s, Rng* rng);

}  // namespace moerl
