// test_ops_moe.cpp — the MoE dispatch and combine ops (kernels/ops.def: moe_gather, moe_combine,
// moe_combine_backward, moe_scatter_add): the CPU kernels equal the scalar references bit for bit,
// on a grouping that permutes every row and a per-token order (reversed for odd tokens), with and
// without the shared expert's extra term; and the combine's backward is its adjoint (the
// <dy, combine(ye)> = <combine_backward(dy), ye> identity, in double).
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

struct Rows {
  int N = 29, K = 4, D = 24;
  std::vector<int32_t> slot_row, row_token, order;
  Rows() {
    const int NK = N * K;
    slot_row.resize(NK);
    row_token.resize(NK);
    order.resize(NK);
    for (int i = 0; i < NK; ++i) slot_row[i] = (i * 5 + 11) % NK;  // 5 and 116 coprime: a permutation
    for (int i = 0; i < NK; ++i) row_token[slot_row[i]] = i / K;
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) order[n * K + k] = n % 2 ? K - 1 - k : (k + n) % K;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OpsMoe, CpuEqualsRefBitwise) {
  const Rows m;
  const size_t NK = static_cast<size_t>(m.N) * m.K, ND = static_cast<size_t>(m.N) * m.D;
  const auto h = normals(ND, 1), ye = normals(NK * m.D, 2), gate = normals(NK, 3), extra = normals(ND, 4);
  const auto dy = normals(ND, 5), dxe = normals(NK * m.D, 6), dh0 = normals(ND, 7);
  std::vector<float> a(NK * m.D), b(NK * m.D);
  cpu::moe_gather(a.data(), h.data(), m.row_token.data(), m.N, static_cast<int>(NK), m.D);
  ref::moe_gather(b.data(), h.data(), m.row_token.data(), m.N, static_cast<int>(NK), m.D);
  EXPECT_TRUE(same_bits(a, b)) << "gather";
  for (const float* ex : {static_cast<const float*>(nullptr), extra.data()}) {
    std::vector<float> y(ND), yr(ND);
    cpu::moe_combine(y.data(), ye.data(), gate.data(), ex, m.slot_row.data(), m.order.data(), m.N, m.K, m.D);
    ref::moe_combine(yr.data(), ye.data(), gate.data(), ex, m.slot_row.data(), m.order.data(), m.N, m.K, m.D);
    EXPECT_TRUE(same_bits(y, yr)) << "combine, extra " << (ex != nullptr);
  }
  std::vector<float> dye(NK * m.D), dyer(NK * m.D), dg(NK), dgr(NK);
  cpu::moe_combine_backward(dye.data(), dg.data(), dy.data(), ye.data(), gate.data(), m.slot_row.data(), m.N, m.K, m.D);
  ref::moe_combine_backward(dyer.data(), dgr.data(), dy.data(), ye.data(), gate.data(), m.slot_row.data(), m.N, m.K, m.D);
  EXPECT_TRUE(same_bits(dye, dyer)) << "combine backward, dye";
  EXPECT_TRUE(same_bits(dg, dgr)) << "combine backward, dgate";
  std::vector<float> dh = dh0, dhr = dh0;
  cpu::moe_scatter_add(dh.data(), dxe.data(), m.slot_row.data(), m.N, m.K, m.D);
  ref::moe_scatter_add(dhr.data(), dxe.data(), m.slot_row.data(), m.N, m.K, m.D);
  EXPECT_TRUE(same_bits(dh, dhr)) << "scatter add";
  EXPECT_FALSE(same_bits(dh, dh0));
}

// The gather's adjoint is the scatter-add, the combine's (in ye) the backward's dye: checked as
// <x, A y> = <Aᵀ x, y> in double, within FP32 rounding.
TEST(OpsMoe, BackwardsAreTheAdjoints) {
  const Rows m;
  const size_t NK = static_cast<size_t>(m.N) * m.K, ND = static_cast<size_t>(m.N) * m.D;
  const auto h = normals(ND, 11), dxe = normals(NK * m.D, 12), ye = normals(NK * m.D, 13);
  const auto gate = normals(NK, 14), dy = normals(ND, 15);
  auto dot = [](const std::vector<float>& x, const std::vector<float>& y) {
    double s = 0.0;
    for (size_t i = 0; i < x.size(); ++i) s += static_cast<double>(x[i]) * y[i];
    return s;
  };
  std::vector<float> xe(NK * m.D), dh(ND, 0.0f);
  cpu::moe_gather(xe.data(), h.data(), m.row_token.data(), m.N, static_cast<int>(NK), m.D);
  cpu::moe_scatter_add(dh.data(), dxe.data(), m.slot_row.data(), m.N, m.K, m.D);
  EXPECT_NEAR(dot(dxe, xe), dot(dh, h), 1e-4 * (1.0 + std::abs(dot(dh, h))));
  std::vector<float> y(ND), dye(NK * m.D), dg(NK);
  cpu::moe_combine(y.data(), ye.data(), gate.data(), nullptr, m.slot_row.data(), m.order.data(), m.N, m.K, m.D);
  cpu::moe_combine_backward(dye.data(), dg.data(), dy.data(), ye.data(), gate.data(), m.slot_row.data(), m.N, m.K, m.D);
  EXPECT_NEAR(dot(dy, y), dot(dye, ye), 1e-4 * (1.0 + std::abs(dot(dy, y))));
  // and dgate[n, k] = <dy[n], ye[row]>: the gate's derivative of <dy, y>
  double via_gate = 0.0;
  for (size_t s = 0; s < NK; ++s) via_gate += static_cast<double>(dg[s]) * gate[s];
  EXPECT_NEAR(dot(dy, y), via_gate, 1e-4 * (1.0 + std::abs(via_gate)));
}

}  // namespace
}  // namespace moerl
