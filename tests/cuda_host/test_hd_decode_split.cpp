// test_hd_decode_split.cpp — split-position decode attention (kernels/cuda/hd/decode_split.h),
// composed on the CPU as kernels/cuda/ops.cu's two passes compose it (each chunk's tree max and
// sum, its ascending-j P·V chains, then the combine in ascending chunk order), against
// ref::attention_decode over the transposed cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "hd_compose.h"
#include "kernels/cuda/hd/decode_split.h"
#include "kernels/ref/ops.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::normals;

// One (sequence, head) row of L keys (row layout k, v at stride ld), split as the device splits it.
void split_row(float* out, const float* q, const float* k, const float* v, int64_t ld, int L, int Dh) {
  const int S = hd_decode_splits(L);
  const float scale = hd_attn_scale(Dh);
  std::vector<float> part(static_cast<size_t>(S) * (2 + Dh)), p(kDecodeChunk);
  for (int s = 0; s < S; ++s) {
    const int j0 = s * kDecodeChunk, n = std::min(kDecodeChunk, L - j0);
    for (int j = 0; j < n; ++j) p[j] = hd_attn_score(q, k + (j0 + j) * ld, Dh, scale);
    const float m = hd_row_max(p.data(), n);
    for (int j = 0; j < n; ++j) p[j] = hd_softmax_exp(p[j], m);
    float* o = part.data() + static_cast<size_t>(s) * (2 + Dh);
    o[0] = m;
    o[1] = hd_row_sum(p.data(), n);
    for (int d = 0; d < Dh; ++d) o[2 + d] = hd_attn_pv(p.data(), v + j0 * ld + d, ld, n, 0.0f);
  }
  for (int d = 0; d < Dh; ++d) out[d] = hd_split_combine(part.data(), S, 2 + Dh, d);
}

TEST(HdDecodeSplit, Splits) {
  EXPECT_EQ(hd_decode_splits(1), 0);
  EXPECT_EQ(hd_decode_splits(kDecodeChunk), 0);
  EXPECT_EQ(hd_decode_splits(kDecodeChunk + 1), 2);
  EXPECT_EQ(hd_decode_splits(4 * kDecodeChunk), 4);
}

// Long contexts (2 to 8 chunks, the last one partial) within FP32 rounding of the reference: the
// exponentials are rescaled once more (w_s) and the normalisation comes after the sums, so the
// error bound is the one-block kernel's plus a term per chunk.
TEST(HdDecodeSplit, MatchesRef) {
  const int B = 3, H = 2, Dh = 16, Tmax = 8 * kDecodeChunk;
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const int32_t len[B] = {kDecodeChunk + 1, 3 * kDecodeChunk + 17, Tmax};
  const auto kc = normals(static_cast<size_t>(B) * Tmax * ld, 70, 1);
  const auto vc = normals(static_cast<size_t>(B) * Tmax * ld, 71, 1);
  const auto qd = normals(static_cast<size_t>(B) * ld, 72, 1);
  std::vector<float> out(static_cast<size_t>(B) * ld), out_ref(out.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int64_t at = b * ld + h * Dh, key0 = idx_bthd(b, 0, h, 0, Tmax, H, Dh);
      split_row(out.data() + at, qd.data() + at, kc.data() + key0, vc.data() + key0, ld, len[b], Dh);
    }
  const auto kT = test_ops::keys_transposed(kc, B, Tmax, static_cast<int>(ld));
  ref::attention_decode(out_ref.data(), qd.data(), kT.data(), vc.data(), len, B, Tmax, H, Dh);
  expect_close(out_ref, out, (2 * Tmax + 8) * kEps * 5.0, 4 * kEps, "split decode vs ref");
}

}  // namespace
}  // namespace moerl
