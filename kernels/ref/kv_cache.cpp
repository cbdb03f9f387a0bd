// kv_cache.cpp — the scalar references of the KV cache's writes and decode compaction
// (kernels/ref/ops.h).
#include <cstddef>

#include "kernels/ref/ops.h"

namespace moerl::ref {

void kv_cache_keep(float* kcache, float* vcache, const int32_t* from, int n, int D, int Tc, int held) {
  const size_t block = static_cast<size_t>(D) * Tc;  // one row of either cache
  for (int i = 0; i < n; ++i) {
    const int f = from[i];
    if (f == i) continue;
    for (int d = 0; d < D; ++d)
      for (int t = 0; t < held; ++t)
        kcache[i * block + static_cast<size_t>(d) * Tc + t] = kcache[f * block + static_cast<size_t>(d) * Tc + t];
    for (size_t j = 0; j < static_cast<size_t>(held) * D; ++j) vcache[i * block + j] = vcache[f * block + j];
  }
}

void kv_cache_write(float* kcache, float* vcache, const float* k, const float* v, int B, int T, int D,
                    int Tc, int t0) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) {
        const size_t row = (static_cast<size_t>(b) * T + t) * D + d;
        kcache[(static_cast<size_t>(b) * D + d) * Tc + t0 + t] = k[row];
        vcache[(static_cast<size_t>(b) * Tc + t0 + t) * D + d] = v[row];
      }
}

void kv_cache_append(float* kcache, float* vcache, const float* k, const float* v, const int32_t* len, int B,
                     int D, int Tc) {
  for (int b = 0; b < B; ++b) {
    const size_t t = static_cast<size_t>(len[b] - 1);
    for (int d = 0; d < D; ++d) {
      const size_t row = static_cast<size_t>(b) * D + d;
      kcache[(static_cast<size_t>(b) * D + d) * Tc + t] = k[row];
      vcache[(static_cast<size_t>(b) * Tc + t) * D + d] = v[row];
    }
  }
}

}  // namespace moerl::ref
