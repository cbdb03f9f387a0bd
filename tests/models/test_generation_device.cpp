// test_generation_device.cpp — generation with its KV cache in a backend's device memory
// (models/generation.cpp; kernels/test_device.h): prefill, decode steps, and compaction
// (generation_keep, rows moved on the device) give the CPU backend's bits, and no byte of the
// cache crosses to the host; what crosses is counted.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/test_device.h"
#include "model_fixture.h"

namespace moerl {
namespace {

// Logits of a prefill, 2 steps, a compaction to 2 rows (row 0 from row 3), 2 more steps.
std::vector<float> generate(Model& m, const NumericsProfile& p) {
  const ModelConfig& cfg = m.config();
  const int B = 4, P = 3, V = cfg.vocab_size;
  std::vector<float> all, logits(static_cast<size_t>(B) * V);
  GenerationState* st = nullptr;
  m.generation_begin(&st, B, 12, &p);
  const auto prompt = test::random_tokens(B * P, V, 31);
  m.generation_prefill(st, logits.data(), nullptr, nullptr, prompt.data(), P);
  all.insert(all.end(), logits.begin(), logits.end());
  for (int s = 0; s < 2; ++s) {
    const auto tok = test::random_tokens(B, V, 40 + s);
    m.generation_step(st, logits.data(), nullptr, nullptr, tok.data());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  const int32_t from[2] = {3, 1};
  m.generation_keep(st, from, 2);
  for (int s = 0; s < 2; ++s) {
    const auto tok = test::random_tokens(2, V, 50 + s);
    m.generation_step(st, logits.data(), nullptr, nullptr, tok.data());
    all.insert(all.end(), logits.begin(), logits.begin() + 2 * V);
  }
  m.generation_end(st);
  return all;
}

TEST(GenerationDevice, CacheOnTheDeviceGivesTheCpuBitsAndNeverCrosses) {
  for (bool moe : {true, false}) {
    ModelConfig cfg = test::tiny_moe_config();
    if (!moe) cfg.n_experts = 0;
    const NumericsProfile p = test::builtin("fp32-ref");
    TestDeviceBackend be;  // outlives the model, whose activations live in its memory
    Model cpu(cfg), dev(cfg);
    params_init(&cpu.params(), cfg, 21);
    params_init(&dev.params(), cfg, 21);
    dev.set_backend(be);
    // the model's own device memory: its parameters and gradients (models/model.h, resident)
    const size_t held = be.device_bytes_in_use();
    EXPECT_GE(held, 2 * static_cast<size_t>(cpu.params().size()) * sizeof(float));
    const std::vector<float> a = generate(cpu, p), b = generate(dev, p);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "moe=" << moe;
    const TransferLog& log = *be.transfers();
    EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache), 0) << "moe=" << moe;
    EXPECT_GT(log.bytes(TransferPhase::other, CrossKind::activations), 0);
    EXPECT_EQ(be.device_bytes_in_use(), held) << "the cache and the activations are freed with the state";
  }
}

}  // namespace
}  // namespace moerl
