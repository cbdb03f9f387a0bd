// test_ops_router.cpp — the router's ops after its scores (kernels/ops.def: sigmoid_forward,
// add_bias_rows, router_gate_forward, router_gate_backward): the CPU kernels (the host-device row
// functions of kernels/cuda/hd/router.h) equal the scalar references bit for bit in every scoring
// and renormalisation, with and without probe ids, for K = 1 and K > 1; the gates are what their
// definition says (a distribution over the selected experts when renormalised); and the backward is
// the gradient of the forward (central differences in double, the ids held fixed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::normals;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Router {
  int N, E, K;
  std::vector<float> z;
  std::vector<int32_t> ids, probe;
  Router(int N_, int E_, int K_, uint64_t tag) : N(N_), E(E_), K(K_) {
    z = normals(static_cast<size_t>(N) * E, tag, 0, 0, 2.0f);
    ids.resize(static_cast<size_t>(N) * K);
    std::vector<float> vals(ids.size());
    ref::topk_forward(ids.data(), vals.data(), z.data(), N, E, K, TieBreak::lowest, NoiseKey{});
    probe = ids;
    for (auto& e : probe) e = (e + 3) % E;
  }
  std::vector<float> scores(const std::vector<float>& zz, bool softmax) const {
    std::vector<float> s(zz.size());
    if (softmax) ref::softmax_forward(s.data(), zz.data(), N, E);
    else ref::sigmoid_forward(s.data(), zz.data(), static_cast<int64_t>(zz.size()));
    return s;
  }
};

TEST(OpsRouter, CpuEqualsRefBitwise) {
  const auto x = normals(1001, 1, 0, 0, 5.0f);
  std::vector<float> a(x.size()), b(x.size());
  cpu::sigmoid_forward(a.data(), x.data(), static_cast<int64_t>(x.size()));
  ref::sigmoid_forward(b.data(), x.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(same_bits(a, b)) << "sigmoid";
  for (int K : {1, 2, 4}) {
    const Router r(37, 13, K, 10 + K);
    const auto bias = normals(r.E, 2);
    std::vector<float> ba(r.z.size()), bb(r.z.size());
    cpu::add_bias_rows(ba.data(), r.z.data(), bias.data(), r.N, r.E);
    ref::add_bias_rows(bb.data(), r.z.data(), bias.data(), r.N, r.E);
    EXPECT_TRUE(same_bits(ba, bb)) << "bias";
    const auto dgate = normals(r.ids.size(), 3);
    for (bool softmax : {true, false})
      for (bool norm : {true, false}) {
        const auto s = r.scores(r.z, softmax);
        for (const int32_t* at : {static_cast<const int32_t*>(nullptr), r.probe.data()}) {
          std::vector<float> g(r.ids.size()), gr(r.ids.size()), lp(r.ids.size()), lpr(r.ids.size());
          cpu::router_gate_forward(g.data(), lp.data(), r.z.data(), s.data(), r.ids.data(), at, r.N, r.E, r.K, softmax, norm);
          ref::router_gate_forward(gr.data(), lpr.data(), r.z.data(), s.data(), r.ids.data(), at, r.N, r.E, r.K, softmax, norm);
          EXPECT_TRUE(same_bits(g, gr)) << "gate K=" << K << " softmax=" << softmax << " norm=" << norm;
          EXPECT_TRUE(same_bits(lp, lpr)) << "logp K=" << K << " softmax=" << softmax << " probe=" << (at != nullptr);
        }
        std::vector<float> g(r.ids.size());
        ref::router_gate_forward(g.data(), nullptr, r.z.data(), s.data(), r.ids.data(), nullptr, r.N, r.E, r.K, softmax, norm);
        std::vector<float> dz(r.z.size(), 7.0f), dzr(r.z.size(), -7.0f);  // '=': the start values go
        cpu::router_gate_backward(dz.data(), s.data(), r.ids.data(), g.data(), dgate.data(), r.N, r.E, r.K, softmax, norm);
        ref::router_gate_backward(dzr.data(), s.data(), r.ids.data(), g.data(), dgate.data(), r.N, r.E, r.K, softmax, norm);
        EXPECT_TRUE(same_bits(dz, dzr)) << "backward K=" << K << " softmax=" << softmax << " norm=" << norm;
      }
  }
}

TEST(OpsRouter, GatesAndLogProbsAreWhatTheySay) {
  const Router r(23, 11, 3, 30);
  for (bool softmax : {true, false}) {
    const auto s = r.scores(r.z, softmax);
    for (bool norm : {true, false}) {
      std::vector<float> g(r.ids.size()), lp(r.ids.size());
      cpu::router_gate_forward(g.data(), lp.data(), r.z.data(), s.data(), r.ids.data(), r.probe.data(), r.N, r.E, r.K,
                               softmax, norm);
      for (int n = 0; n < r.N; ++n) {
        double sum = 0.0, lse = 0.0;
        for (int e = 0; e < r.E; ++e) lse += std::exp(static_cast<double>(r.z[n * r.E + e]));
        lse = std::log(lse);
        for (int k = 0; k < r.K; ++k) {
          const int id = r.ids[n * r.K + k];
          sum += g[n * r.K + k];
          if (!norm) {
            EXPECT_EQ(g[n * r.K + k], s[n * r.E + id]) << "the score itself";
          }
          EXPECT_NEAR(lp[n * r.K + k], r.z[n * r.E + r.probe[n * r.K + k]] - lse, 1e-5) << "log-prob at the probe id";
        }
        if (norm) {
          EXPECT_NEAR(sum, 1.0, 1e-6) << "renormalised gates sum to 1";
        }
      }
    }
  }
}

// <dgate, gate(z + h·v) − gate(z − h·v)> / 2h = <dz, v>, the ids fixed (the scores recomputed from
// z, so the softmax-without-renormalisation and sigmoid paths' chain through the scores is checked).
TEST(OpsRouter, BackwardIsTheGradient) {
  const Router r(9, 7, 3, 40);
  const auto dgate = normals(r.ids.size(), 41), v = normals(r.z.size(), 42);
  for (bool softmax : {true, false})
    for (bool norm : {true, false}) {
      auto gate_of = [&](const std::vector<float>& zz) {
        const auto s = r.scores(zz, softmax);
        std::vector<float> g(r.ids.size());
        ref::router_gate_forward(g.data(), nullptr, zz.data(), s.data(), r.ids.data(), nullptr, r.N, r.E, r.K, softmax,
                                 norm);
        return g;
      };
      const auto s = r.scores(r.z, softmax);
      const auto g = gate_of(r.z);
      std::vector<float> dz(r.z.size());
      cpu::router_gate_backward(dz.data(), s.data(), r.ids.data(), g.data(), dgate.data(), r.N, r.E, r.K, softmax, norm);
      const float h = 1e-2f;
      std::vector<float> zp = r.z, zm = r.z;
      for (size_t i = 0; i < zp.size(); ++i) {
        zp[i] += h * v[i];
        zm[i] -= h * v[i];
      }
      const auto gp = gate_of(zp), gm = gate_of(zm);
      double fd = 0.0, an = 0.0;
      for (size_t i = 0; i < g.size(); ++i) fd += dgate[i] * (static_cast<double>(gp[i]) - gm[i]) / (2.0 * h);
      for (size_t i = 0; i < dz.size(); ++i) an += static_cast<double>(dz[i]) * v[i];
      EXPECT_NEAR(fd, an, 2e-3 * (1.0 + std::fabs(an))) << "softmax=" << softmax << " norm=" << norm;
    }
}

}  // namespace
}  // namespace moerl
