// moe.cpp — the scalar references of the MoE dispatch and combine (kernels/ref/ops.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

#include "kernels/ref/ops.h"
#include "kernels/rng.h"

namespace moerl::ref {

void moe_plan(int32_t* row_token, int32_t* slot_row, const int32_t* ids, int N, int K, int /*E*/) {
  std::vector<int> slots(static_cast<size_t>(N) * K);
  std::iota(slots.begin(), slots.end(), 0);
  std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) { return ids[a] < ids[b]; });
  for (size_t r = 0; r < slots.size(); ++r) {
    row_token[r] = slots[r] / K;
    slot_row[slots[r]] = static_cast<int32_t>(r);
  }
}

void moe_offsets(int32_t* offsets, const int32_t* ids, int N, int K, int E) {
  const int64_t nk = static_cast<int64_t>(N) * K;
  for (int e = 0; e <= E; ++e)
    offsets[e] = static_cast<int32_t>(std::count_if(ids, ids + nk, [e](int32_t id) { return id < e; }));
}

void moe_combine_order(int32_t* order, const int32_t* slot_order, int N, int K, const ReduceCtx& ctx) {
  for (int n = 0; n < N; ++n) {
    int32_t* o = order + static_cast<size_t>(n) * K;
    for (int k = 0; k < K; ++k) o[k] = slot_order ? slot_order[static_cast<size_t>(n) * K + k] : k;
    if (ctx.order.kind == OrderKind::reversed) {
      std::reverse(o, o + K);
    } else if (ctx.order.kind == OrderKind::split_k) {
      Rng rng(rng_derive3(ctx.key.seed, static_cast<uint64_t>(Stream::combine_order), ctx.key.layer, ctx.key.site,
                          ctx.key.call + static_cast<uint64_t>(n)));
      rng.shuffle(o, K);
    }
  }
}

void moe_gather(float* xe, const float* h, const int32_t* row_token, int /*N*/, int rows, int D) {
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) xe[static_cast<size_t>(r) * D + d] = h[static_cast<size_t>(row_token[r]) * D + d];
}

void moe_combine(float* y, const float* ye, const float* gate, const float* extra, const int32_t* slot_row,
                 const int32_t* order, int N, int K, int D) {
  for (int n = 0; n < N; ++n)
    for (int d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) {
        const size_t s = static_cast<size_t>(n) * K + order[static_cast<size_t>(n) * K + j];
        acc = std::fma(gate[s], ye[static_cast<size_t>(slot_row[s]) * D + d], acc);
      }
      if (extra) acc += extra[static_cast<size_t>(n) * D + d];
      y[static_cast<size_t>(n) * D + d] = acc;
    }
}

void moe_combine_backward(float* dye, float* dgate, const float* dy, const float* ye, const float* gate,
                          const int32_t* slot_row, int N, int K, int D) {
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const size_t s = static_cast<size_t>(n) * K + k, row = static_cast<size_t>(slot_row[s]);
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) {
        dye[row * D + d] = gate[s] * dy[static_cast<size_t>(n) * D + d];
        dot = std::fma(dy[static_cast<size_t>(n) * D + d], ye[row * D + d], dot);
      }
      dgate[s] = dot;
    }
}

void moe_scatter_add(float* dh, const float* dxe, const int32_t* slot_row, int N, int K, int D) {
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) {
      const size_t row = static_cast<size_t>(slot_row[static_cast<size_t>(n) * K + k]);
      for (int d = 0; d < D; ++d) dh[static_cast<size_t>(n) * D + d] += dxe[row * D + d];
    }
}

}  // namespace moerl::ref
