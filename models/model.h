// model.h — the decoder-only MoE transformer (and its dense twin) under a numerics profile.
//
// Two modes share every per-token kernel:
//  * training mode: whole sequences, activations saved, hand-written backward (model_backward.cpp,
//    the exact mirror of model_forward.cpp);
//  * generation mode: prefill of the prompt, then one token at a time with a KV cache.
// Under the exact fp32-ref profile the two give bit-identical log-probs and routing for the same
// tokens (batch-invariant kernels: a row's reduction order never depends on the rows beside it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/numerics.h"
#include "models/config.h"
#include "models/parallel.h"
#include "models/params.h"
#include "models/workspace.h"

namespace moerl {

// Router mode (Megatron-style): not a fork of the model, a mode of the router.
//  normal: own top-k;  replay: top-k ids given per (layer, token), gate weights = softmax of the
//  engine's own logits restricted to the replayed set (R3 form, gradients reach the router).
// Every forward records the ids it used (ForwardResult::topk_ids), so "record" is always on.
enum class RouterMode : uint8_t { normal = 0, replay };

// Runtime controls of the routers that are not trained parameters (sim/rl sets them; all off by
// default, so a plain forward/backward is unaffected):
//  * temperature[l]: router logits are divided by τ_l before scoring, selection and gating;
//  * router KL regularisers on the training forward's rows, each a detached target of router
//    logits [L, N, E] (N = the forward's rows) and a weight, normalised by the batch's tokens:
//      full:  weight·KL(softmax(z) ‖ softmax(target)) over all experts (the router KL replay buffer)
//      topk:  weight·KL(p̃ ‖ q̃) with p̃, q̃ the softmax at temperature T of the engine's own
//             logits and of the target at the engine's own top-k experts (routing calibration);
//  * regularisers_in_backward: false leaves every regulariser (aux, z-loss, both KLs) out of the
//    backward, so that policy and regulariser gradients can be taken apart (gradient surgery).
struct RouterControl {
  std::vector<float> temperature;      // [L], 1 = plain routing
  const float* kl_full_target = nullptr;
  float kl_full_weight = 0.0f;
  const float* kl_topk_target = nullptr;
  float kl_topk_weight = 0.0f;
  float kl_topk_temperature = 1.0f;
  bool regularisers_in_backward = true;
  // The model's load-balancing loss (model.load_balance) in training forwards; false switches it
  // off without changing the model (rl.aux_loss = false: balancing off during RL, as verl's
  // Qwen3-MoE recipe does).
  bool load_balance = true;
};

struct ForwardRequest {
  const int32_t* tokens = nullptr;  // [B, T]
  int B = 0, T = 0;
  // [B] positions of sequence b that are its own (prompt + response, 1..T); the rest of its row
  // of tokens is padding. The forward then runs packed: each sequence over its own positions only
  // (attention over its own length, RoPE positions per sequence, every other op row-wise), and
  // nothing is computed for the padding — its rows of every output are 0, it enters no
  // expert_load, aux loss or gradient. The inputs and outputs keep the [B, T] layout. Under a
  // profile whose kernels are row-independent (profile_rows_independent, models/sites.h) the
  // sequences' own positions get the bits of the unpacked forward. Null: every position is the
  // sequence's own (the [B, T] batch of fixed length).
  const int32_t* lengths = nullptr;
  const NumericsProfile* profile = nullptr;  // nullptr = fp32-ref
  RouterMode router_mode = RouterMode::normal;
  const int32_t* replay_ids = nullptr;  // [L, B*T, K] when replaying
  bool save_for_backward = false;       // keep activations for model_backward
  bool want_logits = false;             // fill ForwardResult::logits
  bool want_own_topk = false;           // fill ForwardResult::own_topk_ids (flip metrics under replay)
  bool want_router_logits = false;      // fill ForwardResult::router_logits
  bool want_router_top = false;         // fill ForwardResult::router_top (the router's margins)
  bool want_logprobs_all = false;       // fill ForwardResult::logprobs_all
  // Keep the logits and / or log_softmax(logits / temperature) where they are computed
  // (ForwardResult::resident_logits / resident_logprobs_all, rows of the packed layout): the
  // mismatch metrics reduce them there (kl_rows, logit_stats_rows) and only per-token results cross.
  bool keep_logits = false;
  bool keep_logprobs_all = false;
  // Keep the targets' log-probs where they are computed (ForwardResult::resident_logprobs, rows of
  // the packed layout) instead of bringing them to the host (`logprobs` is then left empty): the
  // policy loss runs there (policy_loss_rows) and backward_rows takes its gradient there.
  bool keep_logprobs = false;
  const int32_t* probe_ids = nullptr;   // [L, B*T, K]: router_logp at these ids instead (RSPO)
  float temperature = 1.0f;             // logprobs of softmax(logits / temperature)
  uint64_t call = 0;                    // entity of this call in the profile's noise streams
  // Data parallelism (Model::set_parallel): tokens are this rank's block of a batch of B_total
  // sequences — block dp_block(B_total, dp size, dp rank), B of them (B may be 0). Aux losses,
  // expert_load and gradients then cover the whole batch. 0 = B (the batch is not split).
  int B_total = 0;
};

struct ForwardResult {
  std::vector<float> logprobs;     // [B, T-1]: log p(tokens[t+1] | tokens[..t])
  std::vector<float> logits;       // [B*T, V] when want_logits (after the LM head, FP32, before
                                   // the temperature)
  std::vector<float> logprobs_all;  // [B*T, V] when want_logprobs_all: log_softmax(logits /
                                    // temperature), computed where the logits are
  // In the backend's memory when keep_logits / keep_logprobs_all: [rows, V] over the packed rows,
  // sequence b's position t at row row_begin[b] + t (row_begin [B + 1]).
  ActBuffer<float> resident_logits, resident_logprobs_all;
  ActBuffer<float> resident_logprobs;  // [rows] when keep_logprobs: row row_begin[b] + t scores t + 1
  std::vector<int> row_begin;
  std::vector<int32_t> topk_ids;   // [L, B*T, K] experts used, sorted by descending gate score
  std::vector<float> router_logp;  // [L, B*T, K] log of the full-softmax router prob of those ids
                                   // (of probe_ids when given)
  std::vector<int32_t> own_topk_ids;  // [L, B*T, K] the router's own choice (when want_own_topk)
  std::vector<float> router_logits;   // [L, B*T, E] router logits after the temperature
                                      // (when want_router_logits)
  std::vector<float> router_top;      // [L, B*T, 2] the K-th and (K+1)-th largest of those logits
                                      // (when want_router_top and E > K): the top-k's margin,
                                      // selected where the logits are (2 floats a token cross)
  std::vector<int64_t> expert_load;  // [L, E] (token, slot) pairs routed to each expert, over the
                                     // whole batch (all data-parallel ranks)
  float aux_loss = 0.0f;           // load-balancing + z losses summed over layers (coef included)
  // All-to-all traffic of the MoE layers, per layer and expert-parallel rank: bytes each rank
  // sends to other ranks (dispatch + combine, FP32 rows; backward moves as much again) and the
  // (token, slot) rows each rank's experts receive (the load imbalance). [L, ranks]; one rank:
  // 0 bytes and all rows.
  std::vector<int64_t> a2a_bytes;
  std::vector<int64_t> tokens_received;
};

struct GenerationState;  // KV cache and per-sequence lengths (opaque)
// A generation's decode units under op graphs (Model::generation_graphs).
struct GenerationGraphs {
  int64_t recorded = 0, replayed = 0;
  int64_t stale = 0;    // recordings the backend refused to launch (its memory had moved since)
  std::string failure;  // why recording stopped (the backend's word), empty if it did not
};

class Model {
 public:
  explicit Model(const ModelConfig& cfg);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // Spreads the model over ranks (models/parallel.h): experts sharded over par.ep (this rank
  // computes and updates only its own, expert_range(); the other experts' slots are left as they
  // are), sequences over par.dp, sums in deterministic mode when par.reduce_chunks > 0. The
  // collectives must outlive the model. Validates (n_experts % EP, …); throws std::invalid_argument.
  void set_parallel(const ModelParallel& par);
  const ModelParallel& parallel() const { return par_; }
  ExpertRange expert_range() const;
  // The parameters and their gradients. On a backend whose memory is the device's they live there
  // for the run (set_backend allocates them; the first op that reads them uploads them once), the
  // ops read and write them where they lie, and the optimizer updates them there
  // (sim/step/optimizer.h, adamw_step). These accessors give the host copy, brought up to date
  // first (one download when the device's is newer); the non-const ones also take the host copy
  // as the newer from then on (the caller may write it: it is uploaded before the next op reads
  // it). On the CPU backend they are the stores themselves, and nothing is copied.
  ParamStore& params();
  const ParamStore& params() const;
  ParamStore& grads();
  const ParamStore& grads() const;
  // Zeroes the gradients where they live.
  void zero_grads();
  // True when the parameters and gradients live in the backend's device memory.
  bool resident() const;
  // The arrays the ops use: the device copies when resident (brought up to date: an upload if the
  // host's is newer), else the host stores. weights() only reads; param_data() and grad_sinks()
  // hand out writable arrays, whose copy is then the newer.
  ParamView<const float> weights() const;
  float* param_data();
  ParamView<float> grad_sinks();
  // Expert selection bias b [L, E] (only used when cfg.expert_bias); not a trained parameter.
  std::vector<float>& expert_bias() { return expert_bias_; }
  RouterControl& router_control() { return router_control_; }

