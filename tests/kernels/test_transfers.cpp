// test_transfers.cpp — the accounting of host↔device crossings (kernels/transfers.h,
// kernels/op_crossings.h) and TestDeviceBackend, whose "device" the host cannot touch
// (kernels/test_device.h). The contract over a whole RL step: tests/rl/test_step_transfers.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/test_device.h"
#include "kernels/transfers.h"
#include "models/workspace.h"

namespace moerl {
namespace {

TEST(Transfers, LogCountsPerPhaseKindAndDirection) {
  TestDeviceBackend dev;
  TransferLog& log = *dev.transfers();
  EXPECT_EQ(log.phase(), TransferPhase::other);
  {
    TransferPhaseScope ph(dev, TransferPhase::rollout);
    log.add(CrossDir::up, CrossKind::activations, 100);
    log.add(CrossDir::down, CrossKind::indices, 8);
    {
      TransferPhaseScope inner(dev, TransferPhase::train);
      log.add(CrossDir::up, CrossKind::grads, 4);
    }
    EXPECT_EQ(log.phase(), TransferPhase::rollout);
  }
  EXPECT_EQ(log.phase(), TransferPhase::other);
  EXPECT_EQ(log.bytes(TransferPhase::rollout, CrossKind::activations, CrossDir::up), 100);
  EXPECT_EQ(log.copies(TransferPhase::rollout, CrossKind::activations, CrossDir::up), 1);
  EXPECT_EQ(log.bytes(TransferPhase::rollout), 108);
  EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::grads), 4);
  EXPECT_EQ(log.total(), 112);
  EXPECT_NE(log.table().find("rollout"), std::string::npos);
  // every (phase, kind) row on request, the zero ones too: what no longer crosses shows
  EXPECT_EQ(log.table().find("optimizer"), std::string::npos);
  EXPECT_NE(log.table(true).find("optimizer"), std::string::npos);
  log.reset();
  EXPECT_EQ(log.total(), 0);
  // the CPU backend has no device and no log; a scope on it does nothing
  EXPECT_EQ(cpu_backend().transfers(), nullptr);
  EXPECT_EQ(cpu_backend().memory_space(), MemorySpace::host);
  TransferPhaseScope none(cpu_backend(), TransferPhase::optimizer);
}

// Copies between host and device count under the kind the caller names; within the device none.
TEST(Transfers, CopiesCountAndKeepTheBytes) {
  TestDeviceBackend dev;
  std::vector<float> h(64), back(64, -1.0f);
  for (int i = 0; i < 64; ++i) h[i] = 0.5f * i;
  float* d = static_cast<float*>(dev.mem_alloc(64 * sizeof(float)));
  float* e = static_cast<float*>(dev.mem_alloc(64 * sizeof(float)));
  EXPECT_TRUE(dev.is_device_pointer(d));
  EXPECT_FALSE(dev.is_device_pointer(h.data()));
  dev.mem_copy(d, h.data(), 64 * sizeof(float), CopyDir::to_device, CrossKind::activations);
  dev.mem_copy(e, d, 64 * sizeof(float), CopyDir::on_device, CrossKind::kv_cache);
  // rows 0, 2, 4, … of an 8 × 8 matrix, each 8 floats, back to the host
  dev.mem_copy_2d(back.data(), 8 * sizeof(float), e, 16 * sizeof(float), 8 * sizeof(float), 4, CopyDir::to_host,
                  CrossKind::kv_cache);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(back[r * 8 + c], h[r * 16 + c]);
  const TransferLog& log = *dev.transfers();
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::activations, CrossDir::up), 256);
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache, CrossDir::down), 128);
  EXPECT_EQ(log.total(), 384);
  // a copy whose pointers are not where its direction says is refused
  EXPECT_THROW(dev.mem_copy(h.data(), d, 4, CopyDir::to_device, CrossKind::activations), std::invalid_argument);
  dev.mem_free(d);
  dev.mem_free(e);
  EXPECT_EQ(dev.device_bytes_in_use(), 0u);
}

// The device is kept apart: the host touching its memory outside an op or a copy faults.
TEST(TransfersDeathTest, TheHostCannotReadTheDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TestDeviceBackend dev;
  float* d = static_cast<float*>(dev.mem_alloc(16));
  EXPECT_DEATH({ volatile float x = d[0]; (void)x; }, "");
  dev.mem_free(d);
}

