// moe_layer.cpp — see moe_layer.h.
#include "models/moe_layer.h"

#include "kernels/precision.h"

namespace moerl {

float moe_forward(float* y, MoeActs* a, float* router_logp, int64_t* load, const float* h,
                  const MoeWeights& w, int N, const MoeCall& c) {
  const ModelConfig& cfg = *c.router.cfg;
  const int E = cfg.n_experts, K = cfg.top_k, D = cfg.d_model;
  const float aux = router_forward(&a->router, router_logp, load, h, *w.router, N, c.router);

  const Dispatcher dispatcher;
  a->xe.resize(static_cast<size_t>(N) * K * D);
  a->ye.resize(static_cast<size_t>(N) * K * D);
  dispatcher.dispatch(a->xe.data(), &a->plan, h, a->router.ids.data(), N, K, E, D);
  ffn_forward_grouped(a->ye.data(), &a->experts, a->xe.data(), w.w_gate, w.w_up, w.w_down,
                      a->plan.offsets.data(), E, c.experts);
  const float* extra = nullptr;
  if (w.shared) {
    a->shared_y.resize(static_cast<size_t>(N) * D);
    ffn_forward(a->shared_y.data(), &a->shared, h, w.shared[0], w.shared[1], w.shared[2], N, c.shared);
    extra = a->shared_y.data();
  }
  dispatcher.combine(y, a->ye.data(), a->router.gate.data(), extra, a->plan, D, c.combine);
  round_array(y, static_cast<int64_t>(N) * D, c.experts.activations);
  return aux;
}

void moe_backward(float* dh, const MoeGrads& g, const float* dy, const MoeActs& a, const float* h,
                  const MoeWeights& w, int N, const MoeCall& c) {
  const ModelConfig& cfg = *c.router.cfg;
  const int E = cfg.n_experts, K = cfg.top_k, D = cfg.d_model, F = cfg.d_ff;
  const Dispatcher dispatcher;
  const size_t rows = static_cast<size_t>(N) * K;
  std::vector<float> dye(rows * D), dgate(rows), dxe(rows * D, 0.0f);
  dispatcher.combine_backward(dye.data(), dgate.data(), dy, a.ye.data(), a.router.gate.data(),
                              a.plan, D);
  ffn_backward_grouped(dxe.data(), g.w_gate, g.w_up, g.w_down, dye.data(), a.experts, a.xe.data(),
                       w.w_gate_raw, w.w_up_raw, w.w_down_raw, a.plan.offsets.data(), E, F, D);
  dispatcher.dispatch_backward(dh, dxe.data(), a.plan, D);
  if (w.shared)  // y_extra enters the combine with weight 1
    ffn_backward(dh, g.shared_gate, g.shared_up, g.shared_down, dy, a.shared, h, w.shared_gate_raw,
                 w.shared_up_raw, w.shared_down_raw, N, cfg.shared_expert_ff, D);
  router_backward(dh, g.router, dgate.data(), a.router, h, w.router_raw, N, c.router);
}

}  // namespace moerl
