// hd/moe.h — the MoE dispatcher's two orders as host-device functions (kernels/hd.h): which row
// of the expert-grouped buffer each (token, slot) gets, and in which order a token's k expert
// outputs are added in the combine. models/dispatcher.cpp runs them on the CPU; a device dispatch
// (tokens grouped by expert, one grouped GEMM per projection) and a device combine must give the
// same rows and the same sums, so deterministic mode keeps its meaning on a GPU.
//
// Grouping: a stable counting sort of the N·K slots by expert — expert e's rows are
// offsets[e] .. offsets[e+1]-1, inside an expert the slots i = n·K + k in ascending order (what a
// stable sort by expert id gives: cub::DeviceRadixSort, or a scan of per-expert counts).
// Combine order: token n's terms in the base order (slot_order's row, or k ascending), then
// reversed, or shuffled by the seeded stream (seed, combine_order, {layer, site, call + n}).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd/arith.h"
#include "kernels/numerics.h"
#include "kernels/rng.h"

namespace moerl::cuda {

// offsets[E+1] of the stable grouping of ids[NK] (every id in [0, E)): exclusive prefix sums of
// the experts' counts.
MOERL_HD void hd_expert_offsets(int* offsets, const int32_t* ids, int NK, int E) {
  for (int e = 0; e <= E; ++e) offsets[e] = 0;
  for (int i = 0; i < NK; ++i) offsets[ids[i] + 1] += 1;
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
}

// slot_row[i]: the grouped row of slot i; row_token[row]: its token (i / K). fill[E] is scratch.
MOERL_HD void hd_group_slots(int32_t* slot_row, int32_t* row_token, int* fill, const int32_t* ids,
                             const int* offsets, int NK, int K, int E) {
  for (int e = 0; e < E; ++e) fill[e] = offsets[e];
  for (int i = 0; i < NK; ++i) {
    const int row = fill[ids[i]]++;
    slot_row[i] = row;
    row_token[row] = i / K;
  }
}

// order[K]: the slots of token n in the order its expert outputs are added (base: base_row[K],
// or null for k ascending).
MOERL_HD void hd_combine_order(int* order, const int32_t* base_row, int K, OrderKind kind, uint64_t seed,
                               uint64_t layer, uint64_t site, uint64_t call, int64_t n) {
  for (int k = 0; k < K; ++k) order[k] = base_row ? base_row[k] : k;
  if (kind == OrderKind::reversed) {
    for (int k = 0; k < K / 2; ++k) {
      const int t = order[k];
      order[k] = order[K - 1 - k];
      order[K - 1 - k] = t;
    }
  } else if (kind == OrderKind::split_k) {
    Rng rng(rng_derive3(seed, static_cast<uint64_t>(Stream::combine_order), layer, site,
                        call + static_cast<uint64_t>(n)));
    rng.shuffle(order, K);
  }
}

// y[n, d] of the combine: Σ over j of gate[n, order[j]]·ye[slot_row(n, order[j]), d], one fma
// chain from 0 in the order (the CPU's vec_fma_axpy per element), then + extra (null: none).
MOERL_HD float hd_combine_elem(const float* ye, const float* gate_row, const int32_t* slot_row_row,
                               const int* order, int K, int D, int d, const float* extra_row) {
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int k = order[j];
    acc = hd_fma(gate_row[k], ye[static_cast<int64_t>(slot_row_row[k]) * D + d], acc);
  }
  return extra_row ? hd_add(acc, extra_row[d]) : acc;
}

}  // namespace moerl::cuda
