// moe_layer.h — the MoE FFN: router → dispatch → experts → combine (+ optional shared expert).
// Forward writes y with '='; backward accumulates dh and all weight gradients with '+='.
#pragma once

#include <vector>

#include "models/dispatcher.h"
#include "models/ffn.h"
#include "models/router.h"

namespace moerl {

struct MoeWeights {
  const PackedWeight* router = nullptr;              // [E, D]
  const PackedWeight* w_gate = nullptr;              // E packed [F, D]
  const PackedWeight* w_up = nullptr;                // E packed [F, D]
  const PackedWeight* w_down = nullptr;              // E packed [D, F]
  const PackedWeight* shared = nullptr;              // 3 packed (gate, up, down) or null
  // raw FP32 weights for backward
  const float *router_raw = nullptr, *w_gate_raw = nullptr, *w_up_raw = nullptr,
              *w_down_raw = nullptr, *shared_gate_raw = nullptr, *shared_up_raw = nullptr,
              *shared_down_raw = nullptr;
};

struct MoeGrads {
  float *router = nullptr, *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr,
        *shared_gate = nullptr, *shared_up = nullptr, *shared_down = nullptr;
};

struct MoeActs {
  RouterActs router;
  DispatchPlan plan;
  std::vector<float> xe, ye;  // [N*K, D] expert inputs / outputs in expert order
  FfnActs experts;
  FfnActs shared;
  std::vector<float> shared_y;  // [N, D]
};

struct MoeCall {
  RouterCall router;
  FfnNumerics experts;
  FfnNumerics shared;
  ReduceCtx combine;
};

// h[N, D] → y[N, D]; returns the layer's aux loss (see router_forward).
float moe_forward(float* y, MoeActs* acts, float* router_logp, int64_t* load, const float* h,
                  const MoeWeights& w, int N, const MoeCall& call);
void moe_backward(float* dh, const MoeGrads& g, const float* dy, const MoeActs& acts,
                  const float* h, const MoeWeights& w, int N, const MoeCall& call);

}  // namespace moerl
