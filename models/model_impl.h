// model_impl.h — private state of Model: packed weights per profile, saved activations of the last
// training forward, and the helpers shared by forward, backward and generation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "models/ffn.h"
#include "models/model.h"
#include "models/moe_layer.h"
#include "models/sites.h"
#include "models/workspace.h"

namespace moerl {

// One profile's packed (fake-quantised, kernel-laid-out) weights.
struct PackedLayer {
  PackedWeight wq, wk, wv, wo, router, mlp_gate, mlp_up, mlp_down;
  std::vector<PackedWeight> expert_gate, expert_up, expert_down;  // [E]
  PackedWeight shared[3];                                          // gate, up, down
};
struct PackedSet {
  std::string profile;
  const Backend* backend = nullptr;  // the backend that packed it (device copies are its own)
  std::vector<PackedLayer> layers;
  PackedWeight lm_head;
};

// Activations of one layer, as stored (rounded to the profile's formats), in the backend's memory
// (workspace.h, ActBuffer): on a GPU they stay there and the ops chain on them. Each is written
// whole by its op before it is read.
struct LayerActs {
  ActBuffer<float> x_in;       // [N, D] residual entering the layer
  ActBuffer<float> h_attn;     // [N, D] attn_norm output
  ActBuffer<float> rstd_attn;  // [N]
  ActBuffer<float> q, k, v;    // [N, D] after RoPE, attention operand format
  ActBuffer<float> att;        // [B, H, T, T] probabilities per SeqRun (training mode only)
  ActBuffer<float> ctx;        // [N, D] attention output before W_o
  ActBuffer<float> o;          // [N, D] W_o output
  ActBuffer<float> x_mid;      // [N, D] residual after attention
  ActBuffer<float> h_mlp;      // [N, D] mlp_norm output
  ActBuffer<float> rstd_mlp;   // [N]
  ActBuffer<float> y;          // [N, D] FFN / MoE output
  MoeActs moe;
  FfnActs ffn;
  // With several EP ranks on a device the MoE layer's exchange moves host rows: h_mlp crosses down
  // into h_mlp_host (kept for the backward) and the layer's output up from y_host. Empty
  // otherwise: the MoE layer's ops use h_mlp and y where they lie.
  Workspace<float> h_mlp_host, y_host;
};

// Consecutive sequences of one length in the training forward's row layout: B sequences of T rows
// from row row0, their attention probabilities [B, H, T, T] from att0 of LayerActs::att. The
// batch of fixed length is one run; a packed batch has one per change of length.
struct SeqRun {
  int row0 = 0, B = 0, T = 0;
  size_t att0 = 0;
};
// The runs of sequences whose rows begin at seq_begin[b] (seq_begin[B+1]), and H heads.
std::vector<SeqRun> seq_runs(const std::vector<int>& seq_begin, int H);

struct GenerationState {
  int B = 0, max_len = 0, pos = 0;
  int cache_len = 0;  // positions allocated per sequence: kv_cache_len(max_len)
  NumericsProfile profile;
  // per layer: kcache [B, D, cache_len] (keys transposed), vcache [B, cache_len, D] —
  // kernels/kv_cache.h — in the backend's memory (workspace.h): on a GPU the cache stays there
  // for the whole rollout; the host writes each new position into it (mem_copy_2d) and never
  // reads it back.
  std::vector<DeviceArray<float>> kcache, vcache;
  DeviceArray<int32_t> keep_from;                  // [B] generation_keep's sources, in the backend's memory
  std::vector<LayerActs> layers;                   // workspace for the current rows
  // in the backend's memory: the residual stream of the current rows, the next layer's, the rows
  // whose logits are taken, and the final norm's output
  ActBuffer<float> x, x_next, x_last, h_final, rstd_final;
  // the last prefill's or step's logits [B, V], their tempered copy and log μ = their tempered
  // log-softmax (generation_logprobs), where the sampler reads them; generation_keep's gather target
  ActBuffer<float> logits, scaled, lp, kept;
  ActBuffer<float> sampled;  // generation_sample's [tokens (as int32) | log μ at them | entropy]
  ActBuffer<int32_t> dev_positions;  // the call's positions in the backend's memory (RoPE's)
  ActBuffer<int32_t> dev_len;        // decode: each sequence's length there (attention_decode's)
  // Resident routing (routes_resident, below): every layer's [ids | log-probs]
  // of the call, [L, 2·rows·K] where they are computed, read (when asked) in one copy after the
  // last layer.
  ActBuffer<int32_t> routing_stage;
  bool routed_resident = false;   // the last call routed so (its stage holds its routing) ...
  int routed_rows = 0;            // ... of this many rows
  ActBuffer<int32_t> record_rows;  // generation_record_routing's destination rows, up once a call
  // Resident decode as two units (Model::generation_feed, generation_draw), each one upload of a
  // block of host memory (Backend::host_alloc: pinned on a GPU) at an address that stays put, so
  // that a unit recorded once per batch size replays (Backend::graph_begin, CUDA Graphs): every
  // value that changes from one step to the next comes through its block.
  //   feed block, int32 words at a stride of the first B: [tokens | positions | lengths | record
  //   rows] then the step's call (uint64: every key's NoiseKey::call_at);
  //   draw block: [uniforms (double) | μ's destination rows (int32)]; drawn: [tokens | log μ |
  //   entropy], the unit's one read.
  struct DecodeUnit {
    int rows = -1;     // the batch size it was recorded for
    bool warm = false;  // issued eagerly once at that size (every buffer sized, weights packed)
    std::unique_ptr<Backend::Graph> graph;
  };
  int stride = 0;  // B at generation_begin
  HostArray<uint64_t> feed_host, draw_host;
  DeviceArray<uint64_t> feed_dev, draw_dev;
  HostArray<float> drawn_host;
  DecodeUnit feed_unit, draw_unit;
  bool graphs = false;  // record the units (the backend has graphs, and nothing in a step reads)
  int64_t units_recorded = 0, units_replayed = 0, units_stale = 0;
  std::string graph_failure;  // why recording stopped, if it did
};

// Which copy of a resident array is current: both, or only the host's or the device's.
enum class Newer : uint8_t { none = 0, host, device };

struct Model::Impl {
  const Backend* backend = nullptr;        // null: the CPU backend
  // The parameters and gradients in the backend's device memory (empty on a host-memory backend),
  // and which copy is newer (model.h, params()).
  DeviceArray<float> dparams, dgrads;
  Newer params_newer = Newer::none, grads_newer = Newer::none;
  std::vector<PackedSet> packed;
  std::unique_ptr<Dispatcher> dispatcher;  // LocalDispatcher, or over the EP group
  ActBuffer<int32_t> routing_stage;        // a resident-routing forward's [L, 2·N·K] (routes_resident)
  // Dense (replicated) tensors in a compact layout, for per-chunk gradient partials: offset of
  // each ParamStore tensor in it, -1 for routed-expert tensors.
  std::vector<int64_t> dense_offset;
  int64_t dense_size = 0;

