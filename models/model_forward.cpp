// model_forward.cpp — training-mode forward over whole sequences, and the per-layer forward that
// generation shares with it (generation.cpp). Every op's output is rounded to the profile's
// storage format, as a low-precision engine stores it; backward (model_backward.cpp) mirrors this
// file line by line, straight-through the roundings.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/precision.h"
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

void add_round(float* out, const float* a, const float* b, size_t n, Format f) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  round_array(out, static_cast<int64_t>(n), f);
}
}  // namespace

float layer_forward(LayerActs* a, float* x_out, float* router_logp, int64_t* load,
                    const LayerCall& c) {
  const ModelConfig& cfg = *c.cfg;
  const NumericsProfile& p = *c.profile;
  const ParamStore& params = *c.params;
  const PackedLayer& pl = *c.packed;
  const int N = c.N, D = cfg.d_model, H = cfg.n_heads, Dh = cfg.head_dim(), l = c.layer;
  const size_t ND = static_cast<size_t>(N) * D;
  const Backend& be = backend_or_cpu(c.backend);
  const std::string pre = layer_prefix(l);
  auto key = [&](Site s) { return site_key(p, l, s, c.call); };
  auto lin = [&](Site s) { return site_linear_numerics(p, LinearKind::matmul, key(s)); };
  for (auto* v : {&a->h_attn, &a->q, &a->k, &a->v, &a->ctx, &a->o, &a->x_mid, &a->h_mlp, &a->y})
    v->resize(ND);
  a->rstd_attn.resize(N);
  a->rstd_mlp.resize(N);

  // attention block
  be.rmsnorm_forward(a->h_attn.data(), a->rstd_attn.data(), a->x_in.data(),
                     params.get(pre + "attn_norm"), N, D, cfg.norm_eps,
                     site_reduce(p, p.norm_order, key(Site::attn_norm)));
  round_array(a->h_attn.data(), ND, p.activations);
  be.linear_forward(a->q.data(), a->h_attn.data(), pl.wq, N, lin(Site::wq));
  be.linear_forward(a->k.data(), a->h_attn.data(), pl.wk, N, lin(Site::wk));
  be.linear_forward(a->v.data(), a->h_attn.data(), pl.wv, N, lin(Site::wv));
  round_array(a->q.data(), ND, p.activations);
  round_array(a->k.data(), ND, p.activations);
  round_array(a->v.data(), ND, p.activations);
  be.rope_forward(a->q.data(), c.positions, N, H, Dh, cfg.rope_theta);
  be.rope_forward(a->k.data(), c.positions, N, H, Dh, cfg.rope_theta);
  round_array(a->q.data(), ND, p.attention);
  round_array(a->k.data(), ND, p.attention);
  round_array(a->v.data(), ND, p.attention);
  // Attention rows draw their order noise by (sequence, position, head): call 0 in both modes.
  const ReduceCtx attn_ctx = site_reduce(p, p.attn_order, site_key(p, l, Site::attention, 0));
  if (c.decode) {
    GenerationState* st = c.decode;
    float* kc = st->kcache[l].data();
    float* vc = st->vcache[l].data();
    const size_t Tc = static_cast<size_t>(st->cache_len);
    std::vector<int32_t> len(N);
    for (int b = 0; b < N; ++b) {  // the new position: a row of v, a column of the keys
      const size_t t = static_cast<size_t>(c.positions[b]);
      const float* kb = a->k.data() + static_cast<size_t>(b) * D;
      for (int d = 0; d < D; ++d) kc[(static_cast<size_t>(b) * D + d) * Tc + t] = kb[d];
      std::memcpy(vc + (static_cast<size_t>(b) * Tc + t) * D, a->v.data() + static_cast<size_t>(b) * D, sizeof(float) * D);
      len[b] = c.positions[b] + 1;
    }
    be.attention_decode(a->ctx.data(), a->q.data(), kc, vc, len.data(), N, st->cache_len, H, Dh,
                        attn_ctx);
  } else if (!c.runs) {
    a->att.resize(static_cast<size_t>(c.B) * H * c.T * c.T);
    be.attention_forward(a->ctx.data(), a->att.data(), a->q.data(), a->k.data(), a->v.data(),
                         c.B, c.T, H, Dh, attn_ctx);
  } else {  // each run of sequences of one length over its own rows (one run: the call above)
    const SeqRun last = c.runs->empty() ? SeqRun{} : c.runs->back();  // no sequence on this rank: none
    a->att.resize(last.att0 + static_cast<size_t>(last.B) * H * last.T * last.T);
    for (const SeqRun& r : *c.runs) {
      const size_t o = static_cast<size_t>(r.row0) * D;
      be.attention_forward(a->ctx.data() + o, a->att.data() + r.att0, a->q.data() + o, a->k.data() + o,
                           a->v.data() + o, r.B, r.T, H, Dh, attn_ctx);
    }
  }
  round_array(a->ctx.data(), ND, p.activations);
  be.linear_forward(a->o.data(), a->ctx.data(), pl.wo, N, lin(Site::wo));
  round_array(a->o.data(), ND, p.activations);
  add_round(a->x_mid.data(), a->x_in.data(), a->o.data(), ND, p.activations);

  // feed-forward block
  be.rmsnorm_forward(a->h_mlp.data(), a->rstd_mlp.data(), a->x_mid.data(),
                     params.get(pre + "mlp_norm"), N, D, cfg.norm_eps,
                     site_reduce(p, p.norm_order, key(Site::mlp_norm)));
  round_array(a->h_mlp.data(), ND, p.activations);
  float aux = 0.0f;
  if (cfg.is_moe()) {
    MoeCall mc = moe_call(cfg, p, l, c.call, c.router_mode, c.replay_ids, c.bias, c.T,
                          c.training, c.dispatcher, c.rows);
    mc.router.backend = c.backend;
    mc.router.probe_ids = c.probe_ids;
    mc.router.own_ids = c.own_ids;
    if (c.control) router_apply_control(&mc.router, *c.control, l, N, cfg.n_experts, c.training);
    aux = moe_forward(a->y.data(), &a->moe, router_logp, load, a->h_mlp.data(),
                      moe_weights(cfg, params, pl, l), N, mc);
  } else {
    ffn_forward(a->y.data(), &a->ffn, a->h_mlp.data(), pl.mlp_gate, pl.mlp_up, pl.mlp_down, N,
                ffn_numerics(p, l, Site::mlp_gate, Site::mlp_up, Site::mlp_down, c.call), be);
  }
  add_round(x_out, a->x_mid.data(), a->y.data(), ND, p.activations);
  return aux;
}

