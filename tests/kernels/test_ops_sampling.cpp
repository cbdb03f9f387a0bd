// test_ops_sampling.cpp — the rollout's sampler and the mismatch metrics per row (kernels/ops.def:
// sample_rows, scatter_rows, kl_rows, logit_stats_rows): the CPU kernels (the host-device row
// functions of kernels/cuda/hd/sampling.h and mismatch.h) equal the plainly written references
// bit for bit, at every temperature and nucleus setting, greedy and ties included; the host's
// sampler (sampling_draw) draws the op's token from the same stream; the draws follow the tempered
// softmax; and the metrics are what their definitions say (KL ≥ 0, 0 against itself, a two-token
// case by hand; a row's spread and top-two margin by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "kernels/rng.h"
#include "sim/step/sampling.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::normals;

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Rows of logits with deliberate ties (row 1: three equal maxima; row 2: all equal) and their
// tempered log-softmax, as the rollout computes them (divide, then log-softmax).
struct Rows {
  int N, V;
  std::vector<float> logits, lp;
  std::vector<double> u;
  Rows(int N_, int V_, float tau, uint64_t tag) : N(N_), V(V_) {
    logits = normals(static_cast<size_t>(N) * V, tag, 0, 0, 2.0f);
    const float top = *std::max_element(logits.begin() + V, logits.begin() + 2 * V) + 1.0f;
    for (int v = 0; v < 3; ++v) logits[static_cast<size_t>(V) + 2 * v] = top;  // row 1: three equal maxima
    for (int v = 0; v < V; ++v) logits[static_cast<size_t>(2) * V + v] = 0.25f;
    std::vector<float> scaled(logits.size());
    ref::divide_scalar(scaled.data(), logits.data(), static_cast<int64_t>(logits.size()), tau > 0 ? tau : 1.0f);
    lp.resize(logits.size());
    ref::log_softmax_forward(lp.data(), scaled.data(), N, V);
    Rng rng(rng_derive(tag, static_cast<uint64_t>(Stream::data), {7}));
    for (int n = 0; n < N; ++n) u.push_back(rng.uniform_double());
  }
};

TEST(OpsSampling, SampleRowsCpuEqualsRefAndTheHostSampler) {
  for (float tau : {0.0f, 0.6f, 1.0f, 1.7f})
    for (float top_p : {1.0f, 0.9f, 0.5f}) {
      SCOPED_TRACE(testing::Message() << "temperature " << tau << " top_p " << top_p);
      const Rows r(41, 29, tau, 3);
      std::vector<int32_t> ta(r.N), tb(r.N);
      std::vector<float> la(r.N), lb(r.N), ha(r.N), hb(r.N);
      cpu::sample_rows(ta.data(), la.data(), ha.data(), r.logits.data(), r.lp.data(), r.u.data(), r.N, r.V, tau, top_p);
      ref::sample_rows(tb.data(), lb.data(), hb.data(), r.logits.data(), r.lp.data(), r.u.data(), r.N, r.V, tau, top_p);
      EXPECT_EQ(ta, tb);
      EXPECT_TRUE(same_bits(la, lb)) << "log μ at the token";
      EXPECT_TRUE(same_bits(ha, hb)) << "entropy";
      for (int n = 0; n < r.N; ++n) {
        EXPECT_EQ(la[n], r.lp[static_cast<size_t>(n) * r.V + ta[n]]);
        // the host's sampler from a stream whose one uniform is the op's
        Rng rng(rng_derive(3, static_cast<uint64_t>(Stream::data), {7}));
        for (int k = 0; k < n; ++k) rng.uniform_double();  // the same stream position as r.u[n]
        SamplingConfig sc;
        sc.temperature = tau;
        sc.top_p = top_p;
        EXPECT_EQ(sampling_draw(&r.logits[static_cast<size_t>(n) * r.V], r.V, sc, &rng), ta[n]) << "row " << n;
      }
      // ties: greedy takes the lowest index of the maxima
      if (tau == 0.0f) {
        EXPECT_EQ(ta[1], 0);
        EXPECT_EQ(ta[2], 0);
      }
    }
}

// The draws follow softmax(logits / τ): 20,000 rows of one set of logits with independent
// uniforms, each token's frequency within 5 standard errors of its probability; with top_p the
// tokens outside the nucleus are never drawn.
TEST(OpsSampling, DrawsFollowTheTemperedSoftmax) {
  const int V = 7, N = 20000;
  const std::vector<float> row = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f};
  const float tau = 0.8f;
  std::vector<float> logits, lp(static_cast<size_t>(N) * V);
  for (int n = 0; n < N; ++n) logits.insert(logits.end(), row.begin(), row.end());
  std::vector<double> p(V);
  double z = 0.0;
  for (int v = 0; v < V; ++v) z += std::exp(row[v] / tau);
  for (int v = 0; v < V; ++v) p[v] = std::exp(row[v] / tau) / z;
  Rng rng(rng_derive(11, static_cast<uint64_t>(Stream::data), {1}));
  std::vector<double> u(N);
  for (double& x : u) x = rng.uniform_double();
  std::vector<int32_t> tok(N);
  std::vector<float> lt(N), h(N);
  for (float top_p : {1.0f, 0.6f}) {
    cpu::sample_rows(tok.data(), lt.data(), h.data(), logits.data(), logits.data(), u.data(), N, V, tau, top_p);
    std::vector<double> count(V, 0.0);
    for (int32_t t : tok) count[t] += 1.0;
    if (top_p == 1.0f) {
      for (int v = 0; v < V; ++v) {
        const double se = std::sqrt(p[v] * (1 - p[v]) / N);
        EXPECT_NEAR(count[v] / N, p[v], 5 * se) << "token " << v;
      }
    } else {  // the nucleus of mass 0.6: tokens 3 (p ≈ 0.47) and 5 (p ≈ 0.25)
      for (int v = 0; v < V; ++v)
        if (v != 3 && v != 5) EXPECT_EQ(count[v], 0.0) << "token " << v << " is outside the nucleus";
      const double p3 = p[3] / (p[3] + p[5]);
      EXPECT_NEAR(count[3] / N, p3, 5 * std::sqrt(p3 * (1 - p3) / N));
    }
  }
}