  // saved by the last forward with save_for_backward
  bool saved = false;
  int B = 0, T = 0;
  NumericsProfile profile;
  RouterMode mode = RouterMode::normal;
  std::vector<int32_t> replay_ids;
  uint64_t call = 0;
  float temperature = 1.0f;
  std::vector<int32_t> tokens, targets, positions;  // [N] in the forward's row layout
  ActBuffer<int32_t> dev_positions;                 // [N] positions in the backend's memory
  // Packed forward (ForwardRequest::lengths with padding): sequence b's own positions are rows
  // seq_begin[b] .. seq_begin[b+1]-1 of every saved tensor (N = seq_begin[B]); else b·T.
  bool has_padding = false;  // some sequence is shorter than T: the rows are packed
  std::vector<int> seq_begin;
  std::vector<SeqRun> runs;
  // the KL regularisers' targets in the packed layout, and the RouterControl pointing at them
  std::vector<float> kl_full_target, kl_topk_target;
  RouterControl control;
  RowSums rows;  // how sums over the batch's rows are formed (parallel.h)
  // The layers' activations of a forward that saves them (kept between forwards: an ActBuffer
  // reuses its memory), and the one layer's worth a forward that saves nothing reuses for every
  // layer (π_old, scoring): no buffer is freed and reallocated, and that forward holds one layer
  // of activations instead of all.
  std::vector<LayerActs> layers;
  LayerActs scratch;
  // in the backend's memory: the residual stream, the final norm's input and output, the logits,
  // the logits over the temperature (a forward at τ ≠ 1; the backward reads them), their gradient
  ActBuffer<float> x, x_final, h_final, rstd_final, logits, scaled, dlogits;
  // the router's K+1 largest logits per row (ForwardResult::router_top), one layer at a time
  ActBuffer<int32_t> top_ids;
  ActBuffer<float> top_vals;
  ActBuffer<float> router_top;  // [L, N, 2] every layer's margins where they are, read once a call
};

// Packs (once per parameter version) the weights of `profile`.
// Experts outside `owned` are left unpacked (they live on other ranks).
const PackedSet& model_packed(Model::Impl* impl, const ModelConfig& cfg, const ParamView<const float>& params,
                              const NumericsProfile& profile, ExpertRange owned);

// Numerics of the FFN sites of a layer.
FfnNumerics ffn_numerics(const NumericsProfile& p, int layer, Site gate, Site up, Site down,
                         uint64_t call);

// Resident routing (docs/gpu.md): a device backend, one EP rank, no EP layout (its combine order
// reads the ids), and experts whose grouped GEMMs are sized where their offsets lie
// (grouped_sized_on_device: FP32, one chunk of K). Then no layer reads its ids on the host: each
// writes them, with its router log-probs, into the call's stage (RouterCall::stage), the dispatch
// plan and the GEMMs' offsets are drawn where the ids are, and the call's routing, every layer's,
// comes down in one read at its end (generation: when the caller asks; Forward: always, for the
// result's ids, log-probs and load). A training forward also needs no term computed on the host
// from the router (a balance loss, the z-loss, a KL regulariser).
bool routes_resident(const Model& m, const Model::Impl& im, const NumericsProfile& p);

// The RouterCall / MoeCall of one layer for one call (rows: training only, see RouterCall).
MoeCall moe_call(const ModelConfig& cfg, const NumericsProfile& p, int layer, uint64_t call,
                 RouterMode mode, const int32_t* replay_ids, const float* bias, int seq_len,
                 bool training, const Dispatcher* dispatcher, const RowSums* rows);

// Views of one layer's raw weights (MoE part).
MoeWeights moe_weights(const ModelConfig& cfg, const ParamView<const float>& params, const PackedLayer& pl, int layer);

std::string layer_prefix(int layer);

// Applies the model's RouterControl to one layer's RouterCall: the layer's temperature always; the
// KL targets (rows [N, E] of layer l) only on a training forward.
void router_apply_control(RouterCall* rc, const RouterControl& ctl, int layer, int N, int E,
                          bool training);

}  // namespace moerl
