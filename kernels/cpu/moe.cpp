// cpu/moe.cpp — the MoE dispatch and combine (kernels/ops.def: moe_gather, moe_combine,
// moe_combine_backward, moe_scatter_add), tokens over TBB threads. Each token's sums run in the
// reference's order (vec_fma_axpy / vec_fma_dot: one FMA chain per element, kernels/vec.h), and no
// two threads write one row: bit-identical to kernels/ref on any thread count.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/moe.h"
#include "kernels/vec.h"

namespace moerl::cpu {

// The dispatch plan: the grouping and the combine orders of kernels/cuda/hd/moe.h (what the CUDA
// kernels run, and what the dispatcher ran on the host before the plan became an op).
void moe_plan(int32_t* row_token, int32_t* slot_row, const int32_t* ids, int N, int K, int E) {
  if (N <= 0 || K <= 0) return;
  std::vector<int> offsets(static_cast<size_t>(E) + 1), fill(static_cast<size_t>(E));
  cuda::hd_expert_offsets(offsets.data(), ids, N * K, E);
  cuda::hd_group_slots(slot_row, row_token, fill.data(), ids, offsets.data(), N * K, K, E);
}

void moe_offsets(int32_t* offsets, const int32_t* ids, int N, int K, int E) {
  if (E < 0) return;
  if (N <= 0 || K <= 0) {
    std::fill_n(offsets, E + 1, 0);
    return;
  }
  cuda::hd_expert_offsets(offsets, ids, N * K, E);
}

void moe_combine_order(int32_t* order, const int32_t* slot_order, int N, int K, const ReduceCtx& ctx) {
  if (N <= 0 || K <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    int o[64];
    cuda::hd_combine_order(o, slot_order ? slot_order + static_cast<size_t>(n) * K : nullptr, K, ctx.order.kind,
                           ctx.key.seed, ctx.key.layer, ctx.key.site, ctx.key.call, n);
    std::copy(o, o + K, order + static_cast<size_t>(n) * K);
  });
}

void moe_gather(float* xe, const float* h, const int32_t* row_token, int /*N*/, int rows, int D) {
  if (rows <= 0 || D <= 0) return;
  tbb::parallel_for(0, rows, [&](int r) {
    std::memcpy(xe + static_cast<size_t>(r) * D, h + static_cast<size_t>(row_token[r]) * D, sizeof(float) * D);
  });
}

void moe_combine(float* y, const float* ye, const float* gate, const float* extra, const int32_t* slot_row,
                 const int32_t* order, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    float* yn = y + static_cast<size_t>(n) * D;
    std::fill(yn, yn + D, 0.0f);
    for (int j = 0; j < K; ++j) {
      const size_t s = static_cast<size_t>(n) * K + order[static_cast<size_t>(n) * K + j];
      vec_fma_axpy(yn, gate[s], ye + static_cast<size_t>(slot_row[s]) * D, D);  // yn[d] = fma(g, ye[d], yn[d])
    }
    if (extra) {
      const float* ex = extra + static_cast<size_t>(n) * D;
      for (int d = 0; d < D; ++d) yn[d] += ex[d];
    }
  });
}

void moe_combine_backward(float* dye, float* dgate, const float* dy, const float* ye, const float* gate,
                          const int32_t* slot_row, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    const float* dyn = dy + static_cast<size_t>(n) * D;
    for (int k = 0; k < K; ++k) {
      const size_t slot = static_cast<size_t>(n) * K + k, row = static_cast<size_t>(slot_row[slot]);
      const float g = gate[slot];
      float* dst = dye + row * D;
      for (int d = 0; d < D; ++d) dst[d] = g * dyn[d];
      dgate[slot] = vec_fma_dot(dyn, ye + row * D, D, 0.0f);  // fma chain over d = 0..D-1 from 0
    }
  });
}

void moe_scatter_add(float* dh, const float* dxe, const int32_t* slot_row, int N, int K, int D) {
  if (N <= 0 || D <= 0) return;
  // per token, its k rows in slot order: no two threads write the same row of dh
  tbb::parallel_for(0, N, [&](int n) {
    float* dst = dh + static_cast<size_t>(n) * D;
    for (int k = 0; k < K; ++k) {
      const float* src = dxe + static_cast<size_t>(slot_row[static_cast<size_t>(n) * K + k]) * D;
      for (int d = 0; d < D; ++d) dst[d] += src[d];
    }
  });
}

}  // namespace moerl::cpu
