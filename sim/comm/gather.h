// gather.h — whole-batch arrays and whole checkpoints from the ranks' shares.
//
// Under data parallelism every rank holds a contiguous block of a batch's sequences (models/
// parallel.h), so "gather" is a rank-ordered concatenation: arrays [S, ...] directly, arrays laid
// out per layer [L, S·T, K] layer by layer. Afterwards every rank holds the batch exactly as one
// rank would have computed it, and computes the step's metrics from it in the serial order.
// Under expert parallelism each rank's ParamStore holds its own experts' slots; a checkpoint is
// assembled by gathering the owners' slices first, so it equals the single-rank one.
#pragma once

#include <algorithm>
#include <vector>

#include "models/collectives.h"
#include "models/model.h"
#include "models/params.h"
#include "sim/rl/rollout.h"

namespace moerl {

// [L, n_r, ...] blocks of every rank (n_r rows of `row` elements each) → [L, Σ n_r, ...].
template <class T>
std::vector<T> gather_layers(Collectives& dp, const std::vector<T>& mine, int L) {
  if (dp.size() == 1) return mine;
  const std::vector<T> all = collectives_allgather(dp, mine);
  const std::vector<int64_t> counts = collectives_gather_counts(dp, static_cast<int64_t>(mine.size()));
  std::vector<T> out(all.size());
  size_t dst = 0;
  for (int l = 0; l < L; ++l) {
    size_t src = 0;
    for (int64_t c : counts) {
      const size_t per = static_cast<size_t>(c / L);
      std::copy_n(all.begin() + static_cast<int64_t>(src + l * per), per, out.begin() + static_cast<int64_t>(dst));
      dst += per;
      src += static_cast<size_t>(c);
    }
  }
  return out;
}

// The rows of a training forward that the RL step uses: logprobs, logits and logprobs_all (when
// asked), and for an MoE model topk_ids, router_logp, (own_topk) own_topk_ids, (router_logits)
// router_logits and (router_top) router_top — this rank's block → the whole batch. expert_load,
// aux_loss and the all-to-all statistics already cover the batch. The flags must be the same on
// every rank (a rank may hold no sequence).
void gather_forward(ForwardResult* res, Collectives& dp, int L, bool moe, bool own_topk,
                    bool router_logits = false, bool router_top = false);

// A rollout batch of this rank's block of sequences → the whole batch.
void gather_rollout(RolloutBatch* rb, Collectives& dp, int L, bool moe);

// Routed-expert slots of `data` (laid out like `layout`) filled from their owners: afterwards every
// rank holds every expert's values as its owner has them. E experts over the ranks of ep.
void gather_experts(std::vector<float>* data, const ParamStore& layout, int E, Collectives& ep);

}  // namespace moerl
