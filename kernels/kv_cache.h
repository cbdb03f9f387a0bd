// kv_cache.h — the layout of generation's KV cache, which attention_decode (kernels/ops.def) reads.
//
//   vcache[B, Tmax, H·Dh]: position t of sequence b is row b·Tmax + t, as the forward's v rows;
//   kcache[B, H·Dh, Tmax]: transposed per sequence — component d of position t is at
//                          (b·H·Dh + d)·Tmax + t.
//
// The keys are stored transposed because decode's scores q·k_j run one lane per key (each key's
// dot one FMA chain over d, the reference's order): with the keys already in columns, a decode
// step reads them as they lie instead of transposing the sequence's whole block again at every
// step (12.5 % of a long-answer rollout, where the context reaches hundreds of positions). A
// decode step writes one column per sequence. Tmax is the cache's allocated length; generation
// rounds it up to kv_cache_block so that the CPU kernel's 64-key blocks never leave a row.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moerl {

constexpr int kv_cache_block = 64;
inline int kv_cache_len(int max_len) { return (max_len + kv_cache_block - 1) / kv_cache_block * kv_cache_block; }

// kT[B, D, Tmax] ← rows[B, Tmax, D] (every position), the transposed key cache of row-major keys.
inline void kcache_from_rows(float* kT, const float* rows, int B, int Tmax, int D) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tmax; ++t)
      for (int d = 0; d < D; ++d)
        kT[(static_cast<size_t>(b) * D + d) * Tmax + t] = rows[(static_cast<size_t>(b) * Tmax + t) * D + d];
}

// rows[B, Tmax, D] ← kT[B, D, Tmax] for positions t < len[b] (the others untouched).
inline void kcache_to_rows(float* rows, const float* kT, const int32_t* len, int B, int Tmax, int D) {
  for (int b = 0; b < B; ++b)
    for (int d = 0; d < D; ++d)
      for (int t = 0; t < len[b]; ++t)
        rows[(static_cast<size_t>(b) * Tmax + t) * D + d] = kT[(static_cast<size_t>(b) * D + d) * Tmax + t];
}

}  // namespace moerl
