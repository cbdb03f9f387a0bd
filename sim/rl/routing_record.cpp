// routing_record.cpp — see routing_record.h. A record is a base-E number of K digits held in
// 32-bit limbs (least significant first); E ≤ 65535, so multiplying or dividing by E never
// overflows a 64-bit intermediate.
#include "sim/rl/routing_record.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace moerl {

namespace {

constexpr char kMagic[4] = {'M', 'R', 'R', '1'};
constexpr uint16_t kVersion = 1;

using Limbs = std::vector<uint32_t>;

void mul_add(Limbs* v, uint32_t mul, uint32_t add) {
  uint64_t carry = add;
  for (uint32_t& l : *v) {
    const uint64_t t = static_cast<uint64_t>(l) * mul + carry;
    l = static_cast<uint32_t>(t);
    carry = t >> 32;
  }
  if (carry) v->push_back(static_cast<uint32_t>(carry));
}

// *v /= div; returns the remainder.
uint32_t div_mod(Limbs* v, uint32_t div) {
  uint64_t rem = 0;
  for (size_t i = v->size(); i-- > 0;) {
    const uint64_t cur = (rem << 32) | (*v)[i];
    (*v)[i] = static_cast<uint32_t>(cur / div);
    rem = cur % div;
  }
  return static_cast<uint32_t>(rem);
}

bool is_zero(const Limbs& v) {
  for (uint32_t l : v)
    if (l) return false;
  return true;
}

void check_shape(const RoutingRecordShape& s) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("routing record: " + what);
  };
  if (s.L < 0 || s.N < 0) bad("L = " + std::to_string(s.L) + ", N = " + std::to_string(s.N) + ": must be >= 0");
  if (s.K < 1 || s.K > 65535) bad("K = " + std::to_string(s.K) + ": must be in 1..65535");
  if (s.E < 1 || s.E > 65535) bad("E = " + std::to_string(s.E) + ": must be in 1..65535");
}

void put_u16(uint8_t* p, uint32_t v) { p[0] = v & 0xFF; p[1] = (v >> 8) & 0xFF; }
void put_u32(uint8_t* p, uint32_t v) { put_u16(p, v & 0xFFFF); put_u16(p + 2, v >> 16); }
uint32_t get_u16(const uint8_t* p) { return p[0] | (static_cast<uint32_t>(p[1]) << 8); }
uint32_t get_u32(const uint8_t* p) { return get_u16(p) | (get_u16(p + 2) << 16); }

}  // namespace

int routing_record_bits(int E, int K) {
  check_shape({0, 0, K, E});
  Limbs p{1};
  for (int k = 0; k < K; ++k) mul_add(&p, static_cast<uint32_t>(E), 0);
  // bit length of E^K − 1 (E^K ≥ 1, so the subtraction borrows at most through zero limbs)
  for (uint32_t& l : p) {
    if (l--) break;
  }
  int bits = 0;
  for (size_t i = p.size(); i-- > 0;)
    if (p[i]) {
      bits = static_cast<int>(i) * 32 + (32 - __builtin_clz(p[i]));
      break;
    }
  return bits;
}

int64_t routing_record_bytes(const RoutingRecordShape& s) {
  check_shape(s);
  const int64_t bits = static_cast<int64_t>(s.L) * s.N * routing_record_bits(s.E, s.K);
  return kRoutingRecordHeaderBytes + (bits + 7) / 8;
}

std::vector<uint8_t> routing_record_pack(const int32_t* ids, const RoutingRecordShape& s) {
  const int bits = routing_record_bits(s.E, s.K);
  std::vector<uint8_t> out(static_cast<size_t>(routing_record_bytes(s)), 0);
  std::memcpy(out.data(), kMagic, 4);
  put_u16(&out[4], kVersion);
  put_u16(&out[6], static_cast<uint32_t>(bits));
  put_u32(&out[8], static_cast<uint32_t>(s.L));
  put_u32(&out[12], static_cast<uint32_t>(s.N));
  put_u16(&out[16], static_cast<uint32_t>(s.K));
  put_u16(&out[18], static_cast<uint32_t>(s.E));
  uint8_t* data = out.data() + kRoutingRecordHeaderBytes;
  const int64_t records = static_cast<int64_t>(s.L) * s.N;
  Limbs v;
  int64_t pos = 0;  // bit position of the next record
  for (int64_t r = 0; r < records; ++r) {
    const int32_t* id = ids + r * s.K;
    v.assign(1, 0);
    for (int k = s.K - 1; k >= 0; --k) {  // Horner: id_0 ends up least significant
      if (id[k] < 0 || id[k] >= s.E)
        throw std::invalid_argument("routing record: id " + std::to_string(id[k]) + " at [layer " +
                                    std::to_string(r / s.N) + ", token " + std::to_string(r % s.N) +
                                    ", slot " + std::to_string(k) + "] outside [0, " +
                                    std::to_string(s.E) + ")");
      mul_add(&v, static_cast<uint32_t>(s.E), static_cast<uint32_t>(id[k]));
    }
    for (int b = 0; b < bits; ++b, ++pos)
      if ((v[b >> 5] >> (b & 31)) & 1u) data[pos >> 3] |= static_cast<uint8_t>(1u << (pos & 7));
  }
  return out;
}

