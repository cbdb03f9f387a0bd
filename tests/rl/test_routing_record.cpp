// The R3 routing record (sim/rl/routing_record.h): ⌈K·log₂E⌉ bits per record against exact
// integer arithmetic, the documented bit layout, seeded round trips (one limb and several), the
// bench workload's size, and the errors of bad ids and damaged records.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/rng.h"
#include "sim/rl/routing_record.h"

namespace moerl {
namespace {

// Smallest b with 2^b ≥ E^K, by 128-bit arithmetic (only where E^K < 2^127).
int exact_bits(int E, int K) {
  unsigned __int128 p = 1;
  for (int k = 0; k < K; ++k) p *= static_cast<unsigned>(E);
  int b = 0;
  while ((static_cast<unsigned __int128>(1) << b) < p) ++b;
  return b;
}

TEST(RoutingRecord, BitsAreCeilKLog2E) {
  EXPECT_EQ(routing_record_bits(16, 2), 8);   // the bench workload
  EXPECT_EQ(routing_record_bits(6, 2), 6);    // 36 values: 6 bits, not 2·3
  EXPECT_EQ(routing_record_bits(10, 3), 10);  // 1000 values: 10 bits, not 3·4
  EXPECT_EQ(routing_record_bits(1, 4), 0);    // a single expert needs no bits
  EXPECT_EQ(routing_record_bits(256, 8), 64);
  EXPECT_EQ(routing_record_bits(65535, 3), 48);
  for (int E = 1; E <= 300; ++E)
    for (int K = 1; K <= 15; ++K) {
      if (K * 9 > 126) continue;  // keep E^K below 2^127 for exact_bits
      ASSERT_EQ(routing_record_bits(E, K), exact_bits(E, K)) << "E " << E << " K " << K;
    }
}

TEST(RoutingRecord, LayoutIsLeastSignificantBitFirst) {
  // E = 16, K = 2: ids {3, 5} → 3 + 5·16 = 0x53, one byte per record.
  const int32_t a[2] = {3, 5};
  auto p = routing_record_pack(a, {1, 1, 2, 16});
  ASSERT_EQ(p.size(), static_cast<size_t>(kRoutingRecordHeaderBytes + 1));
  EXPECT_EQ(0, std::memcmp(p.data(), "MRR1", 4));
  EXPECT_EQ(p[kRoutingRecordHeaderBytes], 0x53);
  // E = 6, K = 2, 6-bit records: {1, 2} → 13, {5, 5} → 35; byte 0 = 13 | (35 & 3) << 6, byte 1 = 35 >> 2.
  const int32_t b[4] = {1, 2, 5, 5};
  p = routing_record_pack(b, {1, 2, 2, 6});
  ASSERT_EQ(p.size(), static_cast<size_t>(kRoutingRecordHeaderBytes + 2));
  EXPECT_EQ(p[kRoutingRecordHeaderBytes], 13 | (3 << 6));
  EXPECT_EQ(p[kRoutingRecordHeaderBytes + 1], 35 >> 2);
}

TEST(RoutingRecord, RoundTripsSeededIds) {
  // one limb, a non-power of two, several limbs (9·log₂300 ≈ 74 bits), one expert, odd counts
  for (const RoutingRecordShape& s : {RoutingRecordShape{4, 96, 2, 16}, {3, 37, 2, 6}, {2, 25, 9, 300},
                                      {2, 5, 3, 1}, {1, 13, 3, 10}, {2, 7, 4, 65535}}) {
    SCOPED_TRACE("L " + std::to_string(s.L) + " N " + std::to_string(s.N) + " K " +
                 std::to_string(s.K) + " E " + std::to_string(s.E));
    Rng rng(rng_derive(7, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(s.E), static_cast<uint64_t>(s.K)}));
    std::vector<int32_t> ids(static_cast<size_t>(s.L) * s.N * s.K);
    for (auto& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(s.E)));
    ids[0] = s.E - 1;  // the largest digits at least once
    const auto packed = routing_record_pack(ids.data(), s);
    EXPECT_EQ(static_cast<int64_t>(packed.size()), routing_record_bytes(s));
    EXPECT_EQ(static_cast<int64_t>(packed.size()),
              kRoutingRecordHeaderBytes + (static_cast<int64_t>(s.L) * s.N * routing_record_bits(s.E, s.K) + 7) / 8);
    std::vector<int32_t> back;
    RoutingRecordShape got;
    routing_record_unpack(&back, &got, packed.data(), static_cast<int64_t>(packed.size()));
    EXPECT_EQ(got.L, s.L);
    EXPECT_EQ(got.N, s.N);
    EXPECT_EQ(got.K, s.K);
    EXPECT_EQ(got.E, s.E);
    EXPECT_EQ(back, ids);
  }
}

TEST(RoutingRecord, BenchWorkloadIsAnEighthOfInt32) {
  // 4 layers × 256·48 tokens × top-2 of 16: 8 bits per (layer, token) instead of 2·32.
  const RoutingRecordShape s{4, 256 * 48, 2, 16};
  EXPECT_EQ(routing_record_bytes(s), kRoutingRecordHeaderBytes + 4 * 256 * 48);
  EXPECT_EQ(static_cast<int64_t>(4) * 256 * 48 * 2 * 4, 8 * (routing_record_bytes(s) - kRoutingRecordHeaderBytes));
}

TEST(RoutingRecord, RejectsBadIdsAndDamagedRecords) {
  const int32_t bad[2] = {3, 16};
  EXPECT_THROW(routing_record_pack(bad, {1, 1, 2, 16}), std::invalid_argument);
  const int32_t neg[2] = {-1, 0};
  EXPECT_THROW(routing_record_pack(neg, {1, 1, 2, 16}), std::invalid_argument);
  EXPECT_THROW(routing_record_pack(neg, {1, 1, 0, 16}), std::invalid_argument);  // K = 0

  const int32_t ok[4] = {1, 2, 5, 5};
  const auto good = routing_record_pack(ok, {1, 2, 2, 6});
  std::vector<int32_t> ids;
  RoutingRecordShape s;
  auto damaged = good;
  damaged[0] = 'X';
  EXPECT_THROW(routing_record_unpack(&ids, &s, damaged.data(), static_cast<int64_t>(damaged.size())), std::invalid_argument);
  EXPECT_THROW(routing_record_unpack(&ids, &s, good.data(), static_cast<int64_t>(good.size()) - 1), std::invalid_argument);
  damaged = good;
  damaged[kRoutingRecordHeaderBytes] |= 63;  // record 0 = 63 ≥ 6² = 36
  EXPECT_THROW(routing_record_unpack(&ids, &s, damaged.data(), static_cast<int64_t>(damaged.size())), std::invalid_argument);
  damaged = good;
  damaged[4] = 9;  // version
  EXPECT_THROW(routing_record_unpack(&ids, &s, damaged.data(), static_cast<int64_t>(damaged.size())), std::invalid_argument);
}

}  // namespace
}  // namespace moerl
