// rollout.h — the rollout engine: generation with the KV cache under the rollout profile,
// sampling each sequence from its own seeded stream, recording what the train engine and the
// metrics need: per response token its log-prob, entropy and full log-distribution; per position
// and layer the top-k expert ids and their router log-probs, taken at the step that computed the
// position (prefill for the prompt, the decode step for generated tokens) — what R3 replays.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model.h"
#include "sim/step/sampling.h"

namespace moerl {

// R is the longest response of the batch (every rank of a data-parallel group has the same R:
// generation stops when the last sequence of the whole batch has ended). Sequence s has len[s]
// response tokens (EOS included); positions past it are padding: tokens EOS, log-probs,
// log-distributions and entropies 0, routing 0 when the decode batch was compacted, else the pad
// token's (nothing scores or replays it: the train forward runs packed, ForwardRequest::lengths).
struct RolloutBatch {
  int S = 0, P = 0, R = 0, T = 0;    // sequences, prompt, response, T = P + R
  std::vector<int32_t> len;          // [S] response tokens of each sequence, EOS included
  std::vector<int32_t> truncated;    // [S] 1: reached the length limit without EOS
  std::vector<int32_t> tokens;       // [S, T]
  std::vector<float> logp;           // [S, R] log μ(token) at the sampling temperature
  std::vector<float> logp_all;       // [S, R, V] log μ(·) when generated with logp_all_to_host
  // log μ(·) where the rollout computed it (the model's backend memory): [S, logp_all_rows, V],
  // sequence s's response position r at row s·logp_all_rows + r (logp_all_rows: the R_max the
  // batch was generated with; trimming leaves it); zero past each response. This rank's sequences
  // only (gather_rollout leaves it): the full-vocabulary KL reduces it where it is (kl_rows).
  ActBuffer<float> logp_all_resident;
  int logp_all_rows = 0;
  std::vector<float> entropy;        // [S, R] entropy of μ at each response position
  std::vector<int32_t> topk_ids;     // [L, S·T, K] (empty for the dense twin)
  std::vector<float> router_logp;    // [L, S·T, K]
};

// Generates up to R_max tokens after prompts[S, P]: exactly R_max when eos < 0 (fixed-length
// tasks), else until each sequence has drawn eos or R_max tokens (truncated), with the decode
// loop ending when every sequence of the batch has ended (on every data-parallel rank together:
// the MoE exchanges of each decode step are collective). Under a profile whose kernels are
// row-independent (profile_rows_independent, models/sites.h: fp32-ref, bf16-train, fp16, any
// profile with fixed or reversed orders, batch invariance, no random ties or router noise) a
// finished sequence leaves the decode batch after the step that fed its EOS (decode compaction:
// no work after EOS; its tokens, log-probs and routing are those of the uncompacted batch bit for
// bit). Under any other profile (fp8-rollout: split-K orders drawn per row index, splits sized by
// the call's rows, random ties) finished sequences stay in the batch, fed EOS (masked: the rows
// keep their place, so a sequence's numerics do not depend on when a neighbour finished).
// out->R is the number of decode positions run, the buffers are
// trimmed to it. Log-probs are of the full tempered distribution (top-p only restricts what is
// drawn). The sampling stream of sequence s at response position r
// is (seed, Stream::sampling, step, first_index + s, r): independent of batch composition.
// shared_group > 1: consecutive groups of that many sequences share one prompt; its routing is
// computed once (a prefill of the distinct prompts) and replayed for every sample of the group,
// as an engine reusing the prefix's KV cache would. The sampler runs where the logits are
// (Model::generation_sample): per decode step the host sends one uniform per row and reads back
// the tokens, log μ at them and the entropies; μ's full rows stay in out->logp_all_resident, and
// come down into out->logp_all once at the end only when logp_all_to_host.
void rollout_generate(RolloutBatch* out, Model& model, const NumericsProfile& profile,
                      const int32_t* prompts, int S, int P, int R_max, const SamplingConfig& sampling,
                      uint64_t seed, uint64_t step, uint64_t first_index, int shared_group = 1,
                      int eos = -1, bool logp_all_to_host = true);

// The decode compaction's plan: row i of the decode batch holds sequence seq[i]; the rows whose
// sequence is done leave, each one's place filled by the last row still going (one KV-cache row
// moved per finished sequence; Model::generation_keep's contract). *seq becomes the kept rows'
// sequences; returns from[keep]: row i of the new batch is row from[i] of the old.
std::vector<int32_t> rollout_compact_plan(std::vector<int32_t>* seq, const std::vector<uint8_t>& done);

// Keeps the first R response positions of every buffer of *rb (R ≤ rb->R); L: the model's layers.
void rollout_trim(RolloutBatch* rb, int R, int L);

class Task;
// The held-out evaluation: greedy answers to the first n examples of the task's held-out split
// under a profile (EOS tasks: generation up to the task's longest answer), graded as
// Task::grade does. Shares of the n answers, except partial (the mean partial-credit reward).
struct EvalResult {
  double exact = 0.0;            // exact match, the answer's length included: eval_accuracy
  double partial = 0.0;          // mean partial-credit reward
  double final_correct = 0.0;    // the final answer right, whatever the working
  double working_correct = 0.0;  // no wrong token where response and reference overlap
  double stop_early = 0.0, stop_late = 0.0;  // well formed, shorter / longer than the reference
  double truncated = 0.0;        // no EOS within the task's longest answer
  double malformed = 0.0;        // not well formed (truncated ones included)
};
EvalResult rollout_eval(Model& model, const Task& task, uint64_t seed, int n, const NumericsProfile& profile);
// Its exact-match share.
double rollout_eval_accuracy(Model& model, const Task& task, uint64_t seed, int n,
                             const NumericsProfile& profile);

}  // namespace moerl
