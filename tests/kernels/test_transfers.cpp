// test_transfers.cpp — the accounting of host↔device crossings (kernels/transfers.h,
// kernels/op_crossings.h) and TestDeviceBackend, whose "device" the host cannot touch
// (kernels/test_device.h). The contract over a whole RL step: tests/rl/test_step_transfers.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/kv_cache.h"
#include "kernels/test_device.h"
#include "kernels/transfers.h"

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

}  // namespace
}  // namespace moerl
