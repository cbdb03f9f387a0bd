// model_backward.cpp — the hand-written backward, the mirror of model_forward.cpp read bottom-up.
// Roundings of the forward are passed straight through (the gradient of round() is taken as 1).
// All parameter gradients accumulate into Model::grads() with '+='.
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "models/layer_forward.h"
#include "models/model_impl.h"

namespace moerl {

void Model::backward(const float* dlogp) {
  Impl& im = *impl_;
  if (!im.saved) throw std::logic_error("backward: the last forward did not save activations");
  const NumericsProfile& p = im.profile;
  const int B = im.B, T = im.T, N = B * T, D = cfg_.d_model, V = cfg_.vocab_size,
            H = cfg_.n_heads, Dh = cfg_.head_dim(), L = cfg_.n_layers, K = cfg_.top_k;
  const size_t ND = static_cast<size_t>(N) * D;
  const PackedSet& ps = model_packed(&im, cfg_, params_, p);

  // logprobs[b, t] = log_softmax(logits[b·T+t])[tokens[b·T+t+1]]
  std::vector<float> dlp(N, 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t + 1 < T; ++t) dlp[b * T + t] = dlogp[static_cast<size_t>(b) * (T - 1) + t];
  std::vector<float> dlogits(static_cast<size_t>(N) * V, 0.0f);
  if (im.temperature == 1.0f) {
    cpu::logprob_backward(dlogits.data(), dlp.data(), im.logits.data(), im.targets.data(), N, V);
  } else {  // logprobs of softmax(logits / τ): the chain rule adds 1/τ
    std::vector<float> scaled(im.logits);
    for (float& z : scaled) z /= im.temperature;
    cpu::logprob_backward(dlogits.data(), dlp.data(), scaled.data(), im.targets.data(), N, V);
    for (float& d : dlogits) d /= im.temperature;
  }

  // final_forward: logits = h_final·lm_headᵀ ; h_final = rmsnorm(x_final)
  std::vector<float> dh(ND, 0.0f), dx(ND, 0.0f);
  linear_backward(dh.data(), grads_.get("lm_head"), dlogits.data(), im.h_final.data(),
                  params_.get("lm_head"), N, V, D);
  cpu::rmsnorm_backward(dx.data(), grads_.get("final_norm"), dh.data(), im.x_final.data(),
                        params_.get("final_norm"), im.rstd_final.data(), N, D);

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
      const MoeCall mc = moe_call(cfg_, p, l, im.call, im.mode, replay, bias, T, true);
      moe_backward(dh.data(), moe_grads(cfg_, grads_, l), dx.data(), a.moe, a.h_mlp.data(),
                   moe_weights(cfg_, params_, ps.layers[l], l), N, mc);
    } else {
      ffn_backward(dh.data(), grads_.get(pre + "mlp.w_gate"), grads_.get(pre + "mlp.w_up"),
                   grads_.get(pre + "mlp.w_down"), dx.data(), a.ffn, a.h_mlp.data(),
                   params_.get(pre + "mlp.w_gate"), params_.get(pre + "mlp.w_up"),
                   params_.get(pre + "mlp.w_down"), N, cfg_.mlp_width(), D);
    }
    // h_mlp = rmsnorm(x_mid)
    cpu::rmsnorm_backward(dx.data(), grads_.get(pre + "mlp_norm"), dh.data(), a.x_mid.data(),
                          params_.get(pre + "mlp_norm"), a.rstd_mlp.data(), N, D);
    // x_mid = x_in + o ; o = ctx·W_oᵀ
    std::fill(dctx.begin(), dctx.end(), 0.0f);
    linear_backward(dctx.data(), grads_.get(pre + "attn.wo"), dx.data(), a.ctx.data(),
                    params_.get(pre + "attn.wo"), N, D, D);
    // ctx = attention(q, k, v)
    std::fill(dq.begin(), dq.end(), 0.0f);
    std::fill(dk.begin(), dk.end(), 0.0f);
    std::fill(dv.begin(), dv.end(), 0.0f);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dctx.data(), a.att.data(), a.q.data(),
                            a.k.data(), a.v.data(), B, T, H, Dh);
    // q, k = rope(h·W_qᵀ), rope(h·W_kᵀ) ; v = h·W_vᵀ
    cpu::rope_backward(dq.data(), im.positions.data(), N, H, Dh, cfg_.rope_theta);
    cpu::rope_backward(dk.data(), im.positions.data(), N, H, Dh, cfg_.rope_theta);
    std::fill(dh.begin(), dh.end(), 0.0f);
    linear_backward(dh.data(), grads_.get(pre + "attn.wq"), dq.data(), a.h_attn.data(),
                    params_.get(pre + "attn.wq"), N, D, D);
    linear_backward(dh.data(), grads_.get(pre + "attn.wk"), dk.data(), a.h_attn.data(),
                    params_.get(pre + "attn.wk"), N, D, D);
    linear_backward(dh.data(), grads_.get(pre + "attn.wv"), dv.data(), a.h_attn.data(),
                    params_.get(pre + "attn.wv"), N, D, D);
    // h_attn = rmsnorm(x_in); x_in also feeds x_mid directly (dx already holds that part)
    cpu::rmsnorm_backward(dx.data(), grads_.get(pre + "attn_norm"), dh.data(), a.x_in.data(),
                          params_.get(pre + "attn_norm"), a.rstd_attn.data(), N, D);
  }
  // x = embed[tokens]
  cpu::embedding_backward(grads_.get("embed"), dx.data(), im.tokens.data(), N, D);
}

}  // namespace moerl