  // Training-mode forward over whole sequences.
  void forward(ForwardResult* out, const ForwardRequest& req);
  // Backward of the last forward (which must have save_for_backward): dlogp[B, T-1] is dLoss /
  // dlogprobs; the aux losses' gradients are added with their coefficients. grads() += .
  void backward(const float* dlogp);
  // The same, with dlogp [rows] in the forward's packed layout (ForwardResult::row_begin: row
  // row_begin[b] + t for dLoss / dlogprobs[b, t], 0 at every row that scores nothing, a sequence's
  // last included) where it lies: the backend's memory when the policy loss ran there
  // (keep_logprobs).
  void backward_rows(const float* dlogp_rows);

  // Generation with a KV cache. prefill runs the prompt [B, P] (all sequences the same length) and
  // writes the last position's logits [B, V]; step appends one token per sequence and writes
  // logits [B, V]. topk_ids / router_logp receive [L, B*P, K] (prefill) or [L, B, K] (step) when
  // non-null: the routing of each position at the step that computed it. replay_ids, when non-null,
  // gives the ids to use in the same layout.
  void generation_begin(GenerationState** state, int B, int max_len, const NumericsProfile* profile);
  void generation_prefill(GenerationState* state, float* logits, int32_t* topk_ids,
                          float* router_logp, const int32_t* prompt, int P,
                          const int32_t* replay_ids = nullptr);
  void generation_step(GenerationState* state, float* logits, int32_t* topk_ids,
                       float* router_logp, const int32_t* tokens,
                       const int32_t* replay_ids = nullptr);
  // (prefill and step: logits may be null, and then stay where they are computed.)
  // log μ [B, V] = log_softmax(logits / temperature) of the last prefill's or step's logits,
  // computed and kept where they are (the state's log-probs); logp, when non-null, receives a copy.
  void generation_logprobs(GenerationState* state, float* logp, float temperature);
  // The sampler where the logits are (the sample_rows op): tokens[B] drawn from the current rows'
  // logits at temperature / top_p with uniform[B] (one per row; unused at temperature 0; a row
  // whose draw is not wanted may take any value), logp[B] = log μ at the token and entropy[B] of
  // μ, from the state's log-probs (generation_logprobs first). Only these 3·B values cross.
  void generation_sample(GenerationState* state, int32_t* tokens, float* logp, float* entropy,
                         const double* uniform, float temperature, float top_p);
  // dst[dst_row[i]] = the state's log-probs of row i, rows of V in the backend's memory
  // (dst_row[i] < 0: skipped): the rollout's record of μ stays where it is computed.
  void generation_store_logprobs(GenerationState* state, float* dst, const int32_t* dst_row);
  // True when the state's calls route resident (models/model_impl.h, routes_resident: a device
  // backend, one EP rank, no EP layout, experts whose GEMMs are sized where the ids are): a call's
  // routing then stays where it is computed, and the host reads it only when asked.
  bool generation_routes_resident(const GenerationState* state) const;
  // Resident routing: the last call's routing (n rows) into records where they lie, without a
  // read: row dst_row[i] of rec_ids [L, rec_rows, K] and of rec_logp [L, rec_rows, K] (the
  // backend's memory) receives the call's row i; dst_row (host, n) goes up once.
  void generation_record_routing(GenerationState* state, int32_t* rec_ids, float* rec_logp, int64_t rec_rows,
                                 const int32_t* dst_row, int n);
  // Resident decode (generation_routes_resident) in two units, with the same ops and bits as the
  // calls they stand for, one upload each from host memory that stays put: where the backend
  // records op graphs (Backend::graphs: CUDA Graphs on a GPU) each unit is recorded once per batch
  // size and replayed, since nothing in it changes from one step to the next but what its upload
  // brings (models/model_impl.h, the blocks).
  // generation_feed = generation_step(tokens) + generation_record_routing(rec_row) and, when
  // temperature > 0, generation_logprobs(temperature).
  void generation_feed(GenerationState* state, const int32_t* tokens, int32_t* rec_ids, float* rec_logp,
                       int64_t rec_rows, const int32_t* rec_row, float temperature);
  // generation_draw = generation_sample + generation_store_logprobs(dst, dst_row), its one read the
  // 3·B values sampled.
  void generation_draw(GenerationState* state, int32_t* tokens, float* logp, float* entropy, const double* uniform,
                       float temperature, float top_p, float* dst, const int32_t* dst_row);
  // The units recorded and replayed so far (0 and 0 without graphs), and why recording stopped.
  GenerationGraphs generation_graphs(const GenerationState* state) const;
  // Keeps n of the state's rows (decode compaction: finished sequences leave the batch): row i
  // becomes what row from[i] was (its KV cache, logits and log-probs included: one gather each in
  // the backend's memory), the others are dropped, and later steps
  // take n tokens. Each from[i] must be i or >= n and all distinct (a finished row's place is
  // filled from the tail), so nothing is moved twice. What keys on a row (its noise streams under
  // a row-keyed profile) then keys on its new index: callers compact only under a profile whose
  // kernels are row-independent (models/sites.h). Throws std::invalid_argument.
  void generation_keep(GenerationState* state, const int32_t* from, int n);
  void generation_end(GenerationState* state);

  // Packed weights are cached per profile until the parameters change: call after every
  // optimizer step or checkpoint load.
  void invalidate_packed_weights();

  // Where every op of this model runs (kernels/backend.h); the CPU backend until set. The backend
  // must outlive the model (its activations live in the backend's memory, freed by it). Packed
  // weights are cached per (profile, backend), so switching back and forth (moerl audit across
  // backends) does not repack; the activations of the last forward are released on a switch (a
  // backward needs a forward on the new backend first).
  void set_backend(const Backend& backend);
  const Backend& backend() const;

  struct Impl;  // private state (model_impl.h), opaque to users

 private:
  void backward_impl(const float* dlogp, bool rows);

  ModelConfig cfg_;
  ModelParallel par_;
  mutable ParamStore params_, grads_;  // the host copies (a const read may refresh them)
  std::vector<float> expert_bias_;
  RouterControl router_control_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moerl