void final_forward(float* logits, float* h_final, float* rstd_final, const float* x,
                   const PackedWeight& lm_head, const ParamStore& params, const ModelConfig& cfg,
                   const NumericsProfile& p, int N, uint64_t call, const Backend& be) {
  const int L = cfg.n_layers;
  be.rmsnorm_forward(h_final, rstd_final, x, params.get("final_norm"), N, cfg.d_model,
                     cfg.norm_eps, site_reduce(p, p.norm_order, site_key(p, L, Site::final_norm, call)));
  round_array(h_final, static_cast<int64_t>(N) * cfg.d_model, p.activations);
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
}  // namespace

void Model::forward(ForwardResult* out, const ForwardRequest& req) {
  const NumericsProfile& p = req.profile ? *req.profile : default_profile();
  const Backend& be = backend();
  const int B = req.B, T = req.T, D = cfg_.d_model, L = cfg_.n_layers, V = cfg_.vocab_size, K = cfg_.top_k,
            E = cfg_.n_experts, H = cfg_.n_heads;
  const int B_total = req.B_total > 0 ? req.B_total : B;
  if (B_total < 1 || T < 2 || T > cfg_.max_seq_len)
    throw std::invalid_argument("forward: need B >= 1 and 2 <= T <= model.max_seq_len = " +
                                std::to_string(cfg_.max_seq_len) + " (got B=" + std::to_string(B_total) +
                                ", T=" + std::to_string(T) + ")");
  const SeqBlock block = dp_block(B_total, par_.dp_size(), par_.dp_rank());
  if (B != block.size())
    throw std::invalid_argument("forward: B = " + std::to_string(B) + " sequences, but data-parallel rank " +
                                std::to_string(par_.dp_rank()) + " of " + std::to_string(par_.dp_size()) +
                                " holds " + std::to_string(block.size()) + " of B_total = " +
                                std::to_string(B_total));
  for (int i = 0; i < B * T; ++i)
    if (req.tokens[i] < 0 || req.tokens[i] >= V)
      throw std::invalid_argument("forward: token " + std::to_string(req.tokens[i]) +
                                  " at index " + std::to_string(i) + " outside [0, " +
                                  std::to_string(V) + ")");
  Impl& im = *impl_;
  const PackedSet& ps = model_packed(&im, cfg_, params_, p, expert_range());
  im.saved = false;
  im.B = B; im.T = T;
  // The row layout: sequence b's own positions from row seq_begin[b] (packed), b·T without lengths.
  im.seq_begin.assign(static_cast<size_t>(B) + 1, 0);
  for (int b = 0; b < B; ++b) {
    const int len = req.lengths ? req.lengths[b] : T;
    if (len < 1 || len > T)
      throw std::invalid_argument("forward: lengths[" + std::to_string(b) + "] = " + std::to_string(len) +
                                  " outside [1, T = " + std::to_string(T) + "]");
    im.seq_begin[b + 1] = im.seq_begin[b] + len;
  }
  const int N = im.seq_begin[B];
  im.has_padding = N < B * T;
  im.runs = seq_runs(im.seq_begin, H);
  int64_t rows_total = N;  // every rank's own positions (integer sum: exact in any order)
  if (req.lengths && par_.dp_size() > 1) par_.dp->allreduce_sum(&rows_total, 1);
  im.rows = req.lengths ? RowSums(par_, B_total, im.seq_begin, rows_total) : RowSums(par_, B_total, B, T);
  im.profile = p;
  im.mode = req.router_mode;
  im.call = req.call;
  auto pack = [&](const auto* src, int blocks, int width) {
    using V = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
    return im.has_padding ? rows_pack(src, blocks, B, T, im.seq_begin, width)
                     : std::vector<V>(src, src + static_cast<size_t>(blocks) * B * T * width);
  };
  im.tokens = pack(req.tokens, 1, 1);
  if (req.router_mode == RouterMode::replay) {
    if (!cfg_.is_moe() || !req.replay_ids)
      throw std::invalid_argument("forward: replay needs an MoE model and replay ids");
    im.replay_ids = pack(req.replay_ids, L, K);
  }
  std::vector<int32_t> probe;
  if (cfg_.is_moe() && req.probe_ids) probe = pack(req.probe_ids, L, K);
  // the KL regularisers' targets follow the rows
  im.control = router_control_;
  im.kl_full_target.clear();
  im.kl_topk_target.clear();
  if (im.has_padding && cfg_.is_moe() && router_control_.kl_full_target) {
    im.kl_full_target = pack(router_control_.kl_full_target, L, E);
    im.control.kl_full_target = im.kl_full_target.data();
  }
  if (im.has_padding && cfg_.is_moe() && router_control_.kl_topk_target) {
    im.kl_topk_target = pack(router_control_.kl_topk_target, L, E);
    im.control.kl_topk_target = im.kl_topk_target.data();
  }
  im.positions.resize(N);
  im.targets.resize(N);
  for (int b = 0; b < B; ++b) {
    const int r0 = im.seq_begin[b], len = im.seq_begin[b + 1] - r0;
    for (int t = 0; t < len; ++t) {
      im.positions[r0 + t] = t;
      im.targets[r0 + t] = t + 1 < len ? req.tokens[static_cast<size_t>(b) * T + t + 1] : -1;
    }
  }

  const bool moe = cfg_.is_moe();
  out->topk_ids.assign(moe ? static_cast<size_t>(L) * N * K : 0, 0);
  out->router_logp.assign(moe ? static_cast<size_t>(L) * N * K : 0, 0.0f);
  out->expert_load.assign(moe ? static_cast<size_t>(L) * E : 0, 0);
  out->aux_loss = 0.0f;
  out->own_topk_ids.assign(moe && req.want_own_topk ? static_cast<size_t>(L) * N * K : 0, 0);
  out->router_logits.assign(moe && req.want_router_logits ? static_cast<size_t>(L) * N * E : 0, 0.0f);
  if (!(req.temperature > 0.0f))
    throw std::invalid_argument("forward: temperature must be > 0 (got " + std::to_string(req.temperature) + ")");
  im.temperature = req.temperature;

  im.layers.resize(L);
  std::vector<double> a2a(moe ? 2 * L : 0, 0.0);  // per layer: bytes sent, rows received
  std::vector<float> x(static_cast<size_t>(N) * D);
  be.embedding_forward(x.data(), im.tokens.data(), params_.get("embed"), N, D);
  round_array(x.data(), static_cast<int64_t>(x.size()), p.activations);
  for (int l = 0; l < L; ++l) {
    LayerActs& a = req.save_for_backward ? im.layers[l] : im.scratch;
    a.x_in.assign(x.begin(), x.end());
    LayerCall c;
    c.cfg = &cfg_; c.profile = &p; c.params = &params_; c.packed = &ps.layers[l];
    c.layer = l; c.N = N; c.B = B; c.T = T; c.runs = &im.runs; c.positions = im.positions.data(); c.call = req.call;
    c.router_mode = req.router_mode;
    c.replay_ids = req.router_mode == RouterMode::replay ? im.replay_ids.data() + static_cast<size_t>(l) * N * K : nullptr;
    c.bias = cfg_.expert_bias ? expert_bias_.data() + static_cast<size_t>(l) * E : nullptr;
    c.training = true;
    c.dispatcher = im.dispatcher.get();
    c.rows = &im.rows;
    c.control = &im.control;
    c.backend = &be;
    const size_t lo = static_cast<size_t>(l) * N * K;
    if (!probe.empty()) c.probe_ids = probe.data() + lo;
    if (moe && req.want_own_topk && req.router_mode == RouterMode::replay) c.own_ids = &out->own_topk_ids[lo];
    out->aux_loss += layer_forward(&a, x.data(), moe ? &out->router_logp[static_cast<size_t>(l) * N * K] : nullptr,
                                   moe ? &out->expert_load[static_cast<size_t>(l) * E] : nullptr, c);
    if (moe) {
      const DispatchPlan& dp = a.moe.plan;
      for (int s = 0; s < dp.ranks; ++s)
        if (s != dp.rank)  // rows out in the dispatch, rows back in the combine
          a2a[2 * l] += static_cast<double>(dp.send_rows[s] + dp.recv_rows[s]) * D * sizeof(float);
      a2a[2 * l + 1] = dp.received();
      std::memcpy(&out->topk_ids[lo], a.moe.router.ids.data(), sizeof(int32_t) * N * K);
      if (req.want_router_logits)
        std::memcpy(&out->router_logits[static_cast<size_t>(l) * N * E],
                    a.moe.router.logits.data(), sizeof(float) * N * E);
      if (req.want_own_topk && req.router_mode == RouterMode::normal)
        std::memcpy(&out->own_topk_ids[lo], a.moe.router.ids.data(), sizeof(int32_t) * N * K);
    }
  }
  if (moe) {
    if (par_.dp_size() > 1)  // the load of the whole batch (integer sums: exact in any order)
      par_.dp->allreduce_sum(out->expert_load.data(), static_cast<int64_t>(out->expert_load.size()));
    const int R = par_.ep_size();
    std::vector<double> all = a2a;
    if (R > 1) all = collectives_allgather(*par_.ep, a2a);
    out->a2a_bytes.assign(static_cast<size_t>(L) * R, 0);
    out->tokens_received.assign(static_cast<size_t>(L) * R, 0);
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < L; ++l) {
        out->a2a_bytes[static_cast<size_t>(l) * R + r] = static_cast<int64_t>(all[(static_cast<size_t>(r) * L + l) * 2]);
        out->tokens_received[static_cast<size_t>(l) * R + r] = static_cast<int64_t>(all[(static_cast<size_t>(r) * L + l) * 2 + 1]);
      }
  }
  im.x_final = x;
  im.h_final.resize(static_cast<size_t>(N) * D);
  im.rstd_final.resize(N);
  im.logits.resize(static_cast<size_t>(N) * V);
  final_forward(im.logits.data(), im.h_final.data(), im.rstd_final.data(), x.data(), ps.lm_head,
                params_, cfg_, p, N, req.call, be);

  std::vector<float> lp(N);
  if (req.temperature == 1.0f) {
    be.logprob_forward(lp.data(), im.logits.data(), im.targets.data(), N, V);
  } else {
    std::vector<float> scaled(im.logits);
    for (float& z : scaled) z /= req.temperature;
    be.logprob_forward(lp.data(), scaled.data(), im.targets.data(), N, V);
  }
  out->logprobs.assign(static_cast<size_t>(B) * (T - 1), 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t + 1 < im.seq_begin[b + 1] - im.seq_begin[b]; ++t)
      out->logprobs[static_cast<size_t>(b) * (T - 1) + t] = lp[im.seq_begin[b] + t];
  if (req.want_logits) out->logits = im.logits;
  if (im.has_padding) {  // the outputs in the request's [B, T] layout, the padding's rows 0
    rows_unpack(&out->topk_ids, L, B, T, im.seq_begin, K);
    rows_unpack(&out->router_logp, L, B, T, im.seq_begin, K);
    rows_unpack(&out->own_topk_ids, L, B, T, im.seq_begin, K);
    rows_unpack(&out->router_logits, L, B, T, im.seq_begin, E);
    rows_unpack(&out->logits, 1, B, T, im.seq_begin, V);
  }
  im.saved = req.save_for_backward;
}

}  // namespace moerl
