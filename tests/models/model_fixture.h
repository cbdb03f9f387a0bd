// model_fixture.h — small seeded models and inputs shared by the model tests.
#pragma once

#include <cstring>
#include <vector>

#include "kernels/rng.h"
#include "models/model.h"
#include "../model_configs.h"

namespace moerl::test {

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

// What backends are compared on: one training forward + backward of tok[B, T] at temperature 0.8 (dLoss/dlogp a
// fixed pattern) and teacher-forced generation of the same tokens (prefill P, then `steps` decode
// steps, then, where B >= 2 and the tokens go on, a decode compaction — row 0 leaves, row B-1
// takes its place — and one more step of the B-1 kept rows), on model m under profile p. Grads
// start from zero.
struct StepOutputs {
  std::vector<float> logp, grads, gen_logits;  // [B, T-1]; the gradient store; [steps+1, B, V] (+ [B-1, V])
  std::vector<int32_t> ids;                    // [L, B*T, K] routing of the training forward
};
inline StepOutputs forward_backward_generate(Model& m, const NumericsProfile& p,
                                             const std::vector<int32_t>& tok, int B, int T, int P,
                                             int steps) {
  const int V = m.config().vocab_size;
  ForwardRequest req;
  req.tokens = tok.data(); req.B = B; req.T = T; req.profile = &p; req.save_for_backward = true;
  req.temperature = 0.8f;  // as an RL step's forward at the rollout's temperature (logits / τ)
  ForwardResult r;
  m.forward(&r, req);
  std::vector<float> dlogp(r.logprobs.size());
  for (size_t i = 0; i < dlogp.size(); ++i) dlogp[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  m.grads().zero();
  m.backward(dlogp.data());
  StepOutputs out{r.logprobs, m.grads().data(), {}, r.topk_ids};
  GenerationState* st = nullptr;
  m.generation_begin(&st, B, T, &p);
  std::vector<float> logits(static_cast<size_t>(B) * V);
  std::vector<int32_t> prompt(static_cast<size_t>(B) * P), next(B);
  for (int b = 0; b < B; ++b) std::memcpy(&prompt[b * P], &tok[b * T], sizeof(int32_t) * P);
  m.generation_prefill(st, logits.data(), nullptr, nullptr, prompt.data(), P);
  for (int s = 0; s < steps; ++s) {
    out.gen_logits.insert(out.gen_logits.end(), logits.begin(), logits.end());
    for (int b = 0; b < B; ++b) next[b] = tok[b * T + P + s];
    m.generation_step(st, logits.data(), nullptr, nullptr, next.data());
  }
  out.gen_logits.insert(out.gen_logits.end(), logits.begin(), logits.end());
  if (B >= 2 && P + steps < T) {  // decode compaction: row 0 leaves, the last row takes its place
    std::vector<int32_t> from(static_cast<size_t>(B) - 1);
    for (int i = 0; i < B - 1; ++i) from[i] = i == 0 ? B - 1 : i;
    m.generation_keep(st, from.data(), B - 1);
    for (int i = 0; i < B - 1; ++i) next[i] = tok[from[i] * T + P + steps];
    m.generation_step(st, logits.data(), nullptr, nullptr, next.data());
    out.gen_logits.insert(out.gen_logits.end(), logits.begin(), logits.begin() + static_cast<size_t>(B - 1) * V);
  }
  m.generation_end(st);
  return out;
}

}  // namespace moerl::test
