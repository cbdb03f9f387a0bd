// moe_layer.cpp — see moe_layer.h.
#include "models/moe_layer.h"

#include <algorithm>


namespace moerl {

namespace {
const LocalDispatcher kLocal;

// Where the layer's permuted rows live: the backend's memory, except that an exchange over several
// EP ranks moves host rows (MPI), so with several ranks on a device they stay on the host.
const Backend& moe_rows_memory(const Backend& be, const Dispatcher& d) {
  return d.ranks() > 1 && be.memory_space() == MemorySpace::device ? cpu_backend() : be;
}

// The numerics of this rank's experts: expert e draws its noise as call + e (linear.h), so local
// expert j, global e0 + j, is offset by e0 — the same draws as on one rank.
FfnNumerics local_experts(FfnNumerics nm, int e0) {
  for (LinearNumerics* l : {&nm.gate, &nm.up, &nm.down}) l->reduce.key.call += static_cast<uint64_t>(e0);
  return nm;
}
}  // namespace

void moe_slot_order(int32_t* out, const int32_t* ids, int N, int K, int E, const EpLayout& layout) {
  if (layout.kind == EpLayoutKind::none) return;
  // arrival rank of expert e: (owner rank, position on the owner), flattened
  auto arrival = [&](int e) {
    if (layout.kind == EpLayoutKind::contiguous) return e;
    return (e % layout.ranks) * E + e / layout.ranks;
  };
  for (int n = 0; n < N; ++n) {
    int32_t* o = out + static_cast<size_t>(n) * K;
    const int32_t* id = ids + static_cast<size_t>(n) * K;
    for (int k = 0; k < K; ++k) o[k] = k;
    std::stable_sort(o, o + K, [&](int32_t a, int32_t b) { return arrival(id[a]) < arrival(id[b]); });
  }
}

float moe_forward(float* y, MoeActs* a, float* router_logp, int64_t* load, const float* h,
                  const MoeWeights& w, int N, const MoeCall& c) {
  const ModelConfig& cfg = *c.router.cfg;
  const int E = cfg.n_experts, K = cfg.top_k, D = cfg.d_model;
  const float aux = router_forward(&a->router, router_logp, load, h, *w.router, N, c.router);
  const Backend& be = backend_or_cpu(c.router.backend);

  const Dispatcher& d = c.dispatcher ? *c.dispatcher : kLocal;
  const Backend& mem = moe_rows_memory(be, d);
  a->xe.resize(mem, static_cast<size_t>(N) * K * D);
  a->ye.resize(mem, static_cast<size_t>(N) * K * D);
  // resident routing (RouterCall::stage): the ids stay where they are, and so do the plan's offsets
  const bool resident = c.router.stage != nullptr;
  d.dispatch(a->xe.data(), &a->plan, h, resident ? nullptr : a->router.ids.data(), N, K, E, D, be,
             a->router.dev_ids.data());
  const DispatchPlan& p = a->plan;
  if (p.ranks == 1) {
    ffn_forward_grouped(a->ye.data(), &a->experts, a->xe.data(), w.w_gate, w.w_up, w.w_down,
                        p.gemm_offsets(), E, N * K, c.experts, be);
  } else {
    const size_t rows = static_cast<size_t>(p.received());
    a->xg.resize(rows * D);
    a->yg.resize(rows * D);
    d.to_experts(a->xg.data(), a->xe.data(), p, D);
    ffn_forward_grouped(a->yg.data(), &a->experts, a->xg.data(), w.w_gate + p.e0, w.w_up + p.e0,
                        w.w_down + p.e0, p.expert_offsets.data(), p.E_local, p.received(),
                        local_experts(c.experts, p.e0), be);
    d.from_experts(a->ye.data(), a->yg.data(), p, D);
  }
  const float* extra = nullptr;
  if (w.shared) {
    a->shared_y.resize(mem, static_cast<size_t>(N) * D);
    ffn_forward(a->shared_y.data(), &a->shared, h, w.shared[0], w.shared[1], w.shared[2], N, c.shared, be);
    extra = a->shared_y.data();
  }
  const int32_t* order = nullptr;
  if (c.ep_layout.kind != EpLayoutKind::none) {
    if (resident) throw std::logic_error("moe_forward: resident routing with an EP layout (its order reads the ids)");
    a->slot_order.resize(static_cast<size_t>(N) * K);
    moe_slot_order(a->slot_order.data(), a->router.ids.data(), N, K, E, c.ep_layout);
    order = a->slot_order.data();
  }
  d.combine(y, a->ye.data(), a->router.gate.data(), extra, p, D, c.combine, be, order);
  be.round_format(y, static_cast<int64_t>(N) * D, c.experts.activations);
  return aux;
}

void moe_backward(float* dh, const MoeGrads& g, const float* dy, const MoeActs& a, const float* h,
                  const MoeWeights& w, int N, const MoeCall& c) {
  const ModelConfig& cfg = *c.router.cfg;
  const int E = cfg.n_experts, K = cfg.top_k, D = cfg.d_model, F = cfg.d_ff;
  const Dispatcher& d = c.dispatcher ? *c.dispatcher : kLocal;
  const DispatchPlan& p = a.plan;
  const Backend& be = backend_or_cpu(c.router.backend);
  const size_t rows = static_cast<size_t>(N) * K;
  const Backend& mem = moe_rows_memory(be, d);
  ActBuffer<float> dye, dxe;  // [N*K, D] where xe and ye live
  dye.resize(mem, rows * D);
  dxe.resize(mem, rows * D);
  mem.mem_zero(dxe.data(), dxe.bytes());
  ActBuffer<float> dgate;  // [N, K] beside the gate weights, where the router's backward reads it
  dgate.resize(be, rows);
  // combine: y = Σ_k gate·ye (+ shared)
  d.combine_backward(dye.data(), dgate.data(), dy, a.ye.data(), a.router.gate.data(), p, D, be);
  if (p.ranks == 1) {
    ffn_backward_grouped(dxe.data(), g.w_gate, g.w_up, g.w_down, dye.data(), a.experts,
                         a.xe.data(), w.w_gate_raw, w.w_up_raw, w.w_down_raw, p.gemm_offsets(), E,
                         N * K, F, D, be);
  } else {
    // ye = from_experts(yg): its adjoint sends dye to the experts' owners (counts swapped)
    const size_t recv = static_cast<size_t>(p.received());
    std::vector<float> dyg(recv * D), dxg(recv * D, 0.0f);
    d.to_experts(dyg.data(), dye.data(), p, D);
    const size_t fd = static_cast<size_t>(F) * D, e0 = static_cast<size_t>(p.e0);
    ffn_backward_grouped(dxg.data(), g.w_gate + e0 * fd, g.w_up + e0 * fd, g.w_down + e0 * fd,
                         dyg.data(), a.experts, a.xg.data(), w.w_gate_raw + e0 * fd,
                         w.w_up_raw + e0 * fd, w.w_down_raw + e0 * fd, p.expert_offsets.data(),
                         p.E_local, p.received(), F, D, be);
    // xg = to_experts(xe): the adjoint brings dxg back to the tokens' ranks
    d.from_experts(dxe.data(), dxg.data(), p, D);
  }
  d.dispatch_backward(dh, dxe.data(), p, D, be);
  const std::vector<int> whole{0, N};
  const std::vector<int>& bounds = c.router.rows ? c.router.rows->bounds() : whole;
  if (w.shared)  // y_extra enters the combine with weight 1
    ffn_backward_chunks(dh, g.shared_gate, g.shared_up, g.shared_down, dy, a.shared, h,
                        w.shared_gate_raw, w.shared_up_raw, w.shared_down_raw, bounds,
                        cfg.shared_expert_ff, D, be);
  router_backward(dh, g.router, dgate.data(), a.router, h, w.router_raw, N, c.router);
}

}  // namespace moerl
