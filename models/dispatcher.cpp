// dispatcher.cpp — the dispatcher's local phases, and the single-process exchange (dispatcher.h).
#include "models/dispatcher.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/hd/moe.h"
#include "kernels/rng.h"

namespace moerl {

namespace {
// Regrouping between the exchange's source-rank-major layout (rank s, then local expert j) and the
// expert-major layout (local expert j, then rank s): calls copy(expert-major row, source-major
// row, rows) for every (s, j) block.
template <class Copy>
void regroup_blocks(const DispatchPlan& p, Copy&& copy) {
  const int S = p.ranks, J = p.E_local;
  std::vector<int> fill(p.expert_offsets.begin(), p.expert_offsets.end() - 1);
  size_t src = 0;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < J; ++j) {
      const int n = p.recv_expert[static_cast<size_t>(s) * J + j];
      copy(static_cast<size_t>(fill[j]), src, static_cast<size_t>(n));
      fill[j] += n;
      src += static_cast<size_t>(n);
    }
}
}  // namespace

void Dispatcher::dispatch(float* xe, DispatchPlan* p, const float* h, const int32_t* ids, int N,
                          int K, int E, int D, const Backend& be, const int32_t* dev_ids) const {
  p->N = N; p->K = K; p->E = E;
  p->ranks = ranks();
  p->rank = rank();
  p->E_local = E / p->ranks;
  p->e0 = p->E_local * p->rank;
  const size_t NK = static_cast<size_t>(N) * K;
  p->resident = ids == nullptr;
  if (p->resident) {  // everything where the ids are: the host reads nothing
    if (ranks() != 1 || !dev_ids)
      throw std::logic_error("Dispatcher::dispatch: no host ids needs one rank and the ids on the backend");
    p->offsets.clear();
    p->slot_row.clear();
    p->row_token.clear();
    p->dev_offsets.resize(be, static_cast<size_t>(E) + 1);
    be.moe_offsets(p->dev_offsets.data(), dev_ids, N, K, E);
    p->dev.resize(be, 3 * NK);
    be.moe_plan(p->dev.data(), p->dev.data() + NK, dev_ids, N, K, E);
    be.moe_gather(xe, h, p->dev_row_token(), N, N * K, D);
    p->send_rows.assign(1, N * K);
    p->recv_rows.assign(1, N * K);
    p->recv_expert.clear();
    p->expert_offsets.clear();
    return;
  }
  p->offsets.assign(E + 1, 0);
  // counting sort by expert; (token, slot) ascending inside an expert (hd/moe.h, the device's too):
  // the offsets on the host (the expert GEMMs' row counts, the load), the rows where the ids are
  cuda::hd_expert_offsets(p->offsets.data(), ids, N * K, E);
  p->dev.resize(be, 3 * NK);
  if (ranks() == 1 && dev_ids) {  // the plan's rows drawn where the ids are: nothing goes up
    p->slot_row.clear();
    p->row_token.clear();
    be.moe_plan(p->dev.data(), p->dev.data() + NK, dev_ids, N, K, E);
  } else {
    p->slot_row.resize(NK);
    p->row_token.resize(NK);
    std::vector<int> fill(static_cast<size_t>(E));
    cuda::hd_group_slots(p->slot_row.data(), p->row_token.data(), fill.data(), ids, p->offsets.data(), N * K, K, E);
    be.mem_copy(p->dev.data(), p->row_token.data(), NK * sizeof(int32_t), CopyDir::to_device, CrossKind::indices);
    be.mem_copy(p->dev.data() + NK, p->slot_row.data(), NK * sizeof(int32_t), CopyDir::to_device, CrossKind::indices);
  }
  be.moe_gather(xe, h, p->dev_row_token(), N, N * K, D);

  const int S = p->ranks, J = p->E_local;
  if (S == 1) {  // a group of one: the permuted buffer is the experts' buffer
    p->send_rows.assign(1, N * K);
    p->recv_rows.assign(1, N * K);
    p->recv_expert.assign(p->offsets.begin() + 1, p->offsets.end());
    for (int e = E - 1; e > 0; --e) p->recv_expert[e] -= p->recv_expert[e - 1];
    p->expert_offsets = p->offsets;
    return;
  }
  // Phase 3, counts first: rows per (destination rank, its local expert).
  std::vector<int32_t> send_expert(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) send_expert[e] = p->offsets[e + 1] - p->offsets[e];
  p->recv_expert.assign(static_cast<size_t>(S) * J, 0);
  exchange_counts(p->recv_expert.data(), send_expert.data(), J);
  p->send_rows.assign(S, 0);
  p->recv_rows.assign(S, 0);
  p->expert_offsets.assign(J + 1, 0);
  for (int s = 0; s < S; ++s) {
    p->send_rows[s] = p->offsets[(s + 1) * J] - p->offsets[s * J];
    for (int j = 0; j < J; ++j) {
      const int n = p->recv_expert[static_cast<size_t>(s) * J + j];
      p->recv_rows[s] += n;
      p->expert_offsets[j + 1] += n;
    }
  }
  for (int j = 0; j < J; ++j) p->expert_offsets[j + 1] += p->expert_offsets[j];
}

