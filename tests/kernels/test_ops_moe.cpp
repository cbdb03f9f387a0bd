// test_ops_moe.cpp — the MoE dispatch and combine ops (kernels/ops.def: moe_plan, moe_combine_order,
// moe_gather, moe_combine, moe_combine_backward, moe_scatter_add): the plan's rows are a stable
// sort by expert and the combine orders follow their kind, as the references; the CPU kernels
// equal the scalar references bit for bit,
// on a grouping that permutes every row and a per-token order (reversed for odd tokens), with and
// without the shared expert's extra term; and the combine's backward is its adjoint (the
// <dy, combine(ye)> = <combine_backward(dy), ye> identity, in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <algorithm>
#include <numeric>

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

// The plan: CPU = reference on ids with empty experts, all-one-expert rows and K = 1; the rows are
// a permutation grouped by expert, (token, slot) ascending inside an expert.
TEST(OpsMoe, PlanIsTheStableGroupingByExpert) {
  for (const int K : {1, 2, 4})
    for (const int E : {1, 5, 16}) {
      SCOPED_TRACE(testing::Message() << "K " << K << " E " << E);
      const int N = 37, NK = N * K;
      std::vector<int32_t> ids(NK);
      for (int i = 0; i < NK; ++i) ids[i] = E == 1 ? 0 : ((i * 7 + i / 3) % E) / 2 * 2 % E;  // odd experts empty
      std::vector<int32_t> rt(NK, -1), sr(NK, -1), rt_ref(NK, -2), sr_ref(NK, -2);
      cpu::moe_plan(rt.data(), sr.data(), ids.data(), N, K, E);
      ref::moe_plan(rt_ref.data(), sr_ref.data(), ids.data(), N, K, E);
      EXPECT_EQ(rt, rt_ref);
      EXPECT_EQ(sr, sr_ref);
      std::vector<int32_t> seen(sr);
      std::sort(seen.begin(), seen.end());
      std::vector<int32_t> all(NK);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(seen, all) << "slot_row is a permutation";
      for (int i = 0; i < NK; ++i) EXPECT_EQ(rt[sr[i]], i / K);
      for (int i = 0; i + 1 < NK; ++i)
        for (int j = i + 1; j < std::min(NK, i + 5); ++j)
          if (ids[i] == ids[j]) {
            EXPECT_LT(sr[i], sr[j]) << "stable inside an expert";
          } else {
            EXPECT_EQ(sr[i] < sr[j], ids[i] < ids[j]) << "grouped by expert";
          }
    }
}

// The expert GEMMs' row offsets where the ids are: CPU = reference (the counts below each expert),
// consistent with the plan (expert e's rows are offsets[e] .. offsets[e+1]−1 of the grouping), with
// empty experts and no rows at all.
TEST(OpsMoe, OffsetsBoundEachExpertsRowsOfThePlan) {
  for (const int K : {1, 2, 4})
    for (const int E : {1, 5, 16}) {
      SCOPED_TRACE(testing::Message() << "K " << K << " E " << E);
      const int N = 37, NK = N * K;
      std::vector<int32_t> ids(NK);
      for (int i = 0; i < NK; ++i) ids[i] = E == 1 ? 0 : ((i * 7 + i / 3) % E) / 2 * 2 % E;  // odd experts empty
      std::vector<int32_t> off(E + 1, -1), off_ref(E + 1, -2), rt(NK), sr(NK);
      cpu::moe_offsets(off.data(), ids.data(), N, K, E);
      ref::moe_offsets(off_ref.data(), ids.data(), N, K, E);
      EXPECT_EQ(off, off_ref);
      EXPECT_EQ(off[0], 0);
      EXPECT_EQ(off[E], NK);
      cpu::moe_plan(rt.data(), sr.data(), ids.data(), N, K, E);
      for (int i = 0; i < NK; ++i) {
        EXPECT_GE(sr[i], off[ids[i]]);
        EXPECT_LT(sr[i], off[ids[i] + 1]);
      }
      if (E > 2) EXPECT_EQ(off[2], off[1]) << "expert 1 is empty";
    }
  std::vector<int32_t> off(4, -1);
  cpu::moe_offsets(off.data(), nullptr, 0, 2, 3);
  EXPECT_EQ(off, std::vector<int32_t>(4, 0));
}

// The combine orders: fixed keeps the base order (or k ascending), reversed reverses it, split_k
// is a seeded permutation of it per token (the same key gives the same order, another call another).
TEST(OpsMoe, CombineOrderFollowsItsKind) {
  const int N = 23, K = 4, NK = N * K;
  std::vector<int32_t> base(NK);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) base[n * K + k] = (k + n) % K;
  for (const int32_t* slot_order : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(base.data())})
    for (const OrderKind kind : {OrderKind::fixed, OrderKind::reversed, OrderKind::split_k}) {
      ReduceCtx ctx;
      ctx.order.kind = kind;
      ctx.key = NoiseKey{17, 2, 3, 40};
      std::vector<int32_t> a(NK, -1), b(NK, -2), c(NK, -3);
      cpu::moe_combine_order(a.data(), slot_order, N, K, ctx);
      ref::moe_combine_order(b.data(), slot_order, N, K, ctx);
      EXPECT_EQ(a, b);
      ctx.key.call += 1000;
      cpu::moe_combine_order(c.data(), slot_order, N, K, ctx);
      int differ = 0;
      for (int n = 0; n < N; ++n) {
        std::vector<int32_t> row(a.begin() + n * K, a.begin() + (n + 1) * K), want(K);
        for (int k = 0; k < K; ++k) want[k] = slot_order ? slot_order[n * K + k] : k;
        if (kind == OrderKind::reversed) std::reverse(want.begin(), want.end());
        if (kind != OrderKind::split_k) EXPECT_EQ(row, want) << "token " << n;
        std::sort(row.begin(), row.end());
        std::sort(want.begin(), want.end());
        EXPECT_EQ(row, want) << "a permutation of the base order, token " << n;
        differ += !std::equal(a.begin() + n * K, a.begin() + (n + 1) * K, c.begin() + n * K);
      }
      if (kind == OrderKind::split_k) {
        EXPECT_GT(differ, N / 2) << "another call, other orders";
      } else {
        EXPECT_EQ(differ, 0);
      }
    }
}

}  // namespace
}  // namespace moerl
