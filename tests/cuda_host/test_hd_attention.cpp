// test_hd_attention.cpp — attention's index arithmetic and its per-key / per-column pieces
// (kernels/cuda/hd/attention.h, index.h), composed on the CPU as kernels/cuda/ops.cu's kernels
// compose them, against ref::attention_forward / _backward / _decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "hd_compose.h"
#include "kernels/ref/ops.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

TEST(HdIndex, RoundTrips) {
  const int B = 3, T = 5, H = 4, Dh = 7;
  int64_t e = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < Dh; ++d, ++e) {
          ASSERT_EQ(idx_bthd(b, t, h, d, T, H, Dh), e);  // row-major [B, T, H, Dh]
          int b2, t2, h2, d2;
          bthd_split(e, T, H, Dh, &b2, &t2, &h2, &d2);
          ASSERT_EQ(b2, b);
          ASSERT_EQ(t2, t);
          ASSERT_EQ(h2, h);
          ASSERT_EQ(d2, d);
        }
  int64_t r = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i, ++r) {
        ASSERT_EQ(att_row(b, h, i, H, T), r);
        ASSERT_EQ(idx_att(b, h, i, 0, H, T), r * T);
        ASSERT_EQ(idx_att(b, h, i, T - 1, H, T), r * T + T - 1);
        int b2, h2, i2;
        att_row_split(r, H, T, &b2, &h2, &i2);
        ASSERT_EQ(b2, b);
        ASSERT_EQ(h2, h);
        ASSERT_EQ(i2, i);
      }
  // int64 offsets past 2^31 (a large KV cache): no 32-bit wrap.
  EXPECT_EQ(idx_bthd(300, 4095, 31, 127, 4096, 32, 128),
            ((300LL * 4096 + 4095) * 32 + 31) * 128 + 127);
}

struct Shape {
  int B, T, H, Dh;
};
const Shape kShapes[] = {{1, 1, 1, 1}, {2, 13, 3, 10}, {1, 40, 2, 16}, {2, 300, 1, 8}};

TEST(HdAttention, ForwardMatchesRef) {
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.B) * s.T * s.H * s.Dh;
    const auto q = normals(n, 40, s.T), k = normals(n, 41, s.T), v = normals(n, 42, s.T);
    std::vector<float> out(n), att(static_cast<size_t>(s.B) * s.H * s.T * s.T, 5.0f);
    auto out_ref = out, att_ref = att;
    hd_compose::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    ref::attention_forward(out_ref.data(), att_ref.data(), q.data(), k.data(), v.data(), s.B, s.T,
                           s.H, s.Dh);
    // Scores are the reference's fma chains; only the denominator's order differs: p's relative
    // error ≤ (2T+4)·u. out = Σ p·v in the reference's chain, off by that relative error of p:
    // ≤ (2T+8)·u·Σp|v| ≤ (2T+8)·u·max|v|. The upper triangle is exactly zero in both.
    expect_close(att_ref, att, 0.0, (2 * s.T + 4) * kEps, label("att T=%d", s.T));
    float vmax = 0.0f;
    for (float x : v) vmax = std::max(vmax, std::fabs(x));
    expect_close(out_ref, out, (2 * s.T + 8) * kEps * vmax, 4 * kEps, label("out T=%d", s.T));
  }
}

// Decode reads the query's keys from a [B, Tmax, H, Dh] cache with idx_bthd(…, Tmax, …) and runs
// the same row routine: the result equals the full forward's last row bit for bit.
TEST(HdAttention, DecodeEqualsForwardRowAndRef) {
  const int B = 3, Tmax = 11, H = 2, Dh = 6;
  const int len[B] = {1, 7, 11};
  const int64_t ld = H * Dh;
  const size_t nc = static_cast<size_t>(B) * Tmax * ld;
  const auto kc = normals(nc, 50), vc = normals(nc, 51), qd = normals(static_cast<size_t>(B) * ld, 52);
  std::vector<float> out(static_cast<size_t>(B) * ld), out_ref(out.size()), p(Tmax);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int64_t at = static_cast<int64_t>(b) * ld + h * Dh, key0 = idx_bthd(b, 0, h, 0, Tmax, H, Dh);
      hd_compose::attention_row(out.data() + at, p.data(), qd.data() + at, kc.data() + key0,
                       vc.data() + key0, ld, len[b], Dh);
    }
  const auto kT = test_ops::keys_transposed(kc, B, Tmax, static_cast<int>(ld));  // the cache's keys
  ref::attention_decode(out_ref.data(), qd.data(), kT.data(), vc.data(), len, B, Tmax, H, Dh);
  expect_close(out_ref, out, (2 * Tmax + 8) * kEps * 5.0, 4 * kEps, "decode vs ref");
  for (int b = 0; b < B; ++b) {  // sequence b as a full forward of length len[b]
    const int T = len[b];
    std::vector<float> q(static_cast<size_t>(T) * ld), o(q.size()), att(static_cast<size_t>(H) * T * T);
    std::copy_n(qd.begin() + b * ld, ld, q.begin() + (T - 1) * ld);  // the query at position T-1
    const float* k = kc.data() + idx_bthd(b, 0, 0, 0, Tmax, H, Dh);
    const float* v = vc.data() + idx_bthd(b, 0, 0, 0, Tmax, H, Dh);
    hd_compose::attention_forward(o.data(), att.data(), q.data(), k, v, 1, T, H, Dh);
    const std::vector<float> last(o.begin() + (T - 1) * ld, o.begin() + T * ld);
    const std::vector<float> dec(out.begin() + b * ld, out.begin() + (b + 1) * ld);
    expect_bits(last, dec, label("decode b=%d vs forward", b));
  }
}

