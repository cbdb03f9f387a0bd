// dispatcher.cpp — the single-process dispatcher (see dispatcher.h).
#include "models/dispatcher.h"

#include <cmath>
#include <cstring>

#include <tbb/parallel_for.h>

#include "kernels/rng.h"

namespace moerl {

void Dispatcher::dispatch(float* xe, DispatchPlan* p, const float* h, const int32_t* ids, int N,
                          int K, int E, int D) const {
  p->N = N; p->K = K; p->E = E;
  p->offsets.assign(E + 1, 0);
  p->slot_row.resize(static_cast<size_t>(N) * K);
  p->row_token.resize(static_cast<size_t>(N) * K);
  // counting sort by expert; (token, slot) ascending inside an expert
  for (int i = 0; i < N * K; ++i) p->offsets[ids[i] + 1] += 1;
  for (int e = 0; e < E; ++e) p->offsets[e + 1] += p->offsets[e];
  std::vector<int> fill(p->offsets.begin(), p->offsets.end() - 1);
  for (int i = 0; i < N * K; ++i) {
    const int row = fill[ids[i]]++;
    p->slot_row[i] = row;
    p->row_token[row] = i / K;
  }
  tbb::parallel_for(0, N * K, [&](int row) {
    std::memcpy(xe + static_cast<size_t>(row) * D, h + static_cast<size_t>(p->row_token[row]) * D,
                sizeof(float) * D);
  });
}

void Dispatcher::combine(float* y, const float* ye, const float* gate, const float* y_extra,
                         const DispatchPlan& p, int D, const ReduceCtx& ctx) const {
  const int K = p.K;
  tbb::parallel_for(0, p.N, [&](int n) {
    int order[64];
    for (int k = 0; k < K; ++k) order[k] = k;
    if (ctx.order.kind == OrderKind::reversed) {
      for (int k = 0; k < K; ++k) order[k] = K - 1 - k;
    } else if (ctx.order.kind == OrderKind::split_k) {
      Rng rng(rng_derive(ctx.key.seed, static_cast<uint64_t>(Stream::combine_order),
                         {ctx.key.layer, ctx.key.site, ctx.key.call + static_cast<uint64_t>(n)}));
      rng.shuffle(order, K);
    }
    float* yn = y + static_cast<size_t>(n) * D;
    std::fill(yn, yn + D, 0.0f);
    for (int j = 0; j < K; ++j) {
      const int k = order[j];
      const float g = gate[static_cast<size_t>(n) * K + k];
      const float* src = ye + static_cast<size_t>(p.slot_row[static_cast<size_t>(n) * K + k]) * D;
      for (int d = 0; d < D; ++d) yn[d] = std::fma(g, src[d], yn[d]);
    }
    if (y_extra) {
      const float* ex = y_extra + static_cast<size_t>(n) * D;
      for (int d = 0; d < D; ++d) yn[d] += ex[d];
    }
  });
}

void Dispatcher::combine_backward(float* dye, float* dgate, const float* dy, const float* ye,
                                  const float* gate, const DispatchPlan& p, int D) const {
  const int K = p.K;
  tbb::parallel_for(0, p.N, [&](int n) {
    const float* dyn = dy + static_cast<size_t>(n) * D;
    for (int k = 0; k < K; ++k) {
      const size_t slot = static_cast<size_t>(n) * K + k;
      const size_t row = static_cast<size_t>(p.slot_row[slot]);
      const float g = gate[slot];
      const float* src = ye + row * D;
      float* dst = dye + row * D;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) {
        dst[d] = g * dyn[d];
        dot = std::fma(dyn[d], src[d], dot);
      }
      dgate[slot] = dot;
    }
  });
}

void Dispatcher::dispatch_backward(float* dh, const float* dxe, const DispatchPlan& p, int D) const {
  const int K = p.K;
  // per token, its k rows in slot order: no two threads write the same row of dh
  tbb::parallel_for(0, p.N, [&](int n) {
    float* dst = dh + static_cast<size_t>(n) * D;
    for (int k = 0; k < K; ++k) {
      const float* src = dxe + static_cast<size_t>(p.slot_row[static_cast<size_t>(n) * K + k]) * D;
      for (int d = 0; d < D; ++d) dst[d] += src[d];
    }
  });
}

}  // namespace moerl
