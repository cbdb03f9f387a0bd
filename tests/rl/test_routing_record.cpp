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

// Responses of their own length: only each sequence's own rows are recorded, and they come back
// in place; the record shrinks by the padding.
TEST(RoutingRecord, VariableLengthKeepsEachSequencesOwnRows) {
  const int L = 2, S = 3, P = 2, T = 7, K = 2, E = 8;
  const int32_t len[] = {5, 1, 3};  // responses; rows 0..P−1+len of each sequence
  std::vector<int32_t> ids(static_cast<size_t>(L) * S * T * K);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 5 + 1) % E);
  const std::vector<int32_t> rows = routing_record_rows(ids.data(), L, S, T, K, P, len);
  const int N = (P + 5) + (P + 1) + (P + 3);
  ASSERT_EQ(rows.size(), static_cast<size_t>(L) * N * K);
  // sequence 1 of layer 1 starts after layer 0's N rows and sequence 0's 7
  EXPECT_EQ(rows[(static_cast<size_t>(N) + 7) * K], ids[((1 * S + 1) * T) * K]);
  const auto packed = routing_record_pack(rows.data(), {L, N, K, E});
  EXPECT_LT(packed.size(), routing_record_pack(ids.data(), {L, S * T, K, E}).size());
  std::vector<int32_t> back;
  RoutingRecordShape shape;
  routing_record_unpack(&back, &shape, packed.data(), static_cast<int64_t>(packed.size()));
  const std::vector<int32_t> full = routing_record_unrows(back.data(), L, S, T, K, P, len, -1);
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < S; ++s)
      for (int t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k) {
          const size_t j = ((static_cast<size_t>(l) * S + s) * T + t) * K + k;
          EXPECT_EQ(full[j], t < P + len[s] ? ids[j] : -1) << l << " " << s << " " << t;
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
