// test_resident_gpu.cpp — what the CUDA backend keeps on the device (kernels/backend.h, "Where
// memory lives"): decode attention over the resident KV cache (keys transposed, kernels/kv_cache.h;
// split over positions for long contexts),
// AdamW over device-resident moments, and the transfer contract of a whole RL step on the GPU
// (the test of tests/rl/test_step_transfers.cpp, on the hardware, with the CUDA backend's own
// counters). The last prints the crossings table between "TRANSFERS BEGIN" and "TRANSFERS END" for
// tests/gpu/device_checks.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../rl/rl_fixture.h"
#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/kv_cache.h"
#include "models/model.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

std::vector<float> seeded(size_t n, uint32_t seed, float scale) {
  std::vector<float> x(n);
  uint32_t s = seed;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = scale * (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  return x;
}

// Tolerance against the CPU: scores and P·V are FP32 fma chains in the CPU's order, but the
// softmax's max and sum are the device's tree reductions (kernels/cuda/ops.h): within
// abs 1e-6 + |ref|·Tmax·eps(fp32) for |v| ≤ 1.
TEST(ResidentGpu, DecodeOverTheResidentCache) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  const int B = 5, Tmax = 2 * kv_cache_block, H = 4, Dh = 16, D = H * Dh;
  const std::vector<float> k = seeded(static_cast<size_t>(B) * D * Tmax, 1, 1.0f);
  const std::vector<float> v = seeded(static_cast<size_t>(B) * Tmax * D, 2, 1.0f);
  const std::vector<float> q = seeded(static_cast<size_t>(B) * D, 3, 1.0f);
  const std::vector<int32_t> len{1, 17, 64, 65, 128};
  std::vector<float> ref(B * D), uploaded(B * D), resident(B * D);
  cpu_backend().attention_decode(ref.data(), q.data(), k.data(), v.data(), len.data(), B, Tmax, H, Dh, ReduceCtx{});
  be.attention_decode(uploaded.data(), q.data(), k.data(), v.data(), len.data(), B, Tmax, H, Dh, ReduceCtx{});
  float* dk = static_cast<float*>(be.mem_alloc(k.size() * 4));
  float* dv = static_cast<float*>(be.mem_alloc(v.size() * 4));
  be.mem_copy(dk, k.data(), k.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  be.mem_copy(dv, v.data(), v.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  TransferLog& log = *be.transfers();
  log.reset();
  be.attention_decode(resident.data(), q.data(), dk, dv, len.data(), B, Tmax, H, Dh, ReduceCtx{});
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache), 0);
  be.mem_free(dk);
  be.mem_free(dv);
  // the same fma chains and reductions as the upload path's kernel: the same bits
  EXPECT_EQ(std::memcmp(uploaded.data(), resident.data(), resident.size() * 4), 0);
  const float eps = std::ldexp(1.0f, -23);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(resident[i], ref[i], 1e-6f + std::fabs(ref[i]) * Tmax * eps) << i;
}