TEST(HdAttention, BackwardMatchesRef) {
  for (const Shape& s : kShapes) {
    const int64_t ld = static_cast<int64_t>(s.H) * s.Dh;
    const size_t n = static_cast<size_t>(s.B) * s.T * ld, na = static_cast<size_t>(s.B) * s.H * s.T * s.T;
    const auto q = normals(n, 60, s.T), k = normals(n, 61, s.T), v = normals(n, 62, s.T);
    const auto dout = normals(n, 63, s.T);
    std::vector<float> out(n), att(na), g(na);
    ref::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    auto dq = normals(n, 64, s.T), dk = normals(n, 65, s.T), dv = normals(n, 66, s.T);
    auto dq_ref = dq, dk_ref = dk, dv_ref = dv;
    hd_compose::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), dout.data(),
                                   att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    const float scale = hd_attn_scale(s.Dh);
    // E[row]: bound on the tree's error in ds = Σ_j p_j·dp_j, 2L·u·Σ_j |p_j·dp_j| (two orders).
    std::vector<double> E(static_cast<size_t>(s.B) * s.H * s.T);
    for (int64_t row = 0; row < static_cast<int64_t>(E.size()); ++row) {
      int b, h, i;
      att_row_split(row, s.H, s.T, &b, &h, &i);
      const int64_t at = idx_bthd(b, i, h, 0, s.T, s.H, s.Dh), key0 = idx_bthd(b, 0, h, 0, s.T, s.H, s.Dh);
      double pdp = 0.0;
      for (int j = 0; j <= i; ++j)
        pdp += std::fabs(att[row * s.T + j] * hd_attn_dot(dout.data() + at, v.data() + key0 + j * ld, s.Dh));
      E[row] = 2.0 * (i + 1) * kEps * pdp;
    }
    ref::attention_backward(dq_ref.data(), dk_ref.data(), dv_ref.data(), dout.data(), att.data(),
                            q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    // dv depends on att and dout only, accumulated in the reference's order: the same bits.
    expect_bits(dv_ref, dv, label("dv T=%d", s.T));
    // dq, dk: an error ε_i in row i's ds moves g_ij by p_ij·ε_i·scale (first order), hence
    //   dq_id by Σ_j p_ij·ε_i·scale·|k_jd|,  dk_jd by Σ_i p_ij·ε_i·scale·|q_id|;
    // the chains are the reference's, whose roundings then differ by ≤ 2u·Σ|terms| (+ the start).
    // 1.5: slack for the second-order terms the bound leaves out.
    std::vector<double> tol_q(n, 0.0), tol_k(n, 0.0);
    for (int64_t row = 0; row < static_cast<int64_t>(E.size()); ++row) {
      int b, h, i;
      att_row_split(row, s.H, s.T, &b, &h, &i);
      const float *p = att.data() + row * s.T, *gr = g.data() + row * s.T;
      for (int j = 0; j <= i; ++j)
        for (int d = 0; d < s.Dh; ++d) {
          const int64_t ei = idx_bthd(b, i, h, d, s.T, s.H, s.Dh), ej = idx_bthd(b, j, h, d, s.T, s.H, s.Dh);
          const double shift = p[j] * E[row] * scale;
          tol_q[ei] += shift * std::fabs(k[ej]) + 2 * kEps * std::fabs(gr[j] * k[ej]);
          tol_k[ej] += shift * std::fabs(q[ei]) + 2 * kEps * std::fabs(gr[j] * q[ei]);
        }
    }
    int bad_q = 0, bad_k = 0;
    for (size_t e = 0; e < n; ++e) {
      bad_q += !(std::fabs(dq[e] - dq_ref[e]) <= 1.5 * tol_q[e] + 4 * kEps * std::fabs(dq_ref[e]));
      bad_k += !(std::fabs(dk[e] - dk_ref[e]) <= 1.5 * tol_k[e] + 4 * kEps * std::fabs(dk_ref[e]));
    }
    EXPECT_EQ(bad_q, 0) << label("dq T=%d", s.T);
    EXPECT_EQ(bad_k, 0) << label("dk T=%d", s.T);
  }
}

}  // namespace
}  // namespace moerl
