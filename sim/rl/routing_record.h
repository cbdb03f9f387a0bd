// routing_record.h — the R3 routing record (the rollout's top-k expert ids that the train engine
// replays), bit-packed for storage and transfer.
//
// The ids of one (layer, token) — K ids in [0, E), in slot order — are one number in base E,
//   v = id_0 + id_1·E + id_2·E² + … + id_{K−1}·E^{K−1}  <  E^K,
// written in bits = ⌈K·log₂E⌉ bits (the smallest b with 2^b ≥ E^K; exact integer arithmetic, no
// floating-point log), so nothing is wasted when E is not a power of two: E = 16, K = 2 → 8 bits,
// E = 6, K = 2 → 6 bits, E = 10, K = 3 → 10 bits (three 4-bit fields would take 12). Records
// follow each other with no padding, least significant bit first, in the order of the int32
// array [L, N, K] they come from (layer-major, then token).
//
// Layout: a 24-byte header, little-endian —
//   magic "MRR1" (4 bytes) | version u16 = 1 | bits u16 | L u32 | N u32 | K u16 | E u16 | reserved u32 = 0
// — then ⌈L·N·bits / 8⌉ bytes of records. Not a substitute for the HDF5 results: the format in
// which a routing record travels between engines or is kept per step compactly.
#pragma once

#include <cstdint>
#include <vector>

namespace moerl {

struct RoutingRecordShape {
  int L = 0;  // layers
  int N = 0;  // tokens per layer
  int K = 0;  // ids per token (top-k)
  int E = 0;  // experts (ids are in [0, E))
};

inline constexpr int kRoutingRecordHeaderBytes = 24;

// ⌈K·log₂E⌉: bits of one (layer, token) record. E in 1..65535, K in 1..65535 (E = 1 → 0 bits).
int routing_record_bits(int E, int K);
// Header plus packed records, in bytes.
int64_t routing_record_bytes(const RoutingRecordShape& s);

// ids[L, N, K] → the packed record. Throws std::invalid_argument naming the first id outside
// [0, E) or a shape outside the header's ranges.
std::vector<uint8_t> routing_record_pack(const int32_t* ids, const RoutingRecordShape& s);
// The inverse: fills *shape and ids [L, N, K]. Throws std::invalid_argument on a bad magic,
// version or size, or a record ≥ E^K.
void routing_record_unpack(std::vector<int32_t>* ids, RoutingRecordShape* shape,
                           const uint8_t* data, int64_t size);

// Responses of their own length: a record keeps each sequence's own positions only, its prompt
// and its response up to its EOS — rows 0..P−1+len[s] of sequence s, in sequence order — and not
// the padding past a response's end, so N = Σ_s (P + len[s]) rather than S·T.
// ids [L, S·T, K] (the rollout's layout) → [L, N, K].
std::vector<int32_t> routing_record_rows(const int32_t* ids, int L, int S, int T, int K, int P, const int32_t* len);
// The inverse: [L, N, K] → [L, S·T, K], the padding rows filled with `fill` (the train engine
// replays them on positions that score nothing).
std::vector<int32_t> routing_record_unrows(const int32_t* rows, int L, int S, int T, int K, int P,
                                           const int32_t* len, int32_t fill = 0);

}  // namespace moerl