// Split-position decode (kernels/cuda/hd/decode_split.h) over long contexts, rows of 1 to 4 chunks:
// within the host composition's tolerance of the CPU (tests/cuda_host/test_hd_decode_split.cpp:
// abs (2·Tmax + 8)·5·eps, rel 4·eps), deterministic, and batch-invariant — a row's bits do not
// depend on the other rows' lengths, nor on where the lengths are (host or device).
TEST(ResidentGpu, SplitDecodeOverLongContexts) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  const int B = 5, Tmax = 1024, H = 4, Dh = 16, D = H * Dh;
  const std::vector<float> k = seeded(static_cast<size_t>(B) * D * Tmax, 11, 1.0f);
  const std::vector<float> v = seeded(static_cast<size_t>(B) * Tmax * D, 12, 1.0f);
  const std::vector<float> q = seeded(static_cast<size_t>(B) * D, 13, 1.0f);
  float* dk = static_cast<float*>(be.mem_alloc(k.size() * 4));
  float* dv = static_cast<float*>(be.mem_alloc(v.size() * 4));
  be.mem_copy(dk, k.data(), k.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  be.mem_copy(dv, v.data(), v.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  auto decode = [&](const std::vector<int32_t>& len) {
    std::vector<float> out(static_cast<size_t>(B) * D);
    be.attention_decode(out.data(), q.data(), dk, dv, len.data(), B, Tmax, H, Dh, ReduceCtx{});
    return out;
  };
  const std::vector<int32_t> len{1, 256, 257, 700, 1024}, other{1024, 3, 257, 700, 1};
  const std::vector<float> a = decode(len), a2 = decode(len), b = decode(other);
  // the lengths where the kernels read them (the generation's): the grid covers Tmax, each block
  // its own row — the same bits as host lengths
  int32_t* dlen = static_cast<int32_t*>(be.mem_alloc(len.size() * 4));
  be.mem_copy(dlen, len.data(), len.size() * 4, CopyDir::to_device, CrossKind::indices);
  std::vector<float> a_dev(static_cast<size_t>(B) * D);
  be.attention_decode(a_dev.data(), q.data(), dk, dv, dlen, B, Tmax, H, Dh, ReduceCtx{});
  be.mem_free(dlen);
  EXPECT_EQ(std::memcmp(a.data(), a_dev.data(), a.size() * 4), 0) << "device lengths";
  std::vector<float> ref(static_cast<size_t>(B) * D);
  cpu_backend().attention_decode(ref.data(), q.data(), k.data(), v.data(), len.data(), B, Tmax, H, Dh, ReduceCtx{});
  be.mem_free(dk);
  be.mem_free(dv);
  const double eps = std::ldexp(1.0, -23);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(a[i], ref[i], (2 * Tmax + 8) * 5 * eps + 4 * eps * std::fabs(ref[i])) << i;
  EXPECT_EQ(std::memcmp(a.data(), a2.data(), a.size() * 4), 0) << "run to run";
  for (int row : {2, 3})  // the same length in both batches
    EXPECT_EQ(std::memcmp(a.data() + row * D, b.data() + row * D, D * 4), 0) << "row " << row;
}

// The backend's copies: a narrow column (staged: one upload, then spread on the device), wide rows,
// device to device, and back — every byte where the pitches say, counted once.
TEST(ResidentGpu, CopiesOfEveryShape) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  const int rows = 300, Tc = 64;
  std::vector<float> col(rows), wide(static_cast<size_t>(rows) * Tc), back(wide.size(), -1.0f);
  for (int i = 0; i < rows; ++i) col[i] = static_cast<float>(i) + 0.25f;
  float* d = static_cast<float*>(be.mem_alloc(wide.size() * 4));
  float* e = static_cast<float*>(be.mem_alloc(wide.size() * 4));
  be.mem_zero(d, wide.size() * 4);
  TransferLog& log = *be.transfers();
  log.reset();
  be.mem_copy_2d(d + 7, Tc * 4, col.data(), 4, 4, rows, CopyDir::to_device, CrossKind::activations);  // column 7
  be.mem_copy(e, d, wide.size() * 4, CopyDir::on_device, CrossKind::kv_cache);
  be.mem_copy(back.data(), e, wide.size() * 4, CopyDir::to_host, CrossKind::kv_cache);
  for (int i = 0; i < rows; ++i)
    for (int t = 0; t < Tc; ++t) ASSERT_EQ(back[static_cast<size_t>(i) * Tc + t], t == 7 ? col[i] : 0.0f) << i << " " << t;
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::activations, CrossDir::up), rows * 4);
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache, CrossDir::down), static_cast<int64_t>(wide.size()) * 4);
  be.mem_free(d);
  be.mem_free(e);
}

