// dispatcher.h — moves token rows to their experts and back (reference §7.4).
//
// Phases, in Megatron's order; only `exchange` communicates:
//   1 preprocess (local)   counts per expert and the (token, slot) → row permutation
//   2 permute    (local)   copy each token row once per selected expert, rows sorted by expert,
//                          inside an expert by (token, slot) — a deterministic order
//   3 exchange   (comm)    send every expert's rows to the rank owning it
//   4 regroup    (local)   received chunks regrouped by local expert   [experts run here]
//   5 exchange back (comm) the same exchange with send and receive counts swapped
//   6 combine    (local)   weighted sum of each token's k expert outputs, in the profile's order
// Backward runs the phases in reverse; the exchange's adjoint is the exchange with counts swapped.
// This file holds the single-process dispatcher: phases 3–5 are the identity (a group of one
// does not communicate). The MPI dispatcher implements the same interface.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/numerics.h"

namespace moerl {

struct DispatchPlan {
  int N = 0, K = 0, E = 0;
  std::vector<int> offsets;        // [E+1] first row of each expert in the expert-ordered buffer
  std::vector<int32_t> slot_row;   // [N*K] buffer row of (token n, slot k)
  std::vector<int32_t> row_token;  // [N*K] token of each buffer row
};

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;

  // Phases 1–2: plan from ids[N, K]; xe[N*K, D] = h rows in expert order ('=').
  void dispatch(float* xe, DispatchPlan* plan, const float* h, const int32_t* ids, int N, int K,
                int E, int D) const;
  // Phase 6: y[N, D] = Σ_k gate[n, k]·ye[slot_row(n, k)] (+ y_extra[n] last, if non-null), FP32,
  // terms added in ctx's order (fixed: k ascending; reversed; split_k: seeded shuffle per token).
  void combine(float* y, const float* ye, const float* gate, const float* y_extra,
               const DispatchPlan& plan, int D, const ReduceCtx& ctx) const;

  // Backward of combine: dye[N*K, D] = gate·dy ('='), dgate[N, K] = <dy, ye> ('=').
  void combine_backward(float* dye, float* dgate, const float* dy, const float* ye,
                        const float* gate, const DispatchPlan& plan, int D) const;
  // Backward of dispatch: dh[n] += Σ over the token's rows of dxe.
  void dispatch_backward(float* dh, const float* dxe, const DispatchPlan& plan, int D) const;
};

}  // namespace moerl
