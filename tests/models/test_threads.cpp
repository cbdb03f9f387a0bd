// The whole model gives the same bits on 1 and 2 threads: training forward + backward (log-probs,
// routing, every gradient) under the deterministic profiles and under fp8-rollout (its order noise
// is seeded per row, never per thread), and KV-cache generation under fp8-rollout. The model is
// large enough for every kernel to take its parallel path (tasks are cut by work size).
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cstring>
#include <functional>
#include <vector>

#include "model_fixture.h"
#include "models/model.h"
#include "models/params.h"

namespace moerl {
namespace {

ModelConfig parallel_sized_config() {
  return {.vocab_size = 40, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_experts = 8, .top_k = 2, .d_ff = 96,
          .max_seq_len = 32, .init_std = 0.1f};
}

std::vector<float> under_threads(int threads, const std::function<std::vector<float>()>& f) {
  tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  return f();
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

TEST(ModelThreads, TrainingStepIsThreadCountIndependent) {
  const ModelConfig cfg = parallel_sized_config();
  const int B = 16, T = 24;
  const auto tokens = test::random_tokens(B * T, cfg.vocab_size, 3);
  const auto dlogp = test::random_vector(B * (T - 1), 4, 0.05f);
  for (const char* name : {"fp32-ref", "bf16-train", "fp8-rollout"}) {
    SCOPED_TRACE(name);
    const NumericsProfile prof = test::builtin(name);
    auto run = [&] {
      Model model(cfg);
      params_init(&model.params(), cfg, 5);
      model.invalidate_packed_weights();
      ForwardRequest req;
      req.tokens = tokens.data();
      req.B = B;
      req.T = T;
      req.profile = &prof;
      req.save_for_backward = true;
      ForwardResult res;
      model.forward(&res, req);
      model.grads().zero();
      model.backward(dlogp.data());
      std::vector<float> out = res.logprobs;
      for (int32_t id : res.topk_ids) out.push_back(static_cast<float>(id));
      out.insert(out.end(), model.grads().data().begin(), model.grads().data().end());
      return out;
    };
    const auto one = under_threads(1, run), two = under_threads(2, run);
    ASSERT_GT(one.size(), static_cast<size_t>(B * (T - 1)));
    EXPECT_TRUE(bits_equal(one, two));
  }
}

TEST(ModelThreads, GenerationIsThreadCountIndependent) {
  const ModelConfig cfg = parallel_sized_config();
  const int B = 64, P = 8, S = 8;
  const auto prompts = test::random_tokens(B * P, cfg.vocab_size, 6);
  const NumericsProfile prof = test::builtin("fp8-rollout");
  auto run = [&] {
    Model model(cfg);
    params_init(&model.params(), cfg, 7);
    model.invalidate_packed_weights();
    std::vector<float> logits(static_cast<size_t>(B) * cfg.vocab_size), out;
    std::vector<int32_t> next(B);
    GenerationState* st = nullptr;
    model.generation_begin(&st, B, P + S, &prof);
    model.generation_prefill(st, logits.data(), nullptr, nullptr, prompts.data(), P);
    for (int step = 0; step < S; ++step) {
      out.insert(out.end(), logits.begin(), logits.end());
      for (int b = 0; b < B; ++b) next[b] = (b + step) % cfg.vocab_size;  // fixed feed: no sampling
      model.generation_step(st, logits.data(), nullptr, nullptr, next.data());
    }
    model.generation_end(st);
    out.insert(out.end(), logits.begin(), logits.end());
    return out;
  };
  EXPECT_TRUE(bits_equal(under_threads(1, run), under_threads(2, run)));
}

}  // namespace
}  // namespace moerl
