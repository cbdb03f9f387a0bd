// model_forward.cpp — training-mode forward over whole sequences, and the per-layer forward that
// generation shares with it (generation.cpp). Every op's output is rounded to the profile's
// storage format, as a low-precision engine stores it; backward (model_backward.cpp) mirrors this
// file line by line, straight-through the roundings.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "models/layer_forward.h"
#include "models/model_impl.h"

namespace moerl {

namespace {
const NumericsProfile& default_profile() {
  static const NumericsProfile p = [] {
    NumericsProfile q;
    profile_builtin("fp32-ref", &q);
    return q;
  }();
  return p;
}

// The layer's MoE block: h_mlp → y through the router, the dispatch, the experts and the combine.
// It runs where the activations are (its dispatch, experts and combine are ops; the plan and the
// router's top-k bookkeeping are the host's). With several EP ranks on a device the exchange moves
// host rows: h_mlp crosses down, the layer's output back up (LayerActs::h_mlp_host, y_host).
float moe_block(LayerActs* a, float* router_logp, int64_t* load, const LayerCall& c) {
  const ModelConfig& cfg = *c.cfg;
  const NumericsProfile& p = *c.profile;
  const Backend& be = backend_or_cpu(c.backend);
  const int N = c.N, l = c.layer;
  const size_t ND = static_cast<size_t>(N) * cfg.d_model;
  MoeCall mc = moe_call(cfg, p, l, c.call, c.router_mode, c.replay_ids, c.bias, c.T, c.training, c.dispatcher,
                        c.rows);
  mc.router.backend = c.backend;
  mc.router.probe_ids = c.probe_ids;
  mc.router.own_ids = c.own_ids;
  mc.router.stage = c.routing_stage;
  if (c.control) router_apply_control(&mc.router, *c.control, l, N, cfg.n_experts, c.training);
  const bool staged = be.memory_space() == MemorySpace::device && c.dispatcher && c.dispatcher->ranks() > 1;
  const float* h = staged ? act_to_host(be, &a->h_mlp_host, a->h_mlp.data(), ND) : a->h_mlp.data();
  if (staged) a->y_host.resize(ND);
  float* y = staged ? a->y_host.data() : a->y.data();
  const float aux = moe_forward(y, &a->moe, router_logp, load, h, moe_weights(cfg, *c.params, *c.packed, l), N, mc);
  if (staged) be.mem_copy(a->y.data(), y, ND * sizeof(float), CopyDir::to_device, CrossKind::activations);
  return aux;
}

}  // namespace

float layer_forward(LayerActs* a, float* x_out, float* router_logp, int64_t* load,
                    const LayerCall& c) {
  const ModelConfig& cfg = *c.cfg;
  const NumericsProfile& p = *c.profile;
  const ParamView<const float>& params = *c.params;
  const PackedLayer& pl = *c.packed;
  const int N = c.N, D = cfg.d_model, H = cfg.n_heads, Dh = cfg.head_dim(), l = c.layer;
  const size_t ND = static_cast<size_t>(N) * D;
  const Backend& be = backend_or_cpu(c.backend);
  const std::string pre = layer_prefix(l);
  auto key = [&](Site s) { return site_key(p, l, s, c.call); };
  auto lin = [&](Site s) { return site_linear_numerics(p, LinearKind::matmul, key(s)); };
  for (auto* v : {&a->h_attn, &a->q, &a->k, &a->v, &a->ctx, &a->o, &a->x_mid, &a->h_mlp, &a->y})
    v->resize(be, ND);
  a->rstd_attn.resize(be, N);
  a->rstd_mlp.resize(be, N);
  const int64_t nd = static_cast<int64_t>(ND);

  // attention block
  be.rmsnorm_forward(a->h_attn.data(), a->rstd_attn.data(), a->x_in.data(),
                     params.get(pre + "attn_norm"), N, D, cfg.norm_eps,
                     site_reduce(p, p.norm_order, key(Site::attn_norm)));
  be.round_format(a->h_attn.data(), nd, p.activations);
  be.linear_forward(a->q.data(), a->h_attn.data(), pl.wq, N, lin(Site::wq));
  be.linear_forward(a->k.data(), a->h_attn.data(), pl.wk, N, lin(Site::wk));
  be.linear_forward(a->v.data(), a->h_attn.data(), pl.wv, N, lin(Site::wv));
  be.round_format(a->q.data(), nd, p.activations);
  be.round_format(a->k.data(), nd, p.activations);
  be.round_format(a->v.data(), nd, p.activations);
  const int32_t* pos = c.dev_positions ? c.dev_positions : c.positions;
  be.rope_forward(a->q.data(), pos, N, H, Dh, cfg.rope_theta);
  be.rope_forward(a->k.data(), pos, N, H, Dh, cfg.rope_theta);
  be.round_format(a->q.data(), nd, p.attention);
  be.round_format(a->k.data(), nd, p.attention);
  be.round_format(a->v.data(), nd, p.attention);
  // Attention rows draw their order noise by (sequence, position, head): call 0 in both modes.
  NoiseKey attn_key = site_key(p, l, Site::attention, 0);
  attn_key.call_at = nullptr;  // not a decode step's call (graphs: models/generation.cpp)
  const ReduceCtx attn_ctx = site_reduce(p, p.attn_order, attn_key);
  if (c.decode) {
    // The new position of every sequence into the cache (in the backend's memory, generation.cpp,
    // as k and v are), each at its own length − 1: one write, whose arguments are the same from
    // one decode step to the next.
    GenerationState* st = c.decode;
    float* kc = st->kcache[l].data();
    float* vc = st->vcache[l].data();
    // each sequence's length (position + 1) where the kernels read it: up once per step
    // (generation.cpp's run_layers) for every layer
    be.kv_cache_append(kc, vc, a->k.data(), a->v.data(), c.dev_len, N, D, st->cache_len);
    be.attention_decode(a->ctx.data(), a->q.data(), kc, vc, c.dev_len, N, st->cache_len, H, Dh, attn_ctx);
  } else if (!c.runs) {
    a->att.resize(be, static_cast<size_t>(c.B) * H * c.T * c.T);
    be.attention_forward(a->ctx.data(), a->att.data(), a->q.data(), a->k.data(), a->v.data(),
                         c.B, c.T, H, Dh, attn_ctx);
  } else {  // each run of sequences of one length over its own rows (one run: the call above)
    const SeqRun last = c.runs->empty() ? SeqRun{} : c.runs->back();  // no sequence on this rank: none
    a->att.resize(be, last.att0 + static_cast<size_t>(last.B) * H * last.T * last.T);
    for (const SeqRun& r : *c.runs) {
      const size_t o = static_cast<size_t>(r.row0) * D;
      be.attention_forward(a->ctx.data() + o, a->att.data() + r.att0, a->q.data() + o, a->k.data() + o,
                           a->v.data() + o, r.B, r.T, H, Dh, attn_ctx);
    }
  }
  be.round_format(a->ctx.data(), nd, p.activations);
  be.linear_forward(a->o.data(), a->ctx.data(), pl.wo, N, lin(Site::wo));
  be.round_format(a->o.data(), nd, p.activations);
  be.add_round(a->x_mid.data(), a->x_in.data(), a->o.data(), nd, p.activations);

  // feed-forward block
  be.rmsnorm_forward(a->h_mlp.data(), a->rstd_mlp.data(), a->x_mid.data(),
                     params.get(pre + "mlp_norm"), N, D, cfg.norm_eps,
                     site_reduce(p, p.norm_order, key(Site::mlp_norm)));
  be.round_format(a->h_mlp.data(), nd, p.activations);
  float aux = 0.0f;
  if (cfg.is_moe()) {
    aux = moe_block(a, router_logp, load, c);
  } else {
    ffn_forward(a->y.data(), &a->ffn, a->h_mlp.data(), pl.mlp_gate, pl.mlp_up, pl.mlp_down, N,
                ffn_numerics(p, l, Site::mlp_gate, Site::mlp_up, Site::mlp_down, c.call), be);
  }
  be.add_round(x_out, a->x_mid.data(), a->y.data(), nd, p.activations);
  return aux;
}

void final_forward(float* logits, float* h_final, float* rstd_final, const float* x,
                   const PackedWeight& lm_head, const ParamView<const float>& params, const ModelConfig& cfg,
                   const NumericsProfile& p, int N, uint64_t call, const Backend& be) {
  const int L = cfg.n_layers;
  be.rmsnorm_forward(h_final, rstd_final, x, params.get("final_norm"), N, cfg.d_model,
                     cfg.norm_eps, site_reduce(p, p.norm_order, site_key(p, L, Site::final_norm, call)));
  be.round_format(h_final, static_cast<int64_t>(N) * cfg.d_model, p.activations);
  // Logits stay FP32 (samplers upcast them): only the LM head's operands are rounded.
  be.linear_forward(logits, h_final, lm_head, N,
                    site_linear_numerics(p, LinearKind::lm_head, site_key(p, L, Site::lm_head, call)));
}

std::vector<SeqRun> seq_runs(const std::vector<int>& seq_begin, int H) {
  std::vector<SeqRun> runs;
  size_t att = 0;
  for (size_t b = 0; b + 1 < seq_begin.size(); ++b) {
    const int T = seq_begin[b + 1] - seq_begin[b];
    if (runs.empty() || runs.back().T != T) {
      if (!runs.empty()) att += static_cast<size_t>(runs.back().B) * H * runs.back().T * runs.back().T;
      runs.push_back(SeqRun{seq_begin[b], 0, T, att});
    }
    runs.back().B += 1;
  }
  return runs;
}

namespace {
// Rows of the [B, T] layout → the packed layout: sequence b's first len rows of `width` values
// (times `blocks` leading blocks, e.g. layers) go to rows seq_begin[b]... of each block.
template <class V>
std::vector<V> rows_pack(const V* src, int blocks, int B, int T, const std::vector<int>& seq_begin, int width) {
  const size_t N = static_cast<size_t>(seq_begin[B]), w = static_cast<size_t>(width);
  std::vector<V> dst(static_cast<size_t>(blocks) * N * w);
  for (int l = 0; l < blocks; ++l)
    for (int b = 0; b < B; ++b)
      std::copy_n(src + ((static_cast<size_t>(l) * B + b) * T) * w, (seq_begin[b + 1] - seq_begin[b]) * w,
                  dst.data() + (static_cast<size_t>(l) * N + seq_begin[b]) * w);
  return dst;
}
// The inverse: packed rows back into the [B, T] layout, the padding rows 0.
template <class V>
void rows_unpack(std::vector<V>* v, int blocks, int B, int T, const std::vector<int>& seq_begin, int width) {
  if (v->empty()) return;
  const size_t N = static_cast<size_t>(seq_begin[B]), w = static_cast<size_t>(width);
  std::vector<V> dst(static_cast<size_t>(blocks) * B * T * w, V(0));
  for (int l = 0; l < blocks; ++l)
    for (int b = 0; b < B; ++b)
      std::copy_n(v->data() + (static_cast<size_t>(l) * N + seq_begin[b]) * w, (seq_begin[b + 1] - seq_begin[b]) * w,
                  dst.data() + ((static_cast<size_t>(l) * B + b) * T) * w);
  v->swap(dst);
}

// The training forward's phases share the model, the request, the profile and the result.
class Forward {
 public:
  Forward(Model& m, Model::Impl& im, ForwardResult* out, const ForwardRequest& req, const NumericsProfile& p)
      : m_(m), im_(im), out_(out), req_(req), p_(p), cfg_(m.config()), be_(m.backend()),
        B_(req.B), T_(req.T), w_(m.weights()) {}