// Decode attention over a cache on the device moves the query, the lengths and the output only;
// over a host cache, every sequence's keys and values up to its length cross as well (the CUDA
// backend's old path). Both give the CPU backend's bits.
TEST(Transfers, DecodeAttentionOverAResidentCache) {
  const int B = 3, Tmax = kv_cache_block, H = 2, Dh = 4, D = H * Dh;
  std::vector<float> k(static_cast<size_t>(B) * D * Tmax), v(static_cast<size_t>(B) * Tmax * D), q(B * D);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.02f * static_cast<float>(i % 89) - 0.8f;
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const std::vector<int32_t> len{5, 9, 1};
  std::vector<float> want(B * D), host_cache(B * D), resident(B * D);
  cpu_backend().attention_decode(want.data(), q.data(), k.data(), v.data(), len.data(), B, Tmax, H, Dh, ReduceCtx{});

  TestDeviceBackend dev;
  dev.attention_decode(host_cache.data(), q.data(), k.data(), v.data(), len.data(), B, Tmax, H, Dh, ReduceCtx{});
  const TransferLog& log = *dev.transfers();
  const int64_t held = (5 + 9 + 1) * D * 4;
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache, CrossDir::up), 2 * held);
  dev.transfers()->reset();

  float* dk = static_cast<float*>(dev.mem_alloc(k.size() * 4));
  float* dv = static_cast<float*>(dev.mem_alloc(v.size() * 4));
  dev.mem_copy(dk, k.data(), k.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  dev.mem_copy(dv, v.data(), v.size() * 4, CopyDir::to_device, CrossKind::kv_cache);
  dev.transfers()->reset();
  dev.attention_decode(resident.data(), q.data(), dk, dv, len.data(), B, Tmax, H, Dh, ReduceCtx{});
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::kv_cache), 0);
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::activations, CrossDir::up), B * D * 4);
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::activations, CrossDir::down), B * D * 4);
  EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::indices, CrossDir::up), B * 4);
  EXPECT_EQ(want, host_cache);
  EXPECT_EQ(want, resident);
  dev.mem_free(dk);
  dev.mem_free(dv);
}

// The test device's op graphs (kernels/test_device.h): a recorded op does not run; a launch runs
// it with the arguments it was recorded with, so a scalar argument keeps its recorded value while
// a value read from memory (a copy from host_alloc memory refilled before the launch) follows; a
// recorded copy from other host memory, an op on host memory, and allocating while recording
// throw; after an allocation a launch runs nothing.
TEST(TestDeviceGraphs, ReplayTakesRecordedArgumentsAndRefilledMemory) {
  TestDeviceBackend dev;
  dev.set_graphs(true);
  const int B = 1, D = 2, Tc = 4;
  DeviceArray<float> kc(dev, B * D * Tc), vc(dev, B * D * Tc), k(dev, D), v(dev, D);
  DeviceArray<int32_t> len(dev, B);
  HostArray<int32_t> len_host(dev, B);
  HostArray<float> kv_host(dev, 2 * D);
  std::vector<float> pageable(D, 1.0f);
  int t0 = 0;
  dev.graph_begin();
  dev.mem_copy(len.data(), len_host.data(), sizeof(int32_t), CopyDir::to_device, CrossKind::indices);
  dev.mem_copy(k.data(), kv_host.data(), D * sizeof(float), CopyDir::to_device, CrossKind::activations);
  dev.mem_copy(v.data(), kv_host.data() + D, D * sizeof(float), CopyDir::to_device, CrossKind::activations);
  dev.kv_cache_write(kc.data(), vc.data(), k.data(), v.data(), B, 1, D, Tc, t0);      // t0 = 0, recorded
  dev.kv_cache_append(kc.data(), vc.data(), k.data(), v.data(), len.data(), B, D, Tc);  // at len − 1
  EXPECT_THROW(dev.mem_copy(k.data(), pageable.data(), D * sizeof(float), CopyDir::to_device, CrossKind::activations),
               std::logic_error);
  EXPECT_THROW((void)dev.mem_alloc(64), std::logic_error);
  // an op on a host array would upload it inside the step: a capture could not take that copy
  EXPECT_THROW(dev.kv_cache_append(kc.data(), vc.data(), pageable.data(), v.data(), len.data(), B, D, Tc),
               std::logic_error);
  const std::unique_ptr<Backend::Graph> g = dev.graph_end();
  ASSERT_TRUE(g);
  std::vector<float> vals(static_cast<size_t>(B) * D * Tc);
  dev.mem_copy(vals.data(), vc.data(), vals.size() * sizeof(float), CopyDir::to_host, CrossKind::kv_cache);
  EXPECT_EQ(vals, std::vector<float>(vals.size(), 0.0f)) << "nothing ran while recording";
  for (int step = 1; step <= 3; ++step) {  // the host's values of the step, then a launch
    t0 = step;  // a scalar the recording does not see
    len_host.data()[0] = step + 1;
    kv_host.data()[2] = kv_host.data()[3] = static_cast<float>(step);
    EXPECT_TRUE(dev.graph_launch(*g));
  }
  dev.mem_copy(vals.data(), vc.data(), vals.size() * sizeof(float), CopyDir::to_host, CrossKind::kv_cache);
  // vcache [B, Tc, D]: position 0 (the recorded t0) has the last step's row, positions 1..3 (each
  // step's length − 1) their own step's
  EXPECT_EQ(vals, (std::vector<float>{3, 3, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(dev.graph_launches(), 3);
  EXPECT_EQ(dev.graphs_recorded(), 1);
  // memory allocated since the recording may have moved what it holds: the launch runs nothing
  { DeviceArray<float> moved(dev, 4); }
  kv_host.data()[2] = 9.0f;
  EXPECT_FALSE(dev.graph_launch(*g));
  dev.mem_copy(vals.data(), vc.data(), vals.size() * sizeof(float), CopyDir::to_host, CrossKind::kv_cache);
  EXPECT_EQ(vals[0], 3.0f);
  EXPECT_EQ(dev.graph_launches(), 3);
}

}  // namespace
}  // namespace moerl
