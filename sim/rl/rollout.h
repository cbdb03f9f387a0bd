// rollout.h — the rollout engine: generation with the KV cache under the rollout profile,
// sampling each sequence from its own seeded stream, recording what the train engine and the
// metrics need: per response token its log-prob, entropy and full log-distribution; per position
// and layer the top-k expert ids and their router log-probs, taken at the step that computed the
// position (prefill for the prompt, the decode step for generated tokens) — what R3 replays.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"
#include "sim/sampling.h"

namespace moerl {

struct RolloutBatch {
  int S = 0, P = 0, R = 0, T = 0;    // sequences, prompt, response, T = P + R
  std::vector<int32_t> tokens;       // [S, T]
  std::vector<float> logp;           // [S, R] log μ(token) at the sampling temperature
  std::vector<float> logp_all;       // [S, R, V] log μ(·) (full-vocabulary KL)
  std::vector<float> entropy;        // [S, R] entropy of μ at each response position
  std::vector<int32_t> topk_ids;     // [L, S·T, K] (empty for the dense twin)
  std::vector<float> router_logp;    // [L, S·T, K]
};

// Generates R tokens after prompts[S, P]; log-probs are of the full tempered distribution (top-p
// only restricts what is drawn). The sampling stream of sequence s at response position r
// is (seed, Stream::sampling, step, first_index + s, r): independent of batch composition.
// shared_group > 1: consecutive groups of that many sequences share one prompt; its routing is
// computed once (a prefill of the distinct prompts) and replayed for every sample of the group,
// as an engine reusing the prefix's KV cache would.
void rollout_generate(RolloutBatch* out, Model& model, const NumericsProfile& profile,
                      const int32_t* prompts, int S, int P, int R, const SamplingConfig& sampling,
                      uint64_t seed, uint64_t step, uint64_t first_index, int shared_group = 1);

class Task;
// Greedy exact-match accuracy on the first n examples of the task's held-out split under profile.
double rollout_eval_accuracy(Model& model, const Task& task, uint64_t seed, int n,
                             const NumericsProfile& profile);

}  // namespace moerl
