// model_backward.cpp — the hand-written backward, the mirror of model_forward.cpp read bottom-up.
// Roundings of the forward are passed straight through (the gradient of round() is taken as 1).
// All parameter gradients accumulate into Model::grads() with '+='.
//
// Where the gradients go (models/parallel.h): routed-expert tensors straight into grads (this
// rank's experts' slots). Dense tensors: on a single rank in plain mode straight into grads (the
// serial path); otherwise every row chunk of the batch (deterministic mode: the canonical chunks;
// plain mode: this rank's rows) accumulates into its own zeroed partial, and the partials of all
// ranks are combined (chunk order, or all-reduce) and added to grads at the end. Every op over
// rows runs once per chunk, so a chunk's bits never depend on which rank holds it.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/layer_forward.h"
#include "models/model_impl.h"

namespace moerl {

namespace {

// The backward's phases share the model, the saved forward and where each dense gradient goes.
class Backward {
 public:
  Backward(Model& m, Model::Impl& im)
      : m_(m), im_(im), cfg_(m.config()), be_(m.backend()),
        w_(m.weights()), g_(m.grad_sinks()), ps_(model_packed(&im, cfg_, w_, im.profile, m.expert_range())),
        bounds_(im.rows.bounds()), C_(im.rows.groups()),
        direct_(!im.rows.canonical() && m.parallel().dp_size() == 1),
        N_(im.seq_begin[im.B]), ND_(static_cast<size_t>(N_) * cfg_.d_model),
        partials_(direct_ ? 0 : static_cast<size_t>(C_) * im.dense_size, 0.0f) {
    for (ActBuffer<float>* b : {&dx_, &dh_, &dq_, &dk_, &dv_, &dctx_}) b->resize(be_, ND_);
    zero(dx_);
    zero(dh_);
  }

  // dlogp [B, T-1] on the host, or (rows) [N] in the packed layout where it lies
  void head(const float* dlogp, bool rows);
  void layer(int l);
  void embedding();
  void combine_dense();

 private:
  std::vector<float*> sink(const std::string& name);
  void lin(float* dinp, const std::string& name, const float* dout, const float* inp, int n_out, int n_in);
  void norm(float* dinp, const std::string& name, const float* dout, const float* inp, const float* rstd);
  void ffn(int l, const LayerActs& a);
  void attention(const LayerActs& a);
  void zero(const ActBuffer<float>& b) const { be_.mem_zero(b.data(), b.bytes()); }

