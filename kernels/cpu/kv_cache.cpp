// cpu/kv_cache.cpp — decode compaction of the KV cache (kernels/ops.def, kv_cache_keep): row
// copies, the kept rows in parallel (their destinations and sources are disjoint: from[i] is i or
// >= n). Bit-identical to kernels/ref (copies).
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

}  // namespace moerl::cpu
