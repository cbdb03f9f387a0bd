// dispatcher.h — moves token rows to their experts and back (reference §7.4).
//
// Phases, in Megatron's order; only 3 and 5 communicate:
//   1 preprocess (local)   counts per expert and the (token, slot) → row permutation
//   2 permute    (local)   copy each token row once per selected expert, rows sorted by expert,
//                          inside an expert by (token, slot) — a deterministic order
//   3 exchange   (comm)    counts first, then every expert's rows to the rank owning it
//   4 regroup    (local)   received chunks (source-rank major) regrouped by local expert
//                          [experts run here]
//   5 exchange back (comm) ungroup, then the same exchange with send and receive counts swapped
//   6 combine    (local)   weighted sum of each token's k expert outputs, in the profile's order
// Backward runs the phases in reverse; the exchange's adjoint is the exchange with counts swapped.
//
// Under data parallelism every rank holds a contiguous block of the batch's tokens, so an expert's
// rows, regrouped in source-rank order, are in global (token, slot) order: the same rows in the
// same order as on one rank, which makes expert outputs and expert weight gradients independent
// of the number of ranks.
//
// Dispatcher holds the local phases; `exchange` is virtual. LocalDispatcher is a group of one
// (phases 3–5 are the identity and are skipped: nothing is copied or sent); CollectiveDispatcher
// exchanges through a Collectives group (MPI in sim/).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/numerics.h"
#include "models/collectives.h"
#include "models/workspace.h"

namespace moerl {

struct DispatchPlan {
  int N = 0, K = 0, E = 0;         // local tokens, slots per token, experts of the model
  int ranks = 1, rank = 0;         // EP group
  int e0 = 0, E_local = 0;         // this rank's experts [e0, e0 + E_local)
  std::vector<int> offsets;        // [E+1] first row of each expert in the permuted buffer
  std::vector<int32_t> slot_row;   // [N*K] permuted-buffer row of (token n, slot k) (empty when
  std::vector<int32_t> row_token;  // [N*K] token of each permuted-buffer row   drawn on the device)
  // exchange (ranks > 1)
  std::vector<int> send_rows;      // [ranks] rows to each rank (its experts' rows, contiguous)
  std::vector<int> recv_rows;      // [ranks] rows from each rank
  std::vector<int> recv_expert;    // [ranks, E_local] rows from rank s for local expert j
  std::vector<int> expert_offsets; // [E_local+1] first row of each local expert, regrouped buffer
  // Resident (dispatch without host ids, one rank): `offsets` is empty and the offsets lie where
  // the ids are, in dev_offsets [E+1] (the moe_offsets op), which the expert GEMMs read there.
  bool resident = false;
  mutable ActBuffer<int32_t> dev_offsets;
  const int* gemm_offsets() const { return resident ? dev_offsets.data() : offsets.data(); }
  int received() const {
    if (resident) return N * K;
    return expert_offsets.empty() ? 0 : expert_offsets.back();
  }
  // [3, N*K] row_token, slot_row and each token's combine order where the ops read them (the
  // backend's memory): drawn there (moe_plan, moe_combine_order) or, with several ranks, up once
  // per layer and call; read by the gather, the combine and both backward ops
  mutable ActBuffer<int32_t> dev;
  const int32_t* dev_row_token() const { return dev.data(); }
  const int32_t* dev_slot_row() const { return dev.data() + static_cast<size_t>(N) * K; }
  int32_t* dev_order() const { return dev.data() + 2 * static_cast<size_t>(N) * K; }
};

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  virtual int ranks() const = 0;
  virtual int rank() const = 0;

  // Phases 1–2 (+ the count exchange of phase 3): plan from ids[N, K]; xe[N*K, D] = h rows in
  // expert order ('='). Experts [e0, e0 + E/ranks) are this rank's. The row copies, the combine
  // and their backward are the backend's ops (moe_gather, moe_combine, moe_combine_backward,
  // moe_scatter_add: kernels/ops.def) on h, xe, ye, y where they lie; the plan is the host's.
  // dev_ids: the same ids in the backend's memory (the router's), or null. With them and one
  // rank, the plan's rows are drawn there (the moe_plan op) and only the offsets are the host's;
  // otherwise the host draws the plan and its rows go up. ids null (one rank, dev_ids given):
  // resident — the offsets are drawn there too (moe_offsets, DispatchPlan::dev_offsets) and the
  // host reads nothing.
  void dispatch(float* xe, DispatchPlan* plan, const float* h, const int32_t* ids, int N, int K,
                int E, int D, const Backend& be, const int32_t* dev_ids = nullptr) const;

  // Phases 3–4: xg[received, D] = the rows for this rank's experts, regrouped by local expert
  // ('='). Phases 5 (reverse): ye[N*K, D] = the rows of yg[received, D] sent back to their
  // tokens' ranks ('='), in permuted-buffer order. Only for ranks() > 1.
  void to_experts(float* xg, const float* xe, const DispatchPlan& plan, int D) const;
  void from_experts(float* ye, const float* yg, const DispatchPlan& plan, int D) const;

  // Phase 6: y[N, D] = Σ_k gate[n, k]·ye[slot_row(n, k)] (+ y_extra[n] last, if non-null), FP32,
  // terms added in ctx's order over the base order `slot_order` [N*K] (null: k ascending; see
  // ep_layout in kernels/numerics.h) — fixed: as given; reversed; split_k: seeded shuffle per token.
  void combine(float* y, const float* ye, const float* gate, const float* y_extra,
               const DispatchPlan& plan, int D, const ReduceCtx& ctx, const Backend& be,
               const int32_t* slot_order = nullptr) const;

  // Backward of combine: dye[N*K, D] = gate·dy ('='), dgate[N, K] = <dy, ye> ('=').
  void combine_backward(float* dye, float* dgate, const float* dy, const float* ye,
                        const float* gate, const DispatchPlan& plan, int D, const Backend& be) const;
  // Backward of dispatch: dh[n] += Σ over the token's rows of dxe.
  void dispatch_backward(float* dh, const float* dxe, const DispatchPlan& plan, int D, const Backend& be) const;

 protected:
  // Phases 3 and 5: rows to / from the other ranks (rank-major blocks).
  virtual void exchange(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                        int D) const = 0;
  virtual void exchange_counts(int32_t* recv, const int32_t* send, int n) const = 0;

 private:
  // The exchange's source-rank-major rows, kept between calls (no page faults per layer).
  float* scratch(size_t n) const;
  mutable std::vector<float> scratch_;
};

// A group of one: every expert is here, nothing is exchanged.
class LocalDispatcher final : public Dispatcher {
 public:
  int ranks() const override { return 1; }
  int rank() const override { return 0; }

 protected:
  void exchange(float*, const int*, const float*, const int*, int) const override;
  void exchange_counts(int32_t*, const int32_t*, int) const override;
};

// Exchanges over an expert-parallel group.
class CollectiveDispatcher final : public Dispatcher {
 public:
  explicit CollectiveDispatcher(Collectives* group) : group_(group) {}
  int ranks() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }

 protected:
  void exchange(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                int D) const override {
    group_->alltoallv(recv, recv_rows, send, send_rows, D);
  }
  void exchange_counts(int32_t* recv, const int32_t* send, int n) const override {
    group_->alltoall(recv, send, n);
  }

 private:
  Collectives* group_;
};

}  // namespace moerl
