// ref/embedding.cpp — token embedding lookup, scalar reference.
// Forward writes out with '='; backward accumulates into dtable with '+=' in row order n = 0..N-1
// (the order the fast kernel reproduces, so the two agree bit for bit even for repeated tokens).
#include "kernels/ref/ops.h"

namespace moerl::ref {

// out[N,D], tokens[N], table[V,D]
void embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) {
  for (int n = 0; n < N; ++n) {
    const float* row = table + static_cast<int64_t>(tokens[n]) * D;
    for (int i = 0; i < D; ++i) out[static_cast<int64_t>(n) * D + i] = row[i];
  }
}

// dtable[V,D] += ; dout[N,D]
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) {
  for (int n = 0; n < N; ++n) {
    float* row = dtable + static_cast<int64_t>(tokens[n]) * D;
    for (int i = 0; i < D; ++i) row[i] += dout[static_cast<int64_t>(n) * D + i];
  }
}

}  // namespace moerl::ref
