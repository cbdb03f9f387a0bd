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
#include <stdexcept>

#include "models/layer_forward.h"
#include "models/model_impl.h"

namespace moerl {

void Model::backward(const float* dlogp) {
  Impl& im = *impl_;
  if (!im.saved) throw std::logic_error("backward: the last forward did not save activations");
  const NumericsProfile& p = im.profile;
  const int B = im.B, T = im.T, N = im.seq_begin[B], D = cfg_.d_model, V = cfg_.vocab_size,
            H = cfg_.n_heads, Dh = cfg_.head_dim(), L = cfg_.n_layers, K = cfg_.top_k;
  const size_t ND = static_cast<size_t>(N) * D;
  const PackedSet& ps = model_packed(&im, cfg_, params_, p, expert_range());
  const Backend& be = backend();
  const std::vector<int>& bounds = im.rows.bounds();
  const int C = im.rows.groups();
  const bool direct = !im.rows.canonical() && par_.dp_size() == 1;
  std::vector<float> partials(direct ? 0 : static_cast<size_t>(C) * im.dense_size, 0.0f);
  // the gradient pointer of dense tensor `name`, per chunk
  auto sink = [&](const std::string& name) {
    const ParamInfo& info = grads_.info(name);
    std::vector<float*> out(C);
    for (int c = 0; c < C; ++c)
      out[c] = direct ? grads_.data().data() + info.offset
                      : partials.data() + static_cast<size_t>(c) * im.dense_size +
                            im.dense_offset[static_cast<size_t>(&info - grads_.infos().data())];
    return out;
  };
  // linear / rmsnorm / embedding backward of dense tensor `name`, chunk by chunk
  auto lin = [&](float* dinp, const std::string& name, const float* dout, const float* inp, int n_out,
                 int n_in) {
    const std::vector<float*> g = sink(name);
    for (int c = 0; c < C; ++c) {
      const size_t r0 = static_cast<size_t>(bounds[c]);
      be.linear_backward(dinp + r0 * n_in, g[c], dout + r0 * n_out, inp + r0 * n_in,
                         params_.get(name), bounds[c + 1] - bounds[c], n_out, n_in);
    }
  };
  auto norm = [&](float* dinp, const std::string& name, const float* dout, const float* inp,
                  const float* rstd) {
    const std::vector<float*> g = sink(name);
    for (int c = 0; c < C; ++c) {
      const size_t r0 = static_cast<size_t>(bounds[c]);
      be.rmsnorm_backward(dinp + r0 * D, g[c], dout + r0 * D, inp + r0 * D, params_.get(name),
                          rstd + r0, bounds[c + 1] - bounds[c], D);
    }
  };

  // logprobs[b, t] = log_softmax(logits[seq_begin[b]+t])[tokens[seq_begin[b]+t+1]] (seq_begin[b] = b·T
  // unpacked); the padding's dlogp is not read
  std::vector<float> dlp(N, 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t + 1 < im.seq_begin[b + 1] - im.seq_begin[b]; ++t)
      dlp[im.seq_begin[b] + t] = dlogp[static_cast<size_t>(b) * (T - 1) + t];
  std::vector<float> dlogits(static_cast<size_t>(N) * V, 0.0f);
  if (im.temperature == 1.0f) {
    be.logprob_backward(dlogits.data(), dlp.data(), im.logits.data(), im.targets.data(), N, V);
  } else {  // logprobs of softmax(logits / τ): the chain rule adds 1/τ
    std::vector<float> scaled(im.logits);
    for (float& z : scaled) z /= im.temperature;
    be.logprob_backward(dlogits.data(), dlp.data(), scaled.data(), im.targets.data(), N, V);
    for (float& d : dlogits) d /= im.temperature;
  }

  // final_forward: logits = h_final·lm_headᵀ ; h_final = rmsnorm(x_final)
  std::vector<float> dh(ND, 0.0f), dx(ND, 0.0f);
  lin(dh.data(), "lm_head", dlogits.data(), im.h_final.data(), V, D);
  norm(dx.data(), "final_norm", dh.data(), im.x_final.data(), im.rstd_final.data());

  std::vector<float> dq(ND), dk(ND), dv(ND), dctx(ND);
  for (int l = L - 1; l >= 0; --l) {
    const LayerActs& a = im.layers[l];
    const std::string pre = layer_prefix(l);
    // x_out = x_mid + y: dx flows to x_mid unchanged and into the FFN as dy
    std::fill(dh.begin(), dh.end(), 0.0f);
    if (cfg_.is_moe()) {
      const int32_t* replay = im.mode == RouterMode::replay
                                  ? im.replay_ids.data() + static_cast<size_t>(l) * N * K : nullptr;
      const float* bias = cfg_.expert_bias ? expert_bias_.data() + static_cast<size_t>(l) * cfg_.n_experts : nullptr;
      MoeCall mc = moe_call(cfg_, p, l, im.call, im.mode, replay, bias, T, true,
                            im.dispatcher.get(), &im.rows);
      mc.router.backend = &be;
      router_apply_control(&mc.router, im.control, l, N, cfg_.n_experts, true);
      MoeGrads g;
      g.w_gate = grads_.get(pre + "moe.w_gate");
      g.w_up = grads_.get(pre + "moe.w_up");
      g.w_down = grads_.get(pre + "moe.w_down");
      g.router = sink(pre + "moe.router");
      if (cfg_.shared_expert_ff > 0) {
        g.shared_gate = sink(pre + "moe.shared.w_gate");
        g.shared_up = sink(pre + "moe.shared.w_up");
        g.shared_down = sink(pre + "moe.shared.w_down");
      }
      moe_backward(dh.data(), g, dx.data(), a.moe, a.h_mlp.data(),
                   moe_weights(cfg_, params_, ps.layers[l], l), N, mc);
    } else {
      ffn_backward_chunks(dh.data(), sink(pre + "mlp.w_gate"), sink(pre + "mlp.w_up"),
                          sink(pre + "mlp.w_down"), dx.data(), a.ffn, a.h_mlp.data(),
                          params_.get(pre + "mlp.w_gate"), params_.get(pre + "mlp.w_up"),
                          params_.get(pre + "mlp.w_down"), bounds, cfg_.mlp_width(), D, be);
    }
    // h_mlp = rmsnorm(x_mid)
    norm(dx.data(), pre + "mlp_norm", dh.data(), a.x_mid.data(), a.rstd_mlp.data());
    // x_mid = x_in + o ; o = ctx·W_oᵀ
    std::fill(dctx.begin(), dctx.end(), 0.0f);
    lin(dctx.data(), pre + "attn.wo", dx.data(), a.ctx.data(), D, D);
    // ctx = attention(q, k, v)
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(dk.begin(), dk.end(), 0.0f);
    std::fill(dv.begin(), dv.end(), 0.0f);
    for (const SeqRun& r : im.runs) {  // per run of sequences of one length, as the forward
      const size_t o = static_cast<size_t>(r.row0) * D;
      be.attention_backward(dq.data() + o, dk.data() + o, dv.data() + o, dctx.data() + o, a.att.data() + r.att0,
                            a.q.data() + o, a.k.data() + o, a.v.data() + o, r.B, r.T, H, Dh);
    }
    // q, k = rope(h·W_qᵀ), rope(h·W_kᵀ) ; v = h·W_vᵀ
    be.rope_backward(dq.data(), im.positions.data(), N, H, Dh, cfg_.rope_theta);
    be.rope_backward(dk.data(), im.positions.data(), N, H, Dh, cfg_.rope_theta);
    std::fill(dh.begin(), dh.end(), 0.0f);
    lin(dh.data(), pre + "attn.wq", dq.data(), a.h_attn.data(), D, D);
    lin(dh.data(), pre + "attn.wk", dk.data(), a.h_attn.data(), D, D);
    lin(dh.data(), pre + "attn.wv", dv.data(), a.h_attn.data(), D, D);
    // h_attn = rmsnorm(x_in); x_in also feeds x_mid directly (dx already holds that part)
    norm(dx.data(), pre + "attn_norm", dh.data(), a.x_in.data(), a.rstd_attn.data());
  }
  // x = embed[tokens]
  const std::vector<float*> g_embed = sink("embed");
  for (int c = 0; c < C; ++c)
    be.embedding_backward(g_embed[c], dx.data() + static_cast<size_t>(bounds[c]) * D,
                          im.tokens.data() + bounds[c], bounds[c + 1] - bounds[c], D);
  if (direct) return;
  // the dense gradients of the whole batch: partials of all ranks, combined alike everywhere
  std::vector<float> total(static_cast<size_t>(im.dense_size));
  im.rows.combine(total.data(), partials.data(), im.dense_size);
  const std::vector<ParamInfo>& infos = grads_.infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    if (im.dense_offset[i] < 0) continue;
    float* g = grads_.data().data() + infos[i].offset;
    const float* t = total.data() + im.dense_offset[i];
    for (int64_t j = 0; j < infos[i].size; ++j) g[j] += t[j];
  }
}

}  // namespace moerl