// AdamW with its moments in device memory: the same bits as with host moments (one kernel).
TEST(ResidentGpu, AdamWOverResidentMoments) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  const int64_t n = 1000;
  std::vector<float> w1 = seeded(n, 4, 1.0f), w2 = w1, g = seeded(n, 5, 0.1f);
  std::vector<float> m = seeded(n, 6, 0.01f), v = seeded(n, 7, 0.001f);
  for (float& x : v) x = std::fabs(x);
  std::vector<float> m1 = m, v1 = v, m2(n), v2(n);
  be.adamw_update(w1.data(), m1.data(), v1.data(), g.data(), n, 1.0f, 0.9f, 0.999f, 0.1, 0.001, 1e-3f, 0.0f, 1e-8f);
  float* dm = static_cast<float*>(be.mem_alloc(n * 4));
  float* dv = static_cast<float*>(be.mem_alloc(n * 4));
  be.mem_copy(dm, m.data(), n * 4, CopyDir::to_device, CrossKind::optimizer);
  be.mem_copy(dv, v.data(), n * 4, CopyDir::to_device, CrossKind::optimizer);
  be.adamw_update(w2.data(), dm, dv, g.data(), n, 1.0f, 0.9f, 0.999f, 0.1, 0.001, 1e-3f, 0.0f, 1e-8f);
  be.mem_copy(m2.data(), dm, n * 4, CopyDir::to_host, CrossKind::optimizer);
  be.mem_copy(v2.data(), dv, n * 4, CopyDir::to_host, CrossKind::optimizer);
  be.mem_free(dm);
  be.mem_free(dv);
  EXPECT_EQ(std::memcmp(w1.data(), w2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(m1.data(), m2.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(v1.data(), v2.data(), n * 4), 0);
}

// Two RL steps of the tiny scenario on the GPU: no KV cache and no optimizer moment crosses, the
// parameters go up once and the gradients down once per update, no activation goes up in any
// phase nor crosses in the train phase (tests/rl/test_step_transfers.cpp on the hardware); the
// crossings that remain are printed per phase (docs/gpu.md, "Where memory lives").
TEST(ResidentGpu, RlStepTransfers) {
  MOERL_REQUIRE_GPU();
  const Scenario s = test::tiny_scenario({"run.backend=cuda"});
  const RlSetup u = test::rl_setup(s);
  const Backend& be = cuda::cuda_backend();
  Model m(s.model);
  params_init(&m.params(), s.model, 5);
  m.set_backend(be);
  RlTrainer t(u, &m);
  TransferLog& log = *be.transfers();
  log.reset();
  RunResults res;
  for (int64_t step = 0; step < 2; ++step) t.step(step, &res);
  std::printf("TRANSFERS BEGIN (2 RL steps of the tiny scenario on cuda)\n%sTRANSFERS END\n", log.table(true).c_str());
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    EXPECT_EQ(log.bytes(ph, CrossKind::kv_cache), 0) << transfer_phase_name(ph);
    EXPECT_EQ(log.bytes(ph, CrossKind::optimizer), 0) << transfer_phase_name(ph);
    // the sampler and the mismatch measure reduce the logits where they are: no activation
    // crosses, either way, in any phase
    EXPECT_EQ(log.bytes(ph, CrossKind::activations), 0) << transfer_phase_name(ph);
  }
  // parameters up once (the run's first op), gradients never (the clip's norm on the device)
  const int64_t n = static_cast<int64_t>(m.weights().layout().size()) * 4;
  int64_t weights_up = 0, weights_down = 0, grads_up = 0, grads_down = 0;
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    weights_up += log.bytes(ph, CrossKind::weights, CrossDir::up);
    weights_down += log.bytes(ph, CrossKind::weights, CrossDir::down);
    grads_up += log.bytes(ph, CrossKind::grads, CrossDir::up);
    grads_down += log.bytes(ph, CrossKind::grads, CrossDir::down);
  }
  EXPECT_EQ(weights_up, n);
  EXPECT_EQ(weights_down, 0);
  EXPECT_EQ(grads_up, 0);
  EXPECT_EQ(grads_down, 0);  // the clip's norm is reduced where the gradients are
  // the policy loss runs where the log-probs are (policy_loss_rows): its inputs up once a step
  // (π_old, μ, the mask, the advantages), the aggregation's factors once a mini-batch; its totals
  // down once a mini-batch, beside one read of every MoE layer's routing (bf16-train's experts are
  // sized where the ids are)
  const int64_t updates = 2 * s.rl.minibatches;
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::up), 2 * 4 + updates);
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), updates * 2);
  for (float x : m.params().data()) ASSERT_TRUE(std::isfinite(x));
}

// CUDA Graphs over the decode loop (Model::generation_feed / generation_draw, recorded once per
// batch size by stream capture, then replayed): two RL steps with graphs give the bits of the same
// steps without them, most decode units are replays, and nothing made a capture fail. The CPU's
// proof of the same contract: tests/rl/test_step_transfers.cpp, DecodeGraphs.
TEST(ResidentGpu, DecodeGraphsReplayWithTheEagerBits) {
  MOERL_REQUIRE_GPU();
  const Backend& be = cuda::cuda_backend();
  for (const std::string rollout : {"fp32-ref", "bf16-train"}) {
    const Scenario s = test::tiny_scenario({"run.backend=cuda", "engines.rollout=" + rollout});
    const RlSetup u = test::rl_setup(s);
    std::vector<float> params[2];
    double reward[2] = {0, 0};
    int64_t launches[2] = {0, 0}, recorded[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      cuda::set_cuda_graphs(on == 1);
      Model m(s.model);
      params_init(&m.params(), s.model, 7);
      m.set_backend(be);
      RlTrainer t(u, &m);
      RunResults res;
      const int64_t l0 = be.graph_launches(), r0 = be.graphs_recorded();
      for (int64_t step = 0; step < 2; ++step) t.step(step, &res);
      launches[on] = be.graph_launches() - l0;
      recorded[on] = be.graphs_recorded() - r0;
      params[on] = m.params().data();
      reward[on] = res.last("reward_mean");
    }
    cuda::set_cuda_graphs(true);
    std::printf("GRAPHS %s: %lld decode units recorded, %lld launches%s%s\n", rollout.c_str(),
                static_cast<long long>(recorded[1]), static_cast<long long>(launches[1]),
                be.graph_failure().empty() ? "" : "; capture failed: ", be.graph_failure().c_str());
    EXPECT_EQ(launches[0], 0) << rollout;
    EXPECT_TRUE(be.graph_failure().empty()) << rollout << ": " << be.graph_failure();
    EXPECT_GT(recorded[1], 0) << rollout;
    EXPECT_GT(launches[1], 2 * recorded[1]) << rollout << ": mostly replays";
    ASSERT_EQ(params[0].size(), params[1].size());
    EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * 4), 0) << rollout;
    EXPECT_EQ(std::memcmp(&reward[0], &reward[1], sizeof(double)), 0) << rollout;
  }
}

}  // namespace
}  // namespace moerl
