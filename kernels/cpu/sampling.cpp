// cpu/sampling.cpp — the rollout's sampler and the mismatch metrics per row (kernels/ops.def:
// sample_rows, scatter_rows, kl_rows, logit_stats_rows): the host-device row functions of
// kernels/cuda/hd/sampling.h and mismatch.h, rows over TBB threads (no two threads write one
// row), so the bits are those of the host code that ran them before (sampling_draw, the audit,
// the response margins) on any thread count. The CUDA kernels run the same row functions.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/mismatch.h"
#include "kernels/cuda/hd/sampling.h"

namespace moerl::cpu {

void sample_rows(int32_t* tokens, float* logp, float* entropy, const float* logits, const float* lp,
                 const double* uniform, int N, int V, float temperature, float top_p) {
  if (N <= 0 || V <= 0) return;
  tbb::parallel_for(tbb::blocked_range<int>(0, N), [&](const tbb::blocked_range<int>& r) {
    std::vector<double> w(static_cast<size_t>(V));
    std::vector<int> order(top_p < 1.0f ? static_cast<size_t>(V) : 0);
    for (int n = r.begin(); n < r.end(); ++n) {
      const size_t nv = static_cast<size_t>(n) * V;
      const int32_t t = cuda::hd_sample_row(logits + nv, V, temperature, top_p, uniform ? uniform[n] : 0.0, w.data(),
                                            order.data());
      tokens[n] = t;
      logp[n] = lp[nv + t];
      entropy[n] = static_cast<float>(cuda::hd_entropy_row(lp + nv, V));
    }
  });
}

void scatter_rows(float* dst, const float* src, const int32_t* dst_row, int N, int C) {
  for (int n = 0; n < N; ++n)
    if (dst_row[n] >= 0) std::copy_n(src + static_cast<size_t>(n) * C, C, dst + static_cast<size_t>(dst_row[n]) * C);
}

void kl_rows(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
             const int32_t* b_row, const int32_t* targets, int N, int V) {
  if (N <= 0 || V <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    cuda::hd_kl_row(kl + n, log_ratio + n, a + static_cast<size_t>(a_row[n]) * V, b + static_cast<size_t>(b_row[n]) * V,
                    targets[n], V);
  });
}

void logit_stats_rows(double* stdev, double* margin, const float* logits, const int32_t* rows, int N, int V,
                      float tau) {
  if (N <= 0 || V <= 0) return;
  tbb::parallel_for(0, N, [&](int n) {
    cuda::hd_logit_stats_row(stdev + n, margin + n, logits + static_cast<size_t>(rows[n]) * V, V, tau);
  });
}

}  // namespace moerl::cpu
