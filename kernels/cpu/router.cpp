// cpu/router.cpp — the router after its scores (kernels/ops.def: sigmoid_forward, add_bias_rows,
// router_gate_forward, router_gate_backward): the host-device row functions of
// kernels/cuda/hd/router.h, rows over TBB threads (no two threads write one row). Bit-identical to
// kernels/ref on any thread count; the CUDA kernels run the same row functions.
#include <tbb/parallel_for.h>

#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/router.h"

namespace moerl::cpu {

void sigmoid_forward(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = cuda::hd_sigmoid(x[i]);
}

void add_bias_rows(float* out, const float* x, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[static_cast<size_t>(n) * C + c] = x[static_cast<size_t>(n) * C + c] + bias[c];
}

void router_gate_forward(float* gate, float* logp, const float* z, const float* scores, const int32_t* ids,
                         const int32_t* at, int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (N <= 0 || K <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    const size_t ne = static_cast<size_t>(n) * E, nk = static_cast<size_t>(n) * K;
    cuda::hd_router_gate_row(gate + nk, logp ? logp + nk : nullptr, z + ne, scores + ne, ids + nk,
                             (at ? at : ids) + nk, E, K, softmax_scoring, norm_topk);
  });
}

void router_gate_backward(float* dz, const float* scores, const int32_t* ids, const float* gate, const float* dgate,
                          int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (N <= 0 || E <= 0) return;
  tbb::parallel_for(tbb::blocked_range<int>(0, N), [&](const tbb::blocked_range<int>& r) {
    std::vector<float> dp(static_cast<size_t>(E));
    for (int n = r.begin(); n < r.end(); ++n) {
      const size_t ne = static_cast<size_t>(n) * E, nk = static_cast<size_t>(n) * K;
      for (int e = 0; e < E; ++e) dz[ne + e] = 0.0f;
      cuda::hd_router_gate_backward_row(dz + ne, dp.data(), scores + ne, ids + nk, gate + nk, dgate + nk, E, K,
                                        softmax_scoring, norm_topk);
    }
  });
}

}  // namespace moerl::cpu
