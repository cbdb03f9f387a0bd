// step_state.h — what the phases of one RL step (sim/rl/trainer.cpp) hand each other, and what the
// stabiliser hooks (sim/rl/step_hooks.h) see: the step's batch from prompts to π_old, one
// mini-batch from its rows to its optimizer step, and the totals the step's metrics are made of.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/numerics.h"
#include "models/model.h"
#include "models/parallel.h"
#include "sim/rl/loss.h"
#include "sim/rl/positions.h"
#include "sim/rl/rollout.h"

namespace moerl {

// Sizes of one step (docs/notation.md): S = prompts × G sequences of T = P + R tokens; a model of
// L layers, E experts (0: the dense twin), K per token, vocabulary V. R is the run's response
// length limit R_max until the rollout, then the longest response of the step's batch (the buffers
// are trimmed to it); A is the answer buffer's stride, the task's longest answer.
struct StepShape {
  int G = 0, S = 0, P = 0, R = 0, T = 0, L = 0, K = 0, E = 0, V = 0;
  int R_max = 0, A = 0;
  bool moe = false;
  float tau = 1.0f;  // sampling temperature the log-probs are taken at
  ResponseSlice slice() const { return ResponseSlice{P, R, T}; }
};

// Sums over the step's mini-batches, made into metrics at the end of the step.
struct TrainTotals {
  double loss = 0.0, grad_norm = 0.0, aux_loss = 0.0;
  double clipped = 0.0, masked = 0.0, tokens = 0.0;
  double grad_norm_max = 0.0;      // the burstiest mini-batch's gradient norm
  double ratio_max_neg_adv = 0.0;  // the largest ratio a negative-advantage token carried in
  // Policy staleness at the step's last mini-batch: k3 of π_old/π_θ over its response tokens
  // (π_θ after the step's earlier updates; 0 with one mini-batch). NaN where the log-probs stayed
  // in the backend's memory (the resident loss).
  double staleness_kl = std::numeric_limits<double>::quiet_NaN();
  bool finite = true;
};

// The step's batch, phase by phase.
struct StepState {
  int64_t index = 0;
  StepShape shape;
  NumericsProfile rollout_profile, train_profile;  // keyed by (run seed, engine, step)
  // Data parallelism: this rank rolls out and recomputes its contiguous block of the sequences;
  // results are gathered, so rewards, advantages and metrics cover the whole batch on every rank.
  SeqBlock block;
  std::vector<int> block_seqs;            // [block.size()] their indices
  std::vector<int32_t> prompts, answers;  // [S, P], [S, A]
  std::vector<int> answer_len;            // [S] the reference answers' lengths (EOS included)
  RolloutBatch rollout;                   // rollout.len: the responses' lengths
  std::vector<float> reward, advantages;  // [S]
  // [S, R] 1 where a response token counts in the loss: before its sequence's end, and not in a
  // truncated response under rl.mask_truncated nor in a group dropped by rl.filter_groups.
  std::vector<float> mask;
  int groups_dropped = 0;                 // by rl.filter_groups
  // π_old: the train engine's forward over the batch (log-probs, logits, routing, router logits,
  // load), its request (the calibration and staleness forwards start from it) and its replay ids.
  ForwardRequest old_request;
  std::vector<int32_t> old_lengths;  // [block.size()] P + len of this rank's sequences (packed forward)
  std::vector<int32_t> old_replay;
  ForwardResult old;
  std::vector<float> logp_train;                 // [S, R] the recomputed π_old
  std::vector<float> logp_ref;                   // [S, R] the reference policy (kl_coef > 0)
  const std::vector<float>* logp_old = nullptr;  // π_old of the loss: logp_train or rollout.logp
  TrainTotals totals;
  // The policy loss where the model is (RlTrainer::loss_on_device): the loss's [S, R] inputs in
  // the backend's memory, uploaded once a step — π_old, μ, the mask and the reference (kl_coef > 0)
  // at loss_rows + k·S·R, k in that order — and the advantages [S].
  ActBuffer<float> loss_rows, loss_advantages;
  double time_rollout = 0.0, time_old_logprobs = 0.0, time_train = 0.0;
};

// One mini-batch: its rows of the step's batch, this rank's forward/backward and the loss.
struct Minibatch {
  int index = 0;
  std::vector<int> seqs;  // [n] the step-batch sequences of the mini-batch, in order
  SeqBlock block;         // this rank's block of them ...
  std::vector<int> mine;  // ... and their step-batch indices
  std::vector<int32_t> tokens;  // [n, T]
  std::vector<float> logp_new, logp_old, logp_rollout, logp_ref, mask;  // [n, R]
  std::vector<float> advantages;                                       // [n]
  ForwardRequest request;
  std::vector<int32_t> lengths;        // [|mine|] P + len of this rank's sequences (packed forward)
  std::vector<int32_t> replay, probe;  // [L, |mine|·T, K] routing replayed / probed (RSPO)
  ForwardResult result;                // this rank's forward
  LossBatch batch;
  LossOutput loss;
  std::vector<float> dlogp_positions;  // [|mine|, T−1] what the model's backward takes
  ActBuffer<float> dlogp_rows;         // [rows] the same where the model is (loss on the device)
  double grad_norm = 0.0;
  int size() const { return static_cast<int>(seqs.size()); }
};

// Rows [L, S·T, W] of the given sequences, in order → [L, n·T, W] (routing ids, router logits).
template <class X>
std::vector<X> gather_sequence_rows(const std::vector<X>& x, const std::vector<int>& seqs, int L, int S, int T,
                                    int W) {
  const int n = static_cast<int>(seqs.size());
  std::vector<X> out(static_cast<size_t>(L) * n * T * W);
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < n; ++i)
      std::memcpy(&out[((static_cast<size_t>(l) * n + i) * T) * W],
                  &x[((static_cast<size_t>(l) * S + seqs[i]) * T) * W], sizeof(X) * T * W);
  return out;
}

}  // namespace moerl