  Model& m_;
  Model::Impl& im_;
  const ModelConfig& cfg_;
  const Backend& be_;
  const ParamView<const float> w_;  // the weights and the gradients where the ops use them
  const ParamView<float> g_;
  const PackedSet& ps_;
  const std::vector<int>& bounds_;
  const int C_;
  const bool direct_;  // one rank, plain mode: dense gradients straight into grads
  const int N_;
  const size_t ND_;
  std::vector<float> partials_;  // [C, dense_size] per-chunk dense gradients (unless direct_)
  // [N, D] in the backend's memory: the residual's gradient, scratch
  ActBuffer<float> dx_, dh_, dq_, dk_, dv_, dctx_;
  std::vector<float> dy_host_, dh_host_;  // the MoE layer's host side (on a device only)
};

// The gradient pointer of dense tensor `name`, per chunk.
std::vector<float*> Backward::sink(const std::string& name) {
  const ParamStore& layout = g_.layout();
  const ParamInfo& info = layout.info(name);
  std::vector<float*> out(C_);
  for (int c = 0; c < C_; ++c)
    out[c] = direct_ ? g_.data() + info.offset
                     : partials_.data() + static_cast<size_t>(c) * im_.dense_size +
                           im_.dense_offset[static_cast<size_t>(&info - layout.infos().data())];
  return out;
}

// Linear backward of dense tensor `name`, chunk by chunk.
void Backward::lin(float* dinp, const std::string& name, const float* dout, const float* inp, int n_out,
                   int n_in) {
  const std::vector<float*> g = sink(name);
  for (int c = 0; c < C_; ++c) {
    const size_t r0 = static_cast<size_t>(bounds_[c]);
    be_.linear_backward(dinp + r0 * n_in, g[c], dout + r0 * n_out, inp + r0 * n_in,
                        w_.get(name), bounds_[c + 1] - bounds_[c], n_out, n_in);
  }
}

// RMSNorm backward of dense tensor `name`, chunk by chunk.
void Backward::norm(float* dinp, const std::string& name, const float* dout, const float* inp,
                    const float* rstd) {
  const int D = cfg_.d_model;
  const std::vector<float*> g = sink(name);
  for (int c = 0; c < C_; ++c) {
    const size_t r0 = static_cast<size_t>(bounds_[c]);
    be_.rmsnorm_backward(dinp + r0 * D, g[c], dout + r0 * D, inp + r0 * D, w_.get(name),
                         rstd + r0, bounds_[c + 1] - bounds_[c], D);
  }
}

// logprobs[b, t] = log_softmax(logits[seq_begin[b]+t])[tokens[seq_begin[b]+t+1]] (seq_begin[b] = b·T
// unpacked; the padding's dlogp is not read); logits = h_final·lm_headᵀ; h_final = rmsnorm(x_final).
void Backward::head(const float* dlogp, bool rows) {
  const int B = im_.B, T = im_.T, V = cfg_.vocab_size, D = cfg_.d_model;
  std::vector<float> unpacked;
  if (!rows) {
    unpacked.assign(N_, 0.0f);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t + 1 < im_.seq_begin[b + 1] - im_.seq_begin[b]; ++t)
        unpacked[im_.seq_begin[b] + t] = dlogp[static_cast<size_t>(b) * (T - 1) + t];
  }
  const float* dlp = rows ? dlogp : unpacked.data();
  const int64_t NV = static_cast<int64_t>(N_) * V;
  ActBuffer<float>& dlogits = im_.dlogits;
  dlogits.resize(be_, static_cast<size_t>(NV));
  zero(dlogits);
  if (im_.temperature == 1.0f) {
    be_.logprob_backward(dlogits.data(), dlp, im_.logits.data(), im_.targets.data(), N_, V);
  } else {  // logprobs of softmax(logits / τ) (the forward's im_.scaled): the chain rule adds 1/τ
    be_.logprob_backward(dlogits.data(), dlp, im_.scaled.data(), im_.targets.data(), N_, V);
    be_.divide_scalar(dlogits.data(), dlogits.data(), NV, im_.temperature);
  }
  lin(dh_.data(), "lm_head", dlogits.data(), im_.h_final.data(), V, D);
  norm(dx_.data(), "final_norm", dh_.data(), im_.x_final.data(), im_.rstd_final.data());
}

// x_out = x_mid + y: dx flows to x_mid unchanged and into the FFN (or the MoE layer) as dy; dh_
// receives the gradient of its input h_mlp.
void Backward::ffn(int l, const LayerActs& a) {
  const int D = cfg_.d_model, K = cfg_.top_k, T = im_.T;
  const std::string pre = layer_prefix(l);
  const ParamView<const float>& params = w_;
  zero(dh_);
  if (!cfg_.is_moe()) {
    ffn_backward_chunks(dh_.data(), sink(pre + "mlp.w_gate"), sink(pre + "mlp.w_up"),
                        sink(pre + "mlp.w_down"), dx_.data(), a.ffn, a.h_mlp.data(),
                        params.get(pre + "mlp.w_gate"), params.get(pre + "mlp.w_up"),
                        params.get(pre + "mlp.w_down"), bounds_, cfg_.mlp_width(), D, be_);
    return;
  }
  const int32_t* replay = im_.mode == RouterMode::replay
                              ? im_.replay_ids.data() + static_cast<size_t>(l) * N_ * K : nullptr;
  const float* bias = cfg_.expert_bias ? m_.expert_bias().data() + static_cast<size_t>(l) * cfg_.n_experts : nullptr;
  MoeCall mc = moe_call(cfg_, im_.profile, l, im_.call, im_.mode, replay, bias, T, true,
                        im_.dispatcher.get(), &im_.rows);
  mc.router.backend = &be_;
  router_apply_control(&mc.router, im_.control, l, N_, cfg_.n_experts, true);
  MoeGrads g;
  g.w_gate = g_.get(pre + "moe.w_gate");
  g.w_up = g_.get(pre + "moe.w_up");
  g.w_down = g_.get(pre + "moe.w_down");
  g.router = sink(pre + "moe.router");
  if (cfg_.shared_expert_ff > 0) {
    g.shared_gate = sink(pre + "moe.shared.w_gate");
    g.shared_up = sink(pre + "moe.shared.w_up");
    g.shared_down = sink(pre + "moe.shared.w_down");
  }
  // The MoE layer's backward runs where its forward ran (model_forward.cpp): with several EP ranks
  // on a device the layer's output gradient crosses down, dh (accumulated from zero on the host)
  // back up, and the input is the host copy the forward kept.
  const bool staged = be_.memory_space() == MemorySpace::device && im_.dispatcher->ranks() > 1;
  const float* dy = staged ? act_to_host(be_, &dy_host_, dx_.data(), ND_) : dx_.data();
  if (staged) dh_host_.assign(ND_, 0.0f);
  float* dh = staged ? dh_host_.data() : dh_.data();
  const float* h = staged ? a.h_mlp_host.data() : a.h_mlp.data();
  moe_backward(dh, g, dy, a.moe, h, moe_weights(cfg_, params, ps_.layers[l], l), N_, mc);
  if (staged) be_.mem_copy(dh_.data(), dh, ND_ * sizeof(float), CopyDir::to_device, CrossKind::activations);
}

// ctx = attention(q, k, v), per run of sequences of one length as the forward: dctx_ → dq_, dk_,
// dv_; then q, k = rope(·) backward.
void Backward::attention(const LayerActs& a) {
  const int D = cfg_.d_model, H = cfg_.n_heads, Dh = cfg_.head_dim();
  zero(dq_);
  zero(dk_);
  zero(dv_);
  for (const SeqRun& r : im_.runs) {
    const size_t o = static_cast<size_t>(r.row0) * D;
    be_.attention_backward(dq_.data() + o, dk_.data() + o, dv_.data() + o, dctx_.data() + o, a.att.data() + r.att0,
                           a.q.data() + o, a.k.data() + o, a.v.data() + o, r.B, r.T, H, Dh);
  }
  be_.rope_backward(dq_.data(), im_.dev_positions.data(), N_, H, Dh, cfg_.rope_theta);
  be_.rope_backward(dk_.data(), im_.dev_positions.data(), N_, H, Dh, cfg_.rope_theta);
}

// Layer l read bottom-up: the FFN / MoE block, mlp_norm, W_o, attention, W_q/W_k/W_v, attn_norm.
void Backward::layer(int l) {
  const LayerActs& a = im_.layers[l];
  const std::string pre = layer_prefix(l);
  const int D = cfg_.d_model;
  ffn(l, a);
  // h_mlp = rmsnorm(x_mid)
  norm(dx_.data(), pre + "mlp_norm", dh_.data(), a.x_mid.data(), a.rstd_mlp.data());
  // x_mid = x_in + o ; o = ctx·W_oᵀ
  zero(dctx_);
  lin(dctx_.data(), pre + "attn.wo", dx_.data(), a.ctx.data(), D, D);
  attention(a);
  // q, k = rope(h·W_qᵀ), rope(h·W_kᵀ) ; v = h·W_vᵀ
  zero(dh_);
  lin(dh_.data(), pre + "attn.wq", dq_.data(), a.h_attn.data(), D, D);
  lin(dh_.data(), pre + "attn.wk", dk_.data(), a.h_attn.data(), D, D);
  lin(dh_.data(), pre + "attn.wv", dv_.data(), a.h_attn.data(), D, D);
  // h_attn = rmsnorm(x_in); x_in also feeds x_mid directly (dx already holds that part)
  norm(dx_.data(), pre + "attn_norm", dh_.data(), a.x_in.data(), a.rstd_attn.data());
}

// x = embed[tokens]
void Backward::embedding() {
  const int D = cfg_.d_model;
  const std::vector<float*> g_embed = sink("embed");
  for (int c = 0; c < C_; ++c)
    be_.embedding_backward(g_embed[c], dx_.data() + static_cast<size_t>(bounds_[c]) * D,
                           im_.tokens.data() + bounds_[c], bounds_[c + 1] - bounds_[c], D);
}

// The dense gradients of the whole batch: partials of all ranks, combined alike everywhere, added
// to grads (nothing to do when they went there directly).
void Backward::combine_dense() {
  if (direct_) return;
  std::vector<float> total(static_cast<size_t>(im_.dense_size));
  im_.rows.combine(total.data(), partials_.data(), im_.dense_size);
  // grads += total, tensor by tensor, where the gradients live (an FP32 add_round is the plain add)
  const std::vector<ParamInfo>& infos = g_.layout().infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    if (im_.dense_offset[i] < 0) continue;
    float* g = g_.data() + infos[i].offset;
    be_.add_round(g, g, total.data() + im_.dense_offset[i], infos[i].size, Format::fp32);
  }
}

}  // namespace

void Model::backward(const float* dlogp) { backward_impl(dlogp, false); }
void Model::backward_rows(const float* dlogp_rows) { backward_impl(dlogp_rows, true); }

void Model::backward_impl(const float* dlogp, bool rows) {
  Impl& im = *impl_;
  if (!im.saved) throw std::logic_error("backward: the last forward did not save activations");
  Backward bw(*this, im);
  bw.head(dlogp, rows);
  for (int l = cfg_.n_layers - 1; l >= 0; --l) bw.layer(l);
  bw.embedding();
  bw.combine_dense();
}

}  // namespace moerl