TEST(OpsSampling, ScatterRowsWritesOnlyTheNamedRows) {
  const int N = 5, C = 3, rows = 9;
  const auto src = normals(N * C, 4);
  const std::vector<int32_t> dst_row = {7, -1, 0, 4, -1};
  std::vector<float> a(rows * C, -3.0f), b = a;
  cpu::scatter_rows(a.data(), src.data(), dst_row.data(), N, C);
  ref::scatter_rows(b.data(), src.data(), dst_row.data(), N, C);
  EXPECT_TRUE(same_bits(a, b));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) {
      int from = -1;
      for (int n = 0; n < N; ++n)
        if (dst_row[n] == r) from = n;
      EXPECT_EQ(a[r * C + c], from < 0 ? -3.0f : src[from * C + c]) << "row " << r;
    }
}

TEST(OpsSampling, KlRowsCpuEqualsRefAndItsDefinition) {
  const int V = 23, rows_a = 17, rows_b = 19, N = 40;
  const auto a = normals(static_cast<size_t>(rows_a) * V, 5, 0, 0, 1.5f);
  const auto b = normals(static_cast<size_t>(rows_b) * V, 6, 0, 0, 1.5f);
  std::vector<int32_t> ar(N), br(N), t(N);
  for (int n = 0; n < N; ++n) {
    ar[n] = (n * 7) % rows_a;
    br[n] = (n * 5 + 3) % rows_b;
    t[n] = (n * 11) % V;
  }
  std::vector<double> ka(N), kb(N), ra(N), rb(N);
  cpu::kl_rows(ka.data(), ra.data(), a.data(), b.data(), ar.data(), br.data(), t.data(), N, V);
  ref::kl_rows(kb.data(), rb.data(), a.data(), b.data(), ar.data(), br.data(), t.data(), N, V);
  EXPECT_TRUE(same_bits(ka, kb)) << "kl";
  EXPECT_TRUE(same_bits(ra, rb)) << "log ratio";
  for (double k : ka) EXPECT_GE(k, -1e-12);
  // against itself: 0 and 0
  cpu::kl_rows(ka.data(), ra.data(), a.data(), a.data(), ar.data(), ar.data(), t.data(), N, V);
  for (int n = 0; n < N; ++n) {
    EXPECT_NEAR(ka[n], 0.0, 1e-15);
    EXPECT_EQ(ra[n], 0.0);
  }
  // two tokens by hand: p = (0.25, 0.75) against q = (0.5, 0.5), at token 1
  const std::vector<float> pa = {std::log(0.25f), std::log(0.75f)}, pb = {0.0f, 0.0f};
  const int32_t zero = 0, one = 1;
  double kl = 0.0, lr = 0.0;
  cpu::kl_rows(&kl, &lr, pa.data(), pb.data(), &zero, &zero, &one, 1, 2);
  EXPECT_NEAR(kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(lr, std::log(0.5 / 0.75), 1e-7);
}

TEST(OpsSampling, LogitStatsRowsCpuEqualsRefAndByHand) {
  const int V = 31, rows = 12, N = 20;
  const auto x = normals(static_cast<size_t>(rows) * V, 7, 0, 0, 3.0f);
  std::vector<int32_t> at(N);
  for (int n = 0; n < N; ++n) at[n] = (n * 5) % rows;
  for (float tau : {1.0f, 0.6f}) {
    std::vector<double> sa(N), sb(N), ma(N), mb(N);
    cpu::logit_stats_rows(sa.data(), ma.data(), x.data(), at.data(), N, V, tau);
    ref::logit_stats_rows(sb.data(), mb.data(), x.data(), at.data(), N, V, tau);
    EXPECT_TRUE(same_bits(sa, sb)) << "stdev";
    EXPECT_TRUE(same_bits(ma, mb)) << "margin";
  }
  // {0, 2, 1} at τ 2: x = {0, 1, 0.5}: mean 0.5, std √(1/6), margin 0.5; V = 1: margin 0
  const std::vector<float> row = {0.0f, 2.0f, 1.0f};
  const int32_t zero = 0;
  double sd = 0.0, mg = 0.0;
  cpu::logit_stats_rows(&sd, &mg, row.data(), &zero, 1, 3, 2.0f);
  EXPECT_NEAR(sd, std::sqrt(1.0 / 6.0), 1e-15);
  EXPECT_EQ(mg, 0.5);
  cpu::logit_stats_rows(&sd, &mg, row.data(), &zero, 1, 1, 1.0f);
  EXPECT_EQ(sd, 0.0);
  EXPECT_EQ(mg, 0.0);
}

}  // namespace
}  // namespace moerl
