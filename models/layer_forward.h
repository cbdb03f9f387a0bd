// layer_forward.h — one transformer layer's forward over N rows, shared by training mode (full
// causal attention over B×T) and generation (one row per sequence against the KV cache).
#pragma once

#include "models/model_impl.h"

namespace moerl {

struct LayerCall {
  const ModelConfig* cfg = nullptr;
  const NumericsProfile* profile = nullptr;
  const ParamView<const float>* params = nullptr;  // the weights where the ops read them (Model::weights)
  const PackedLayer* packed = nullptr;
  int layer = 0, N = 0;
  int B = 0, T = 0;                    // training mode: N = B·T (T is also the aux-loss seq_len)
  // training mode, sequences of their own length (packed): attention runs over each run of
  // sequences of one length; null: B sequences of T rows
  const std::vector<SeqRun>* runs = nullptr;
  GenerationState* decode = nullptr;   // decode mode: N = B rows, KV cache in here
  const int32_t* dev_len = nullptr;    // decode: each row's length (position + 1), backend memory
  const int32_t* positions = nullptr;  // [N]
  const int32_t* dev_positions = nullptr;  // [N] the same in the backend's memory (RoPE reads them
                                           // there: up once per call, not per layer), or null
  uint64_t call = 0;
  RouterMode router_mode = RouterMode::normal;
  const int32_t* replay_ids = nullptr;  // [N, K]
  const float* bias = nullptr;          // [E]
  const int32_t* probe_ids = nullptr;   // [N, K]
  int32_t* own_ids = nullptr;           // [N, K]
  const RouterControl* control = nullptr;  // router temperature and KL regularisers
  bool training = false;                // aux-loss bookkeeping for backward
  const Dispatcher* dispatcher = nullptr;  // MoE exchange (null: local)
  const RowSums* rows = nullptr;          // training: sums over the whole batch (parallel.h)
  const Backend* backend = nullptr;       // where the ops run (null: CPU)
  // Resident routing (RouterCall::stage): the layer's [ids | log-probs] there, [2·N·K]; the
  // router_logp and load of layer_forward must then be null.
  int32_t* routing_stage = nullptr;
};

// a->x_in[N, D] → x_out[N, D] ('='); router_logp[N, K] and load[E] (+=) when non-null.
// Returns the layer's aux loss.
float layer_forward(LayerActs* a, float* x_out, float* router_logp, int64_t* load,
                    const LayerCall& c);

// final norm + LM head: x[N, D] → logits[N, V] (FP32).
void final_forward(float* logits, float* h_final, float* rstd_final, const float* x,
                   const PackedWeight& lm_head, const ParamView<const float>& params, const ModelConfig& cfg,
                   const NumericsProfile& p, int N, uint64_t call, const Backend& be);

}  // namespace moerl
