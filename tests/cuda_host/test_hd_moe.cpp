// test_hd_moe.cpp — the dispatcher's orders as host-device functions (kernels/cuda/hd/moe.h), run
// on the CPU: the grouping equals a stable sort of the slots by expert and the dispatcher's plan;
// the combine, composed from hd_combine_order and hd_combine_elem as a device kernel would
// (one element at a time), equals Dispatcher::combine bit for bit in every order (fixed, reversed,
// split_k's seeded shuffle), with a base slot order and an extra term.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "kernels/cuda/hd/moe.h"
#include "kernels/rng.h"
#include "models/dispatcher.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::normals;

std::vector<int32_t> random_ids(int N, int K, int E, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> ids(static_cast<size_t>(N) * K);
  for (int n = 0; n < N; ++n) {  // K distinct experts per token, as top-k gives
    std::vector<int32_t> e(E);
    std::iota(e.begin(), e.end(), 0);
    r.shuffle(e.data(), E);
    std::copy_n(e.begin(), K, ids.begin() + static_cast<size_t>(n) * K);
  }
  return ids;
}

TEST(HdMoe, GroupingIsTheStableSortByExpertAndTheDispatchersPlan) {
  for (const auto& [N, K, E] : {std::tuple{37, 2, 8}, std::tuple{5, 4, 32}, std::tuple{64, 1, 3}}) {
    const auto ids = random_ids(N, K, E, 7 + N);
    const int NK = N * K;
    std::vector<int> offsets(E + 1), fill(E);
    std::vector<int32_t> slot_row(NK), row_token(NK);
    hd_expert_offsets(offsets.data(), ids.data(), NK, E);
    hd_group_slots(slot_row.data(), row_token.data(), fill.data(), ids.data(), offsets.data(), NK, K, E);
    std::vector<int32_t> by_expert(NK);  // the reference: slots stably sorted by their expert
    std::iota(by_expert.begin(), by_expert.end(), 0);
    std::stable_sort(by_expert.begin(), by_expert.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    for (int row = 0; row < NK; ++row) {
      ASSERT_EQ(slot_row[by_expert[row]], row) << "N " << N << " row " << row;
      ASSERT_EQ(row_token[row], by_expert[row] / K);
      ASSERT_GE(row, offsets[ids[by_expert[row]]]);
      ASSERT_LT(row, offsets[ids[by_expert[row]] + 1]);
    }
    const int D = 4;
    const auto h = normals(static_cast<size_t>(N) * D, 3);
    std::vector<float> xe(static_cast<size_t>(NK) * D);
    DispatchPlan plan;
    LocalDispatcher().dispatch(xe.data(), &plan, h.data(), ids.data(), N, K, E, D, cpu_backend());
    EXPECT_EQ(plan.slot_row, slot_row);
    EXPECT_EQ(plan.row_token, row_token);
    EXPECT_EQ(plan.offsets, offsets);
  }
}

TEST(HdMoe, CombineEqualsTheDispatcherBitForBitInEveryOrder) {
  const int N = 29, K = 4, E = 16, D = 33;
  const auto ids = random_ids(N, K, E, 11);
  const auto h = normals(static_cast<size_t>(N) * D, 12);
  std::vector<float> xe(static_cast<size_t>(N) * K * D);
  DispatchPlan plan;
  const LocalDispatcher disp;
  disp.dispatch(xe.data(), &plan, h.data(), ids.data(), N, K, E, D, cpu_backend());
  const auto ye = normals(xe.size(), 13), gate = normals(static_cast<size_t>(N) * K, 14),
             extra = normals(static_cast<size_t>(N) * D, 15);
  std::vector<int32_t> base(static_cast<size_t>(N) * K);  // a per-token base order (ep_layout)
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) base[static_cast<size_t>(n) * K + k] = (k + n) % K;
  for (const char* order_name : {"fixed", "reversed", "split_k:4"})
    for (bool with_base : {false, true})
      for (bool with_extra : {false, true}) {
        ReduceCtx ctx;
        ASSERT_TRUE(reduce_order_parse(order_name, &ctx.order));
        ctx.key = NoiseKey{99, 3, 5, 1000};
        std::vector<float> want(static_cast<size_t>(N) * D), got(want.size());
        disp.combine(want.data(), ye.data(), gate.data(), with_extra ? extra.data() : nullptr, plan, D, ctx, cpu_backend(),
                     with_base ? base.data() : nullptr);
        for (int n = 0; n < N; ++n) {
          int order[64];
          hd_combine_order(order, with_base ? base.data() + static_cast<size_t>(n) * K : nullptr, K, ctx.order.kind,
                           ctx.key.seed, ctx.key.layer, ctx.key.site, ctx.key.call, n);
          for (int d = 0; d < D; ++d)
            got[static_cast<size_t>(n) * D + d] =
                hd_combine_elem(ye.data(), gate.data() + static_cast<size_t>(n) * K,
                                plan.slot_row.data() + static_cast<size_t>(n) * K, order, K, D, d,
                                with_extra ? extra.data() + static_cast<size_t>(n) * D : nullptr);
        }
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << order_name << " base " << with_base << " extra " << with_extra;
      }
}

}  // namespace
}  // namespace moerl