  void check() const;
  void layout();
  void outputs();
  void layers();
  void exchange_stats();
  void head();

 private:
  template <class V>
  std::vector<V> pack(const V* src, int blocks, int width) const {
    return im_.has_padding ? rows_pack(src, blocks, B_, T_, im_.seq_begin, width)
                           : std::vector<V>(src, src + static_cast<size_t>(blocks) * B_ * T_ * width);
  }
  void pack_inputs();
  LayerCall layer_call(int l, const PackedSet& ps) const;
  void record_layer(int l, const LayerActs& a);
  bool resident_routing() const;
  void read_routing();

  Model& m_;
  Model::Impl& im_;
  ForwardResult* out_;
  const ForwardRequest& req_;
  const NumericsProfile& p_;
  const ModelConfig& cfg_;
  const Backend& be_;
  const int B_, T_;
  const PackedSet* ps_ = nullptr;  // the profile's packed weights (layers)
  ParamView<const float> w_;       // the weights where the ops read them (Model::weights)
  int N_ = 0;                  // the rows: every sequence's own positions
  std::vector<int32_t> probe_; // probe ids in the row layout (RSPO)
  std::vector<double> a2a_;    // per layer: bytes sent, rows received
  bool resident_ = false;      // routes_resident, and no term computed on the host from the router
};

// 1. The request: sizes, this rank's data-parallel block, tokens in the vocabulary.
void Forward::check() const {
  const ModelParallel& par = m_.parallel();
  const int B_total = req_.B_total > 0 ? req_.B_total : B_;
  if (B_total < 1 || T_ < 2 || T_ > cfg_.max_seq_len)
    throw std::invalid_argument("forward: need B >= 1 and 2 <= T <= model.max_seq_len = " +
                                std::to_string(cfg_.max_seq_len) + " (got B=" + std::to_string(B_total) +
                                ", T=" + std::to_string(T_) + ")");
  const SeqBlock block = dp_block(B_total, par.dp_size(), par.dp_rank());
  if (B_ != block.size())
    throw std::invalid_argument("forward: B = " + std::to_string(B_) + " sequences, but data-parallel rank " +
                                std::to_string(par.dp_rank()) + " of " + std::to_string(par.dp_size()) +
                                " holds " + std::to_string(block.size()) + " of B_total = " +
                                std::to_string(B_total));
  for (int i = 0; i < B_ * T_; ++i)
    if (req_.tokens[i] < 0 || req_.tokens[i] >= cfg_.vocab_size)
      throw std::invalid_argument("forward: token " + std::to_string(req_.tokens[i]) +
                                  " at index " + std::to_string(i) + " outside [0, " +
                                  std::to_string(cfg_.vocab_size) + ")");
  if (!(req_.temperature > 0.0f))
    throw std::invalid_argument("forward: temperature must be > 0 (got " + std::to_string(req_.temperature) + ")");
}

// 2. The row layout: sequence b's own positions from row seq_begin[b] (packed), b·T without lengths;
// the runs of equal lengths, how sums over rows are formed, and the inputs in that layout.
void Forward::layout() {
  const ModelParallel& par = m_.parallel();
  const int B_total = req_.B_total > 0 ? req_.B_total : B_;
  im_.B = B_; im_.T = T_;
  im_.seq_begin.assign(static_cast<size_t>(B_) + 1, 0);
  for (int b = 0; b < B_; ++b) {
    const int len = req_.lengths ? req_.lengths[b] : T_;
    if (len < 1 || len > T_)
      throw std::invalid_argument("forward: lengths[" + std::to_string(b) + "] = " + std::to_string(len) +
                                  " outside [1, T = " + std::to_string(T_) + "]");
    im_.seq_begin[b + 1] = im_.seq_begin[b] + len;
  }
  N_ = im_.seq_begin[B_];
  im_.has_padding = N_ < B_ * T_;
  im_.runs = seq_runs(im_.seq_begin, cfg_.n_heads);
  int64_t rows_total = N_;  // every rank's own positions (integer sum: exact in any order)
  if (req_.lengths && par.dp_size() > 1) par.dp->allreduce_sum(&rows_total, 1);
  im_.rows = req_.lengths ? RowSums(par, B_total, im_.seq_begin, rows_total) : RowSums(par, B_total, B_, T_);
  im_.profile = p_;
  im_.mode = req_.router_mode;
  im_.call = req_.call;
  im_.temperature = req_.temperature;
  pack_inputs();
}

void Forward::pack_inputs() {
  const int L = cfg_.n_layers, K = cfg_.top_k, E = cfg_.n_experts;
  im_.tokens = pack(req_.tokens, 1, 1);
  if (req_.router_mode == RouterMode::replay) {
    if (!cfg_.is_moe() || !req_.replay_ids)
      throw std::invalid_argument("forward: replay needs an MoE model and replay ids");
    im_.replay_ids = pack(req_.replay_ids, L, K);
  }
  if (cfg_.is_moe() && req_.probe_ids) probe_ = pack(req_.probe_ids, L, K);
  // the KL regularisers' targets follow the rows
  im_.control = m_.router_control();
  im_.kl_full_target.clear();
  im_.kl_topk_target.clear();
  if (im_.has_padding && cfg_.is_moe() && im_.control.kl_full_target) {
    im_.kl_full_target = pack(im_.control.kl_full_target, L, E);
    im_.control.kl_full_target = im_.kl_full_target.data();
  }
  if (im_.has_padding && cfg_.is_moe() && im_.control.kl_topk_target) {
    im_.kl_topk_target = pack(im_.control.kl_topk_target, L, E);
    im_.control.kl_topk_target = im_.kl_topk_target.data();
  }
  im_.positions.resize(N_);
  im_.targets.resize(N_);
  for (int b = 0; b < B_; ++b) {
    const int r0 = im_.seq_begin[b], len = im_.seq_begin[b + 1] - r0;
    for (int t = 0; t < len; ++t) {
      im_.positions[r0 + t] = t;
      im_.targets[r0 + t] = t + 1 < len ? req_.tokens[static_cast<size_t>(b) * T_ + t + 1] : -1;
    }
  }
  // the positions where RoPE reads them, forward and backward: up once for the call
  im_.dev_positions.resize(be_, im_.positions.size());
  if (N_ > 0)
    be_.mem_copy(im_.dev_positions.data(), im_.positions.data(), im_.positions.size() * sizeof(int32_t),
                 CopyDir::to_device, CrossKind::indices);
}

// 3. The result's routing outputs, sized for the rows.
void Forward::outputs() {
  const bool moe = cfg_.is_moe();
  const int L = cfg_.n_layers, K = cfg_.top_k, E = cfg_.n_experts;
  out_->topk_ids.assign(moe ? static_cast<size_t>(L) * N_ * K : 0, 0);
  out_->router_logp.assign(moe ? static_cast<size_t>(L) * N_ * K : 0, 0.0f);
  out_->expert_load.assign(moe ? static_cast<size_t>(L) * E : 0, 0);
  out_->aux_loss = 0.0f;
  out_->own_topk_ids.assign(moe && req_.want_own_topk ? static_cast<size_t>(L) * N_ * K : 0, 0);
  out_->router_logits.assign(moe && req_.want_router_logits ? static_cast<size_t>(L) * N_ * E : 0, 0.0f);
  out_->router_top.assign(moe && req_.want_router_top && E > K ? static_cast<size_t>(L) * N_ * 2 : 0, 0.0f);
}

LayerCall Forward::layer_call(int l, const PackedSet& ps) const {
  const int K = cfg_.top_k;
  LayerCall c;
  c.cfg = &cfg_; c.profile = &p_; c.params = &w_; c.packed = &ps.layers[l];
  c.layer = l; c.N = N_; c.B = B_; c.T = T_; c.runs = &im_.runs; c.positions = im_.positions.data(); c.call = req_.call;
  c.dev_positions = im_.dev_positions.data();
  c.router_mode = req_.router_mode;
  c.replay_ids = req_.router_mode == RouterMode::replay ? im_.replay_ids.data() + static_cast<size_t>(l) * N_ * K : nullptr;
  c.bias = cfg_.expert_bias ? m_.expert_bias().data() + static_cast<size_t>(l) * cfg_.n_experts : nullptr;
  c.training = true;
  c.dispatcher = im_.dispatcher.get();
  c.rows = &im_.rows;
  c.control = &im_.control;
  c.backend = &be_;
  const size_t lo = static_cast<size_t>(l) * N_ * K;
  if (!probe_.empty()) c.probe_ids = probe_.data() + lo;
  if (cfg_.is_moe() && req_.want_own_topk && req_.router_mode == RouterMode::replay) c.own_ids = &out_->own_topk_ids[lo];
  return c;
}

// 4. The embedding, then every layer; a forward that saves nothing reuses one layer's activations.
void Forward::layers() {
  const int L = cfg_.n_layers, D = cfg_.d_model, K = cfg_.top_k, E = cfg_.n_experts;
  const bool moe = cfg_.is_moe();
  ps_ = &model_packed(&im_, cfg_, w_, p_, m_.expert_range());
  im_.layers.resize(L);
  a2a_.assign(moe ? 2 * L : 0, 0.0);
  resident_ = resident_routing();
  if (resident_) im_.routing_stage.resize(be_, static_cast<size_t>(L) * 2 * N_ * K);
  const size_t ND = static_cast<size_t>(N_) * D;
  ActBuffer<float>& x = im_.x;  // the residual stream [N, D], in the backend's memory
  x.resize(be_, ND);
  be_.embedding_forward(x.data(), im_.tokens.data(), w_.get("embed"), N_, D);
  be_.round_format(x.data(), static_cast<int64_t>(ND), p_.activations);
  for (int l = 0; l < L; ++l) {
    LayerActs& a = req_.save_for_backward ? im_.layers[l] : im_.scratch;
    act_copy(be_, &a.x_in, x.data(), ND);
    const size_t lo = static_cast<size_t>(l) * N_ * K;
    LayerCall c = layer_call(l, *ps_);
    if (resident_) {  // the ids and log-probs stay where they are, read once below
      c.routing_stage = im_.routing_stage.data() + 2 * lo;
      out_->aux_loss += layer_forward(&a, x.data(), nullptr, nullptr, c);
    } else {
      out_->aux_loss += layer_forward(&a, x.data(), moe ? &out_->router_logp[lo] : nullptr,
                                      moe ? &out_->expert_load[static_cast<size_t>(l) * E] : nullptr, c);
    }
    if (moe) record_layer(l, a);
  }
  if (resident_) read_routing();
  if (!out_->router_top.empty())  // the margins of every layer: one read
    be_.mem_copy(out_->router_top.data(), im_.router_top.data(), out_->router_top.size() * sizeof(float),
                 CopyDir::to_host, CrossKind::per_token);
}

// Resident routing (routes_resident) in a training forward: besides the backend and the experts'
// numerics, nothing the host computes from a layer's routing during the call — no balance loss,
// z-loss or KL regulariser (they read the logits and scores), and no own top-k under replay.
bool Forward::resident_routing() const {
  if (!routes_resident(m_, im_, p_)) return false;
  const RouterControl& c = im_.control;
  const bool kl = (c.kl_full_target && c.kl_full_weight > 0.0f) || (c.kl_topk_target && c.kl_topk_weight > 0.0f);
  const bool balance = cfg_.load_balance != LoadBalance::none && c.load_balance;
  return !balance && cfg_.z_loss_coef == 0.0f && !kl &&
         !(req_.want_own_topk && req_.router_mode == RouterMode::replay);
}

// Every layer's routing in one read: the result's ids and router log-probs, the load (the ids'
// counts, as router_gate adds them) and, in normal mode, the router's own top-k.
void Forward::read_routing() {
  const int L = cfg_.n_layers, K = cfg_.top_k, E = cfg_.n_experts;
  const size_t NK = static_cast<size_t>(N_) * K;
  if (NK == 0) return;
  std::vector<int32_t> stage(static_cast<size_t>(L) * 2 * NK);
  be_.mem_copy(stage.data(), im_.routing_stage.data(), stage.size() * sizeof(int32_t), CopyDir::to_host,
               CrossKind::per_token);
  for (int l = 0; l < L; ++l) {
    const int32_t* s = stage.data() + static_cast<size_t>(l) * 2 * NK;
    const size_t lo = static_cast<size_t>(l) * NK;
    std::memcpy(&out_->topk_ids[lo], s, NK * sizeof(int32_t));
    std::memcpy(&out_->router_logp[lo], s + NK, NK * sizeof(float));
    int64_t* load = &out_->expert_load[static_cast<size_t>(l) * E];
    for (size_t i = 0; i < NK; ++i) load[s[i]] += 1;
    if (req_.want_own_topk && req_.router_mode == RouterMode::normal)
      std::memcpy(&out_->own_topk_ids[lo], s, NK * sizeof(int32_t));
  }
}

// Layer l's routing into the result, and its all-to-all traffic.
void Forward::record_layer(int l, const LayerActs& a) {
  const int D = cfg_.d_model, K = cfg_.top_k, E = cfg_.n_experts;
  const size_t lo = static_cast<size_t>(l) * N_ * K;
  const DispatchPlan& dp = a.moe.plan;
  for (int s = 0; s < dp.ranks; ++s)
    if (s != dp.rank)  // rows out in the dispatch, rows back in the combine
      a2a_[2 * l] += static_cast<double>(dp.send_rows[s] + dp.recv_rows[s]) * D * sizeof(float);
  a2a_[2 * l + 1] = dp.received();
  if (!resident_) std::memcpy(&out_->topk_ids[lo], a.moe.router.ids.data(), sizeof(int32_t) * N_ * K);
  if (req_.want_router_logits)
    be_.mem_copy(&out_->router_logits[static_cast<size_t>(l) * N_ * E], a.moe.router.logits.data(),
                 sizeof(float) * N_ * E, CopyDir::to_host, CrossKind::activations);
  if (!resident_ && req_.want_own_topk && req_.router_mode == RouterMode::normal)
    std::memcpy(&out_->own_topk_ids[lo], a.moe.router.ids.data(), sizeof(int32_t) * N_ * K);
  if (!out_->router_top.empty()) {
    // the K+1 largest logits of each row where they are; their last two are kept (values only:
    // the tie rule decides nothing)
    im_.top_ids.resize(be_, static_cast<size_t>(N_) * (K + 1));
    im_.top_vals.resize(be_, static_cast<size_t>(N_) * (K + 1));
    be_.topk_forward(im_.top_ids.data(), im_.top_vals.data(), a.moe.router.logits.data(), N_, E, K + 1,
                     TieBreak::lowest, NoiseKey{});
    // gathered where they are, every layer's, and read once after the last (Forward::layers)
    if (l == 0) im_.router_top.resize(be_, out_->router_top.size());
    be_.mem_copy_2d(im_.router_top.data() + static_cast<size_t>(l) * N_ * 2, 2 * sizeof(float),
                    im_.top_vals.data() + (K - 1), (K + 1) * sizeof(float), 2 * sizeof(float), static_cast<size_t>(N_),
                    CopyDir::on_device, CrossKind::per_token);
  }
}

// 5. The batch's expert load over the data-parallel ranks, every EP rank's all-to-all traffic.
void Forward::exchange_stats() {
  if (!cfg_.is_moe()) return;
  const ModelParallel& par = m_.parallel();
  const int L = cfg_.n_layers;
  if (par.dp_size() > 1)  // the load of the whole batch (integer sums: exact in any order)
    par.dp->allreduce_sum(out_->expert_load.data(), static_cast<int64_t>(out_->expert_load.size()));
  const int R = par.ep_size();
  std::vector<double> all = a2a_;
  if (R > 1) all = collectives_allgather(*par.ep, a2a_);
  out_->a2a_bytes.assign(static_cast<size_t>(L) * R, 0);
  out_->tokens_received.assign(static_cast<size_t>(L) * R, 0);
  for (int r = 0; r < R; ++r)
    for (int l = 0; l < L; ++l) {
      out_->a2a_bytes[static_cast<size_t>(l) * R + r] = static_cast<int64_t>(all[(static_cast<size_t>(r) * L + l) * 2]);
      out_->tokens_received[static_cast<size_t>(l) * R + r] = static_cast<int64_t>(all[(static_cast<size_t>(r) * L + l) * 2 + 1]);
    }
}

// 6. The final norm and LM head, the log-probs of the targets, the outputs in the [B, T] layout.
void Forward::head() {
  const int L = cfg_.n_layers, D = cfg_.d_model, V = cfg_.vocab_size, K = cfg_.top_k, E = cfg_.n_experts;
  const size_t ND = static_cast<size_t>(N_) * D, NV = static_cast<size_t>(N_) * V;
  act_copy(be_, &im_.x_final, im_.x.data(), ND);
  im_.h_final.resize(be_, ND);
  im_.rstd_final.resize(be_, N_);
  im_.logits.resize(be_, NV);
  final_forward(im_.logits.data(), im_.h_final.data(), im_.rstd_final.data(), im_.x.data(), ps_->lm_head,
                w_, cfg_, p_, N_, req_.call, be_);
  // the targets' log-probs come back to the host (N floats), or stay where they are
  // (keep_logprobs); the logits stay where they are
  const float* tempered = im_.logits.data();
  if (req_.temperature != 1.0f) {
    im_.scaled.resize(be_, NV);
    be_.divide_scalar(im_.scaled.data(), im_.logits.data(), static_cast<int64_t>(NV), req_.temperature);
    tempered = im_.scaled.data();
  }
  if (req_.keep_logprobs) {
    out_->resident_logprobs.resize(be_, N_);
    be_.logprob_forward(out_->resident_logprobs.data(), tempered, im_.targets.data(), N_, V);
    out_->logprobs.clear();
  } else {
    std::vector<float> lp(N_);
    be_.logprob_forward(lp.data(), tempered, im_.targets.data(), N_, V);
    out_->logprobs.assign(static_cast<size_t>(B_) * (T_ - 1), 0.0f);
    for (int b = 0; b < B_; ++b)
      for (int t = 0; t + 1 < im_.seq_begin[b + 1] - im_.seq_begin[b]; ++t)
        out_->logprobs[static_cast<size_t>(b) * (T_ - 1) + t] = lp[im_.seq_begin[b] + t];
  }
  if (req_.want_logits) {
    out_->logits.resize(NV);
    be_.mem_copy(out_->logits.data(), im_.logits.data(), NV * sizeof(float), CopyDir::to_host, CrossKind::activations);
  }
  if (req_.want_logprobs_all) {  // the full distributions, on the device; one download
    out_->logprobs_all.resize(NV);
    be_.log_softmax_forward(out_->logprobs_all.data(), tempered, N_, V);
  }
  // kept where they are, for reductions there (ForwardRequest::keep_logits / keep_logprobs_all)
  out_->row_begin = im_.seq_begin;
  if (req_.keep_logits) act_copy(be_, &out_->resident_logits, im_.logits.data(), NV);
  if (req_.keep_logprobs_all) {
    out_->resident_logprobs_all.resize(be_, NV);
    be_.log_softmax_forward(out_->resident_logprobs_all.data(), tempered, N_, V);
  }
  if (im_.has_padding) {  // the outputs in the request's [B, T] layout, the padding's rows 0
    rows_unpack(&out_->topk_ids, L, B_, T_, im_.seq_begin, K);
    rows_unpack(&out_->router_logp, L, B_, T_, im_.seq_begin, K);
    rows_unpack(&out_->own_topk_ids, L, B_, T_, im_.seq_begin, K);
    rows_unpack(&out_->router_logits, L, B_, T_, im_.seq_begin, E);
    rows_unpack(&out_->router_top, L, B_, T_, im_.seq_begin, 2);
    rows_unpack(&out_->logits, 1, B_, T_, im_.seq_begin, V);
    rows_unpack(&out_->logprobs_all, 1, B_, T_, im_.seq_begin, V);
  }
  im_.saved = req_.save_for_backward;
}

}  // namespace

void Model::forward(ForwardResult* out, const ForwardRequest& req) {
  impl_->saved = false;  // until this forward has run whole
  Forward fw(*this, *impl_, out, req, req.profile ? *req.profile : default_profile());
  fw.check();
  fw.layout();
  fw.outputs();
  fw.layers();
  fw.exchange_stats();
  fw.head();
}

}  // namespace moerl
