// sampling.h — drawing a token from logits: the inverse CDF of softmax(logits / temperature),
// computed in double, with one uniform draw from the caller's stream per token (so a sequence's
// tokens depend only on its own stream, never on the batch it was generated in).
#pragma once

#include <cstdint>

#include "kernels/rng.h"

namespace moerl {

// temperature > 0: samples v with probability softmax(logits / temperature)[v];
// temperature == 0: greedy argmax (lowest id among equal maxima), no draw consumed.
int32_t sampling_draw(const float* logits, int V, float temperature, Rng* rng);

}  // namespace moerl
