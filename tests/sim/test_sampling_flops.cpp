// test_sampling_flops.cpp — token sampling (greedy, temperature, frequencies) and the analytic
// FLOP counts of `moerl bench`, against hand counts.
#include <cmath>

#include <gtest/gtest.h>

#include "sim/bench/flops.h"
#include "sim/step/sampling.h"

namespace moerl {
namespace {

TEST(Sampling, GreedyTakesTheLowestArgmaxAndDrawsNothing) {
  const float logits[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  Rng rng(42);
  EXPECT_EQ(sampling_draw(logits, 5, SamplingConfig{0.0f, 1.0f}, &rng), 1);
  EXPECT_EQ(rng.state, 42u);
}

// Frequencies of 40000 seeded draws against softmax(logits / T). The binomial standard deviation
// is at most sqrt(0.25 / 40000) = 0.0025; 0.01 is four of them.
void expect_frequencies(const std::vector<float>& logits, float temperature,
                        const std::vector<double>& p, float top_p = 1.0f) {
  const int V = static_cast<int>(logits.size()), n = 40000;
  Rng rng(rng_derive(9, static_cast<uint64_t>(Stream::sampling), {static_cast<uint64_t>(V)}));
  std::vector<int> count(static_cast<size_t>(V), 0);
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(sampling_draw(logits.data(), V, SamplingConfig{temperature, top_p}, &rng))];
  for (int v = 0; v < V; ++v) EXPECT_NEAR(static_cast<double>(count[v]) / n, p[v], 0.01) << v;
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  // logits log(1..4): p = (1, 2, 3, 4) / 10 at T = 1.
  expect_frequencies({0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)}, 1.0f, {0.1, 0.2, 0.3, 0.4});
  // T = 0.5 squares the odds: logits (0, log 2) → (1, 4) / 5.
  expect_frequencies({0.0f, std::log(2.0f)}, 0.5f, {0.2, 0.8});
  // A -inf logit is never drawn.
  expect_frequencies({0.0f, -INFINITY, 0.0f}, 1.0f, {0.5, 0.0, 0.5});
  // top-p 0.65 over (0.1, 0.2, 0.3, 0.4) keeps {0.4, 0.3}: renormalised (0, 0, 3/7, 4/7).
  expect_frequencies({0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)}, 1.0f,
                     {0.0, 0.0, 3.0 / 7.0, 4.0 / 7.0}, 0.65f);
}

TEST(Sampling, SameStreamSameTokens) {
  const float logits[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  Rng a(123), b(123);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sampling_draw(logits, 4, SamplingConfig{}, &a), sampling_draw(logits, 4, SamplingConfig{}, &b));
}

// Small enough to count by hand.
ModelConfig tiny() {
  return {.vocab_size = 5, .d_model = 4, .n_layers = 1, .n_experts = 2, .top_k = 1, .d_ff = 3, .shared_expert_ff = 0};
}

TEST(Flops, HandCountsOfATinyModel) {
  const ModelConfig c = tiny();
  // Per token: q,k,v,o 4·2·4·4 = 128; router 2·4·2 = 16; one expert 3·2·4·3 = 72.
  EXPECT_EQ(flops_token_linear(c), 216.0);
  // T = 2: linear 2·216; attention 4·4·1 + 4·4·2 = 48; LM head 2·(2·4·5) = 80.
  EXPECT_EQ(flops_forward_sequence(c, 2), 432.0 + 48.0 + 80.0);
  EXPECT_EQ(flops_train_sequence(c, 2), 3.0 * 560.0);
  // Prefill of 2: LM head only for the last position.
  EXPECT_EQ(flops_prefill(c, 2), 432.0 + 48.0 + 40.0);
  // Decode at position 2: 216 + attention over 3 keys 4·4·3 + LM head 40.
  EXPECT_EQ(flops_decode_step(c, 2), 216.0 + 48.0 + 40.0);

  ModelConfig shared = c;
  shared.shared_expert_ff = 2;  // + 3·2·4·2 = 48
  EXPECT_EQ(flops_token_linear(shared), 264.0);
  ModelConfig dense = c;
  dense.n_experts = 0;
  dense.top_k = 2;  // MLP width 6: 3·2·4·6 = 144, no router
  EXPECT_EQ(flops_token_linear(dense), 128.0 + 144.0);
}

}  // namespace
}  // namespace moerl