float* Dispatcher::scratch(size_t n) const {
  if (scratch_.size() < n) scratch_.resize(n);
  return scratch_.data();
}

void Dispatcher::to_experts(float* xg, const float* xe, const DispatchPlan& p, int D) const {
  float* xr = scratch(static_cast<size_t>(p.received()) * D);
  exchange(xr, p.recv_rows.data(), xe, p.send_rows.data(), D);
  regroup_blocks(p, [&](size_t em, size_t sm, size_t n) {
    std::memcpy(xg + em * D, xr + sm * D, sizeof(float) * n * D);
  });
}

void Dispatcher::from_experts(float* ye, const float* yg, const DispatchPlan& p, int D) const {
  float* yr = scratch(static_cast<size_t>(p.received()) * D);
  regroup_blocks(p, [&](size_t em, size_t sm, size_t n) {
    std::memcpy(yr + sm * D, yg + em * D, sizeof(float) * n * D);
  });
  exchange(ye, p.send_rows.data(), yr, p.recv_rows.data(), D);
}

void Dispatcher::combine(float* y, const float* ye, const float* gate, const float* y_extra,
                         const DispatchPlan& p, int D, const ReduceCtx& ctx, const Backend& be,
                         const int32_t* slot_order) const {
  // each token's terms in their order, drawn where the plan is (hd/moe.h), then one op
  be.moe_combine_order(p.dev_order(), slot_order, p.N, p.K, ctx);
  be.moe_combine(y, ye, gate, y_extra, p.dev_slot_row(), p.dev_order(), p.N, p.K, D);
}

void Dispatcher::combine_backward(float* dye, float* dgate, const float* dy, const float* ye,
                                  const float* gate, const DispatchPlan& p, int D, const Backend& be) const {
  be.moe_combine_backward(dye, dgate, dy, ye, gate, p.dev_slot_row(), p.N, p.K, D);
}

void Dispatcher::dispatch_backward(float* dh, const float* dxe, const DispatchPlan& p, int D,
                                   const Backend& be) const {
  be.moe_scatter_add(dh, dxe, p.dev_slot_row(), p.N, p.K, D);
}

void LocalDispatcher::exchange(float* recv, const int* recv_rows, const float* send,
                               const int* send_rows, int D) const {
  if (recv_rows[0] != send_rows[0]) throw std::logic_error("LocalDispatcher: row counts differ");
  std::memmove(recv, send, sizeof(float) * static_cast<size_t>(send_rows[0]) * D);
}

void LocalDispatcher::exchange_counts(int32_t* recv, const int32_t* send, int n) const {
  std::memmove(recv, send, sizeof(int32_t) * n);
}

}  // namespace moerl
