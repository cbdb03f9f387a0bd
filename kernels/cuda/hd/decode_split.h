// hd/decode_split.h — split-position decode attention (FlashDecoding's split-K over positions):
// a query whose context is longer than kDecodeChunk positions is cut into chunks of kDecodeChunk
// keys, one thread block each, so a long rollout's decode step fills the GPU instead of one block
// per (sequence, head). Each chunk s keeps, in FP32, its own max m_s, its sum of exponentials
// l_s = Σ_j exp(x_j − m_s) and its un-normalised output o_s[d] = Σ_j exp(x_j − m_s)·v_j[d]
// (the device's tree reductions and ascending-j fma chains, as attention_row); a second pass
// combines the chunks in ascending s (the online softmax's rescaling):
//   M = max_s m_s,  w_s = exp(m_s − M),  out[d] = (Σ_s w_s·o_s[d]) / (Σ_s w_s·l_s).
// Deterministic run to run, and batch-invariant: how a row is cut depends on its own length only.
// Rows of at most kDecodeChunk keys keep the one-block kernel (and its bits). Within FP32 rounding
// of the reference, not bit for bit (the normalisation happens once, after the sums).
#pragma once

#include <cstdint>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

constexpr int kDecodeChunk = 256;

// Chunks of a row of L keys: 0 when the one-block kernel takes it (L ≤ kDecodeChunk).
MOERL_HD int hd_decode_splits(int L) { return L <= kDecodeChunk ? 0 : (L + kDecodeChunk - 1) / kDecodeChunk; }

// Output component d of one row from its S partials, each [2 + Dh] = (m_s, l_s, o_s[0..Dh)) at
// stride `stride` from part.
MOERL_HD float hd_split_combine(const float* part, int S, int64_t stride, int d) {
  float M = part[0];
  for (int s = 1; s < S; ++s) M = hd_max(M, part[s * stride]);
  float num = 0.0f, den = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float* p = part + s * stride;
    const float w = hd_exp(hd_sub(p[0], M));
    den = hd_fma(w, p[1], den);
    num = hd_fma(w, p[2 + d], num);
  }
  return hd_div(num, den);
}

}  // namespace moerl::cuda
