// cpu/embedding.cpp — token embedding lookup, TBB. Forward writes out with '='; backward
// accumulates dtable with '+='. The backward runs over column blocks, each adding the rows in order
// n = 0..N-1: repeated tokens are summed in the reference's order (bit-identical, thread-count
// independent, no atomics).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_EMBEDDING_CPP_ONCE_
#define MOERL_KERNELS_CPU_EMBEDDING_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/ops.h"

#endif  // MOERL_KERNELS_CPU_EMBEDDING_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/embedding.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


// out[N,D], tokens[N], table[V,D]
void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) {
  tbb::parallel_for(tbb::blocked_range<int>(0, N, 64), [&](const tbb::blocked_range<int>& br) {
    for (int n = br.begin(); n < br.end(); ++n)
      std::memcpy(out + static_cast<int64_t>(n) * D, table + static_cast<int64_t>(tokens[n]) * D,
                  sizeof(float) * D);
  });
}

// dtable[V,D] +=, dout[N,D], tokens[N]
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) {
  constexpr int kCols = 64;  // whole cache lines per block: no false sharing between threads
  const int blocks = (D + kCols - 1) / kCols;
  tbb::parallel_for(tbb::blocked_range<int>(0, blocks), [&](const tbb::blocked_range<int>& br) {
    for (int blk = br.begin(); blk < br.end(); ++blk) {
      const int lo = blk * kCols, hi = std::min(D, lo + kCols);
      for (int64_t n = 0; n < N; ++n) {
        float* row = dtable + static_cast<int64_t>(tokens[n]) * D;
        const float* g = dout + n * D;
        for (int i = lo; i < hi; ++i) row[i] += g[i];
      }
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(embedding_forward);
HWY_EXPORT(embedding_backward);

void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) {
  HWY_DYNAMIC_DISPATCH(embedding_forward)(out, tokens, table, N, D);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) {
  HWY_DYNAMIC_DISPATCH(embedding_backward)(dtable, dout, tokens, N, D);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
