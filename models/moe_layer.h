// moe_layer.h — the MoE FFN: router → dispatch → experts → combine (+ optional shared expert).
// Forward writes y with '='; backward accumulates dh and all weight gradients with '+='.
//
// Under expert parallelism the dispatcher sends every expert's rows to the rank that owns it; this
// rank runs only its experts [plan.e0, plan.e0 + plan.E_local), and only their gradients are
// written (the owner's slots; expert gradients never leave their owner).
#pragma once

#include <vector>

#include "models/dispatcher.h"
#include "models/ffn.h"
#include "models/router.h"

namespace moerl {

struct MoeWeights {
  const PackedWeight* router = nullptr;              // [E, D]
  const PackedWeight* w_gate = nullptr;              // E packed [F, D] (owned experts packed)
  const PackedWeight* w_up = nullptr;                // E packed [F, D]
  const PackedWeight* w_down = nullptr;              // E packed [D, F]
  const PackedWeight* shared = nullptr;              // 3 packed (gate, up, down) or null
  // raw FP32 weights for backward
  const float *router_raw = nullptr, *w_gate_raw = nullptr, *w_up_raw = nullptr,
              *w_down_raw = nullptr, *shared_gate_raw = nullptr, *shared_up_raw = nullptr,
              *shared_down_raw = nullptr;
};

// Gradients of one MoE layer. Experts: [E, F, D] / [E, D, F], only the owned slots written.
// Dense tensors (router, shared expert): one pointer per row chunk of the call's RowSums (one
// pointer when it is null) — see model_backward.cpp.
struct MoeGrads {
  float *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
  std::vector<float*> router, shared_gate, shared_up, shared_down;
};

struct MoeActs {
  RouterActs router;
  DispatchPlan plan;
  // [N*K, D] rows in permuted (expert) order: sent / received back; in the backend's memory with
  // one EP rank (host memory with several: the exchange moves host rows)
  ActBuffer<float> xe, ye;
  Workspace<float> xg, yg;  // [received, D] this rank's experts' rows (EP > 1 only; with one
                              // rank xe, ye are the experts' buffers)
  std::vector<int32_t> slot_order;  // [N*K] combine base order of each token (ep_layout), or empty
  FfnActs experts;
  FfnActs shared;
  ActBuffer<float> shared_y;  // [N, D], as xe
};

struct MoeCall {
  RouterCall router;
  FfnNumerics experts;
  FfnNumerics shared;
  ReduceCtx combine;
  EpLayout ep_layout;                     // the engine's emulated layout (combine base order)
  const Dispatcher* dispatcher = nullptr;  // null: a LocalDispatcher
};

// h[N, D] → y[N, D]; returns the layer's aux loss (see router_forward).
float moe_forward(float* y, MoeActs* acts, float* router_logp, int64_t* load, const float* h,
                  const MoeWeights& w, int N, const MoeCall& call);
void moe_backward(float* dh, const MoeGrads& g, const float* dy, const MoeActs& acts,
                  const float* h, const MoeWeights& w, int N, const MoeCall& call);

// Base combine order per token for an emulated EP layout: out[N*K] holds each token's slots sorted
// by arrival (see EpLayout); nothing is written for EpLayoutKind::none.
void moe_slot_order(int32_t* out, const int32_t* ids, int N, int K, int E, const EpLayout& layout);

}  // namespace moerl
