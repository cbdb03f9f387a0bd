// test_ops_pointwise.cpp — the row-local kernels without order control: embedding, RoPE, softmax,
// log-softmax, SwiGLU, log-prob. Every cpu kernel repeats its reference's operation sequence (see
// each kernels/cpu/*.cpp header), so cpu vs ref is bit for bit, forward and backward; every
// backward is checked by finite differences on the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::check_grad;
using test_ops::expect_bits;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;
using test_ops::weighted_sum;

const int kRowsGrid[] = {1, 3, 17, 100};
const int kWidthGrid[] = {1, 5, 64, 130};

std::string size_name(int N, int C) { return label("N%d C%d", N, C); }

// ---- embedding ----------------------------------------------------------------------------------
std::vector<int32_t> tokens(int N, int V, uint64_t tag) {
  Rng rng(rng_derive(5, static_cast<uint64_t>(Stream::data), {tag, static_cast<uint64_t>(N)}));
  std::vector<int32_t> t(N);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(V));  // repeats when N > V
  return t;
}

TEST(OpsEmbedding, CpuEqualsRefBitwiseForwardBackward) {
  const int V = 7;
  for (int N : kRowsGrid)
    for (int D : kWidthGrid) {
      auto table = normals(static_cast<size_t>(V) * D, 1, D);
      auto tok = tokens(N, V, 1);
      std::vector<float> out_r(static_cast<size_t>(N) * D, -1.0f), out_c = out_r;
      ref::embedding_forward(out_r.data(), tok.data(), table.data(), N, D);
      cpu::embedding_forward(out_c.data(), tok.data(), table.data(), N, D);
      expect_bits(out_r, out_c, label("forward %s", size_name(N, D).c_str()));
      auto dout = normals(out_r.size(), 2, N, D);
      auto dt_r = normals(table.size(), 3, D), dt_c = dt_r;  // '+=' onto non-zero
      ref::embedding_backward(dt_r.data(), dout.data(), tok.data(), N, D);
      cpu::embedding_backward(dt_c.data(), dout.data(), tok.data(), N, D);
      expect_bits(dt_r, dt_c, label("backward %s", size_name(N, D).c_str()));
    }
}

TEST(OpsEmbedding, BackwardMatchesFiniteDifferences) {
  const int N = 17, D = 5, V = 7;
  auto table = normals(V * D, 4, D);
  auto tok = tokens(N, V, 2);
  auto w = normals(N * D, 5, D);
  std::vector<float> dt(table.size(), 0.0f);
  ref::embedding_backward(dt.data(), w.data(), tok.data(), N, D);
  auto J = [&] {
    std::vector<float> out(N * D);
    ref::embedding_forward(out.data(), tok.data(), table.data(), N, D);
    return weighted_sum(w, out);
  };
  check_grad(table, dt, J, "dtable");
}

// ---- RoPE ---------------------------------------------------------------------------------------
TEST(OpsRope, CpuEqualsRefBitwiseForwardBackward) {
  for (int N : kRowsGrid)
    for (int H : {1, 3})
      for (int Dh : {2, 6, 32})
        for (bool wide_positions : {false, true}) {  // cached table vs per-row angles
          std::vector<int32_t> pos(N);
          for (int n = 0; n < N; ++n) pos[n] = wide_positions ? 1000 * n + 3 : n % 7;
          auto x = normals(static_cast<size_t>(N) * H * Dh, 6, N, Dh);
          auto xr = x, xc = x;
          ref::rope_forward(xr.data(), pos.data(), N, H, Dh, 10000.0f);
          cpu::rope_forward(xc.data(), pos.data(), N, H, Dh, 10000.0f);
          expect_bits(xr, xc, label("forward %s", size_name(N, Dh).c_str()));
          ref::rope_backward(xr.data(), pos.data(), N, H, Dh, 10000.0f);
          cpu::rope_backward(xc.data(), pos.data(), N, H, Dh, 10000.0f);
          expect_bits(xr, xc, label("backward %s", size_name(N, Dh).c_str()));
          // A rotation and its transpose: back to x within a few roundings.
          test_ops::expect_close(x, xr, 8 * kEps, 8 * kEps, "rope round trip");
        }
}

TEST(OpsRope, BackwardMatchesFiniteDifferences) {
  const int N = 3, H = 3, Dh = 6;
  std::vector<int32_t> pos = {0, 5, 41};
  auto x = normals(N * H * Dh, 7, Dh);
  auto w = normals(x.size(), 8, Dh);
  auto dx = w;
  ref::rope_backward(dx.data(), pos.data(), N, H, Dh, 10000.0f);
  auto J = [&] {
    auto y = x;
    ref::rope_forward(y.data(), pos.data(), N, H, Dh, 10000.0f);
    return weighted_sum(w, y);
  };
  check_grad(x, dx, J, "rope dx");
}

