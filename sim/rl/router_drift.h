// router_drift.h — how far the router's choices have moved from the base policy's (docs/metrics.md,
// "Router drift"). A fixed probe set — the first n held-out examples, prompt and reference answer
// teacher-forced, so it does not depend on what the policy writes — is routed once by the base
// policy and again at each evaluation by the trained one, under the evaluation profile. The drift
// of a layer is the share of the probe's (position, layer) routes whose top-k expert *set* differs
// from the base's; the gates' order within the set does not count (it changes no expert's work).
//
// This is not the engines' flip rate (rollout vs train engine on the same weights, `flip_rate`):
// it is the same engine on the base's weights vs the trained ones, the routing the policy has
// learned. The base routing is taken when the trainer is built, from the base policy the run
// starts from (also on resume: the run loads the base before its checkpoint), so nothing of it is
// stored in checkpoints.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/numerics.h"
#include "models/model.h"

namespace moerl {

class Task;

struct RouterProbe {
  int n = 0;                      // probe sequences over all data-parallel ranks
  int P = 0, T = 0;               // prompt length, padded length (P + the longest answer)
  int64_t begin = 0;              // this rank's first sequence (dp_block)
  std::vector<int32_t> tokens;    // [B, T] this rank's sequences, padded with the task's pad
  std::vector<int32_t> lengths;   // [B] own positions: P + the answer's length
  std::vector<int32_t> base_ids;  // [L, B*T, K] the base policy's top-k ids (router_probe_init)
  int B() const { return static_cast<int>(lengths.size()); }
};

// The first n examples of the task's held-out split (split 1, as rollout_eval), this rank's block.
RouterProbe router_probe_make(const Task& task, uint64_t seed, int n, const ModelParallel& par);

// Routes the probe with `model` under `profile`: ids [L, B*T, K] (the router's own choice).
std::vector<int32_t> router_probe_route(Model& model, const RouterProbe& probe, const NumericsProfile& profile);

// Per layer, the share of the probe's own (position, layer) routes whose top-k set differs from
// base_ids, summed over data-parallel ranks (counts, so exact in any order): [L].
std::vector<double> router_probe_drift(const RouterProbe& probe, const std::vector<int32_t>& ids,
                                       int L, int K, const ModelParallel& par);

}  // namespace moerl
