// model_fixture.h — small seeded models and inputs shared by the model tests.
#pragma once

#include <vector>

#include "kernels/rng.h"
#include "models/model.h"

namespace moerl::test {

inline ModelConfig tiny_moe_config() {
  ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 24;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_experts = 6;
  c.top_k = 2;
  c.d_ff = 20;
  c.max_seq_len = 16;
  c.init_std = 0.2f;  // large enough that routing and attention are far from uniform
  return c;
}

inline std::vector<int32_t> random_tokens(int n, int vocab, uint64_t seed) {
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {7}));
  std::vector<int32_t> t(n);
  for (int& x : t) x = static_cast<int32_t>(rng.below(vocab));
  return t;
}

inline std::vector<float> random_vector(int n, uint64_t seed, float scale = 1.0f) {
  Rng rng(rng_derive(seed, 999, {static_cast<uint64_t>(n)}));
  std::vector<float> v(n);
  for (float& x : v) x = scale * rng.normal();
  return v;
}

inline NumericsProfile builtin(const char* name) {
  NumericsProfile p;
  profile_builtin(name, &p);
  return p;
}

}  // namespace moerl::test