// ---- softmax / log-softmax ----------------------------------------------------------------------
TEST(OpsSoftmax, CpuEqualsRefBitwise) {
  for (int N : kRowsGrid)
    for (int C : kWidthGrid) {
      auto x = normals(static_cast<size_t>(N) * C, 9, N, C, 4.0f);
      std::vector<float> yr(x.size(), -1.0f), yc = yr, lr = yr, lc = yr;
      ref::softmax_forward(yr.data(), x.data(), N, C);
      cpu::softmax_forward(yc.data(), x.data(), N, C);
      expect_bits(yr, yc, label("softmax %s", size_name(N, C).c_str()));
      ref::log_softmax_forward(lr.data(), x.data(), N, C);
      cpu::log_softmax_forward(lc.data(), x.data(), N, C);
      expect_bits(lr, lc, label("log_softmax %s", size_name(N, C).c_str()));
      auto dy = normals(x.size(), 10, N, C);
      auto dx_r = normals(x.size(), 11, N, C), dx_c = dx_r;
      ref::softmax_backward(dx_r.data(), dy.data(), yr.data(), N, C);
      cpu::softmax_backward(dx_c.data(), dy.data(), yr.data(), N, C);
      expect_bits(dx_r, dx_c, label("softmax_backward %s", size_name(N, C).c_str()));
      // log_softmax has no backward of its own: check it against double precision instead.
      // |Δ| ≤ (|x−m| + |lse|)·eps-ish roundings plus log's C·eps from the sum: (C + 8)·eps·(1 + |ref|).
      for (int n = 0; n < N; ++n) {
        double m = -INFINITY, s = 0.0;
        for (int j = 0; j < C; ++j) m = std::max(m, static_cast<double>(x[n * C + j]));
        for (int j = 0; j < C; ++j) s += std::exp(x[n * C + j] - m);
        for (int j = 0; j < C; ++j) {
          const double want = x[n * C + j] - m - std::log(s);
          ASSERT_NEAR(lr[n * C + j], want, (C + 8) * kEps * (1.0 + std::fabs(want)));
          // exp amplifies the rounding of x − m by |x − m| ≈ |want|.
          ASSERT_NEAR(yr[n * C + j], std::exp(want),
                      (C + 8 + std::fabs(want)) * kEps * std::exp(want) + 1e-30);
        }
      }
    }
}

TEST(OpsSoftmax, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 17;
  auto x = normals(N * C, 12, 0, 0, 2.0f);
  auto w = normals(x.size(), 13);
  std::vector<float> y(x.size()), dx(x.size(), 0.0f);
  ref::softmax_forward(y.data(), x.data(), N, C);
  ref::softmax_backward(dx.data(), w.data(), y.data(), N, C);
  auto J = [&] {
    std::vector<float> yy(x.size());
    ref::softmax_forward(yy.data(), x.data(), N, C);
    return weighted_sum(w, yy);
  };
  check_grad(x, dx, J, "softmax dx");
}

// ---- SwiGLU ---------------------------------------------------------------------------------------
TEST(OpsSwiglu, CpuEqualsRefBitwiseForwardBackward) {
  for (int N : kRowsGrid)
    for (int F : kWidthGrid) {
      auto g = normals(static_cast<size_t>(N) * F, 14, N, F, 4.0f);
      auto u = normals(g.size(), 15, N, F);
      if (N == 100 && F == 130) {  // saturating tails: exp(−g) overflows / underflows
        g[0] = 100.0f;
        g[1] = -100.0f;
      }
      std::vector<float> yr(g.size(), -1.0f), yc = yr;
      ref::swiglu_forward(yr.data(), g.data(), u.data(), N, F);
      cpu::swiglu_forward(yc.data(), g.data(), u.data(), N, F);
      expect_bits(yr, yc, label("swiglu forward %s", size_name(N, F).c_str()));
      for (float y : yr) ASSERT_TRUE(std::isfinite(y));
      auto dout = normals(g.size(), 16, N, F);
      auto dg_r = normals(g.size(), 17, N, F), du_r = normals(g.size(), 18, N, F);
      auto dg_c = dg_r, du_c = du_r;
      ref::swiglu_backward(dg_r.data(), du_r.data(), dout.data(), g.data(), u.data(), N, F);
      cpu::swiglu_backward(dg_c.data(), du_c.data(), dout.data(), g.data(), u.data(), N, F);
      expect_bits(dg_r, dg_c, label("swiglu dgate %s", size_name(N, F).c_str()));
      expect_bits(du_r, du_c, label("swiglu dup %s", size_name(N, F).c_str()));
    }
}

TEST(OpsSwiglu, BackwardMatchesFiniteDifferences) {
  const int N = 3, F = 17;
  auto g = normals(N * F, 19, 0, 0, 3.0f);
  auto u = normals(g.size(), 20);
  auto w = normals(g.size(), 21);
  std::vector<float> dg(g.size(), 0.0f), du(g.size(), 0.0f);
  ref::swiglu_backward(dg.data(), du.data(), w.data(), g.data(), u.data(), N, F);
  auto J = [&] {
    std::vector<float> y(g.size());
    ref::swiglu_forward(y.data(), g.data(), u.data(), N, F);
    return weighted_sum(w, y);
  };
  check_grad(g, dg, J, "dgate");
  check_grad(u, du, J, "dup");
}