void routing_record_unpack(std::vector<int32_t>* ids, RoutingRecordShape* shape,
                           const uint8_t* data, int64_t size) {
  if (size < kRoutingRecordHeaderBytes || std::memcmp(data, kMagic, 4) != 0)
    throw std::invalid_argument("routing record: no MRR1 header");
  if (get_u16(data + 4) != kVersion)
    throw std::invalid_argument("routing record: version " + std::to_string(get_u16(data + 4)) +
                                " (this build reads version " + std::to_string(kVersion) + ")");
  RoutingRecordShape s;
  s.L = static_cast<int>(get_u32(data + 8));
  s.N = static_cast<int>(get_u32(data + 12));
  s.K = static_cast<int>(get_u16(data + 16));
  s.E = static_cast<int>(get_u16(data + 18));
  check_shape(s);
  const int bits = routing_record_bits(s.E, s.K);
  if (static_cast<int>(get_u16(data + 6)) != bits || routing_record_bytes(s) != size)
    throw std::invalid_argument("routing record: " + std::to_string(size) + " bytes with " +
                                std::to_string(get_u16(data + 6)) + " bits per record do not fit L = " +
                                std::to_string(s.L) + ", N = " + std::to_string(s.N) + ", K = " +
                                std::to_string(s.K) + ", E = " + std::to_string(s.E));
  const uint8_t* in = data + kRoutingRecordHeaderBytes;
  const int64_t records = static_cast<int64_t>(s.L) * s.N;
  ids->assign(static_cast<size_t>(records) * s.K, 0);
  Limbs v;
  int64_t pos = 0;
  for (int64_t r = 0; r < records; ++r) {
    v.assign(static_cast<size_t>(bits / 32 + 1), 0);
    for (int b = 0; b < bits; ++b, ++pos)
      if ((in[pos >> 3] >> (pos & 7)) & 1u) v[b >> 5] |= 1u << (b & 31);
    int32_t* id = ids->data() + r * s.K;
    for (int k = 0; k < s.K; ++k) id[k] = static_cast<int32_t>(div_mod(&v, static_cast<uint32_t>(s.E)));
    if (!is_zero(v))
      throw std::invalid_argument("routing record: record " + std::to_string(r) + " is not below E^K");
  }
  *shape = s;
}

std::vector<int32_t> routing_record_rows(const int32_t* ids, int L, int S, int T, int K, int P, const int32_t* len) {
  int64_t N = 0;
  for (int s = 0; s < S; ++s) N += P + len[s];
  std::vector<int32_t> out(static_cast<size_t>(L * N * K));
  int32_t* dst = out.data();
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < S; ++s) {
      const size_t n = static_cast<size_t>(P + len[s]) * K;
      std::memcpy(dst, ids + ((static_cast<size_t>(l) * S + s) * T) * K, sizeof(int32_t) * n);
      dst += n;
    }
  return out;
}

std::vector<int32_t> routing_record_unrows(const int32_t* rows, int L, int S, int T, int K, int P,
                                           const int32_t* len, int32_t fill) {
  std::vector<int32_t> out(static_cast<size_t>(L) * S * T * K, fill);
  const int32_t* src = rows;
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < S; ++s) {
      const size_t n = static_cast<size_t>(P + len[s]) * K;
      std::memcpy(out.data() + ((static_cast<size_t>(l) * S + s) * T) * K, src, sizeof(int32_t) * n);
      src += n;
    }
  return out;
}

}  // namespace moerl
