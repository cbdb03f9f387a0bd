// cpu/kv_cache.cpp — the KV cache's writes (kv_cache_write and a decode step's kv_cache_append:
// the keys transposed into their columns, the values' rows copied, sequences in parallel) and
// decode compaction (kv_cache_keep: row copies, the kept rows in parallel; their destinations and
// sources are disjoint: from[i] is i or >= n). Bit-identical to kernels/ref (copies).
#include <tbb/parallel_for.h>

#include <cstring>

#include "kernels/cpu/ops.h"

namespace moerl::cpu {

void kv_cache_keep(float* kcache, float* vcache, const int32_t* from, int n, int D, int Tc, int held) {
  if (n <= 0 || held <= 0) return;
  const size_t block = static_cast<size_t>(D) * Tc, f4 = sizeof(float);
  tbb::parallel_for(0, n, [&](int i) {
    const int f = from[i];
    if (f == i) return;
    for (int d = 0; d < D; ++d)
      std::memcpy(kcache + i * block + static_cast<size_t>(d) * Tc, kcache + f * block + static_cast<size_t>(d) * Tc,
                  held * f4);
    std::memcpy(vcache + i * block, vcache + f * block, static_cast<size_t>(held) * D * f4);
  });
}

void kv_cache_write(float* kcache, float* vcache, const float* k, const float* v, int B, int T, int D,
                    int Tc, int t0) {
  if (B <= 0 || T <= 0 || D <= 0) return;
  const size_t Du = static_cast<size_t>(D), Tcu = static_cast<size_t>(Tc), Tu = static_cast<size_t>(T);
  tbb::parallel_for(0, B, [&](int b) {
    const size_t bu = static_cast<size_t>(b);
    const float* kb = k + bu * Tu * Du;
    float* kc = kcache + bu * Du * Tcu + t0;
    for (size_t d = 0; d < Du; ++d)
      for (size_t t = 0; t < Tu; ++t) kc[d * Tcu + t] = kb[t * Du + d];
    std::memcpy(vcache + (bu * Tcu + t0) * Du, v + bu * Tu * Du, Tu * Du * sizeof(float));
  });
}

void kv_cache_append(float* kcache, float* vcache, const float* k, const float* v, const int32_t* len, int B,
                     int D, int Tc) {
  if (B <= 0 || D <= 0) return;
  const size_t Du = static_cast<size_t>(D), Tcu = static_cast<size_t>(Tc);
  tbb::parallel_for(0, B, [&](int b) {
    const size_t bu = static_cast<size_t>(b), t = static_cast<size_t>(len[b] - 1);
    float* kc = kcache + bu * Du * Tcu + t;
    for (size_t d = 0; d < Du; ++d) kc[d * Tcu] = k[bu * Du + d];
    std::memcpy(vcache + (bu * Tcu + t) * Du, v + bu * Du, Du * sizeof(float));
  });
}

}  // namespace moerl::cpu