// ---- log-prob -------------------------------------------------------------------------------------
std::vector<int32_t> targets(int N, int V, uint64_t tag) {
  auto t = tokens(N, V, tag);
  for (int n = 0; n < N; n += 3) t[n] = -1;  // every third row ignored
  return t;
}

TEST(OpsLogprob, CpuEqualsRefBitwiseForwardBackward) {
  for (int N : kRowsGrid)
    for (int V : {7, 64}) {
      auto x = normals(static_cast<size_t>(N) * V, 22, N, V, 3.0f);
      auto t = targets(N, V, 3);
      std::vector<float> lr(N, -1.0f), lc(N, -1.0f), ls(x.size());
      ref::logprob_forward(lr.data(), x.data(), t.data(), N, V);
      cpu::logprob_forward(lc.data(), x.data(), t.data(), N, V);
      expect_bits(lr, lc, label("logprob %s", size_name(N, V).c_str()));
      ref::log_softmax_forward(ls.data(), x.data(), N, V);
      for (int n = 0; n < N; ++n) {
        if (t[n] < 0) {
          ASSERT_EQ(lr[n], 0.0f);
        } else {  // the same sequence of operations as log_softmax at the target: same bits
          ASSERT_EQ(lr[n], ls[static_cast<size_t>(n) * V + t[n]]);
        }
      }
      auto dlogp = normals(N, 23, N);
      auto dr = normals(x.size(), 24, N, V), dc = dr, before = dr;
      ref::logprob_backward(dr.data(), dlogp.data(), x.data(), t.data(), N, V);
      cpu::logprob_backward(dc.data(), dlogp.data(), x.data(), t.data(), N, V);
      expect_bits(dr, dc, label("logprob backward %s", size_name(N, V).c_str()));
      for (int n = 0; n < N; n += 3)  // ignored rows untouched
        ASSERT_EQ(test_ops::bit_diffs(dr.data() + n * V, before.data() + n * V, V), 0u);
    }
}

TEST(OpsLogprob, BackwardMatchesFiniteDifferences) {
  const int N = 5, V = 7;
  auto x = normals(N * V, 25, 0, 0, 2.0f);
  auto t = targets(N, V, 4);
  auto w = normals(N, 26);
  std::vector<float> dx(x.size(), 0.0f);
  ref::logprob_backward(dx.data(), w.data(), x.data(), t.data(), N, V);
  auto J = [&] {
    std::vector<float> lp(N);
    ref::logprob_forward(lp.data(), x.data(), t.data(), N, V);
    return weighted_sum(w, lp);
  };
  check_grad(x, dx, J, "dlogits");
}

// The storage glue (kernels/ops.def): the CPU kernels equal the references bit for bit, in every
// format, on values across the formats' ranges (subnormals, overflow, ties, signed zero, NaN);
// add_round and divide_scalar also in place (out aliasing an input), as the model calls them.
TEST(OpsStorage, CpuEqualsRefBitwiseInEveryFormat) {
  const int64_t n = 2053;
  auto a = normals(static_cast<size_t>(n), 61), b = normals(a.size(), 62);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::ldexp(a[i], static_cast<int>(i % 47) - 28);
    b[i] = std::ldexp(b[i], static_cast<int>(i % 43) - 25);
  }
  a[0] = 1.0f + 1.0f / 256;  // a bf16 tie
  a[1] = -0.0f;
  a[2] = 1e6f;  // past every 16- and 8-bit range
  a[3] = std::numeric_limits<float>::quiet_NaN();
  const auto bits_equal = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  for (Format f : {Format::fp32, Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2}) {
    std::vector<float> x = a, xr = a;
    cpu::round_format(x.data(), n, f);
    ref::round_format(xr.data(), n, f);
    EXPECT_TRUE(bits_equal(x, xr)) << "round_format " << format_name(f);
    std::vector<float> o(a.size()), orf(a.size());
    cpu::add_round(o.data(), a.data(), b.data(), n, f);
    ref::add_round(orf.data(), a.data(), b.data(), n, f);
    EXPECT_TRUE(bits_equal(o, orf)) << "add_round " << format_name(f);
    std::vector<float> in_place = a;
    cpu::add_round(in_place.data(), in_place.data(), b.data(), n, f);
    EXPECT_TRUE(bits_equal(in_place, orf)) << "add_round in place " << format_name(f);
    if (f != Format::fp32) EXPECT_FALSE(bits_equal(o, [&] {  // the rounding happened
      std::vector<float> s(a.size());
      for (size_t i = 0; i < s.size(); ++i) s[i] = a[i] + b[i];
      return s;
    }())) << format_name(f);
  }
  std::vector<float> d(a.size()), dr(a.size()), d_in_place = a;
  cpu::divide_scalar(d.data(), a.data(), n, 0.6f);
  ref::divide_scalar(dr.data(), a.data(), n, 0.6f);
  cpu::divide_scalar(d_in_place.data(), d_in_place.data(), n, 0.6f);
  EXPECT_TRUE(bits_equal(d, dr));
  EXPECT_TRUE(bits_equal(d_in_place, dr));
  EXPECT_EQ(d[10], a[10] / 0.6f);  // a division, not a product with 1/0.6
}

}  // namespace
}  // namespace moerl
