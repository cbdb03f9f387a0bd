// The all-to-all of one MoE layer on the reference workload (scenarios/bench.ini: 256 sequences ×
// 48 tokens, top-2 of 16 experts, d_model 128), timed — the numbers of docs/parallelism.md.
// Not part of ctest (DISABLED_); run it with
//   mpirun --oversubscribe -np N build/tests/test_mpi --gtest_also_run_disabled_tests
//          --gtest_filter='*A2aTiming*'
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ep_fixture.h"
#include "models/dispatcher.h"
#include "mpi_env.h"

namespace moerl {
namespace {

TEST(EpTiming, DISABLED_A2aTiming) {
  const RankGrid& g = test::mpi_grid();
  const int n = g.size(), E = 16, K = 2, D = 128, Ntot = 256 * 48, reps = 50;
  const auto ids = test::seeded_ids(Ntot, E, K, 3);  // uniform routing
  const SeqBlock blk = dp_block(Ntot, n, g.rank());
  const int N = static_cast<int>(blk.size());
  const std::vector<float> h = test::seeded_vector(N * D, 4);
  const CollectiveDispatcher disp(&g.ep());
  DispatchPlan plan;
  std::vector<float> xe(static_cast<size_t>(N) * K * D), ye(xe.size());
  // permute (+ counts), rows out, rows back: the fastest repetition (the machine is shared: the
  // minimum is the least disturbed measurement) and the mean
  std::vector<double> t(3, 1e30), mean(3, 0.0);
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  auto sync = [&] {  // start a phase together, so waiting for a slower rank is not timed
    double x = 0.0;
    g.dp().allreduce_sum(&x, 1);
  };
  for (int r = 0; r < reps + 2; ++r) {
    sync();
    const auto t0 = clock::now();
    disp.dispatch(xe.data(), &plan, h.data(), ids.data() + blk.begin * K, N, K, E, D, cpu_backend());
    const auto t1 = clock::now();
    std::vector<float> xg(static_cast<size_t>(plan.received()) * D);
    sync();
    const auto t2 = clock::now();
    if (n > 1) disp.to_experts(xg.data(), xe.data(), plan, D);
    const auto t3 = clock::now();
    sync();
    const auto t4 = clock::now();
    if (n > 1) disp.from_experts(ye.data(), xg.data(), plan, D);
    const auto t5 = clock::now();
    if (r < 2) continue;  // warm-up
    const double d[3] = {secs(t0, t1), secs(t2, t3), secs(t4, t5)};
    for (int i = 0; i < 3; ++i) {
      t[i] = std::min(t[i], d[i]);
      mean[i] += d[i] / reps;
    }
  }
  int64_t sent = 0;
  for (int s = 0; s < n; ++s)
    if (s != g.rank()) sent += static_cast<int64_t>(plan.send_rows[s] + plan.recv_rows[s]) * D * 4;
  std::vector<double> mine = {t[0], t[1], t[2], static_cast<double>(sent), mean[1] + mean[2]};
  const std::vector<double> all = collectives_allgather(g.dp(), mine);
  if (g.is_root()) {
    double mx[5] = {0, 0, 0, 0, 0};
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < 5; ++i) mx[i] = std::max(mx[i], all[static_cast<size_t>(s) * 5 + i]);
    // the volume model: 2·K·D·4 bytes per token, times the share of (token, slot) rows leaving
    const double model = static_cast<double>(Ntot) / n * 2 * K * D * 4 * (1.0 - 1.0 / n);
    std::printf("a2a ranks %d: tokens/rank %d, bytes sent/rank max %.0f (model %.0f), "
                "permute %.3f ms, exchange out %.3f ms, back %.3f ms (fastest of %d, slowest rank; "
                "mean out+back %.3f ms), %.2f GB/s per rank\n",
                n, N, mx[3], model, 1e3 * mx[0], 1e3 * mx[1], 1e3 * mx[2], reps, 1e3 * mx[4],
                mx[1] + mx[2] > 0 ? mx[3] / (mx[1] + mx[2]) * 1e-9 : 0.0);
  }
}

}  // namespace
}  // namespace moerl
