// rng.h — counter-based random streams.
//
// Every random draw in moerl comes from a stream derived from (seed, stream id, coordinates):
// results never depend on call order, thread count or how work is split across ranks.
// SplitMix64 finalisers do the mixing (Steele et al., "Fast splittable pseudorandom number
// generators", 2014); the generator itself is SplitMix64 on a 64-bit counter.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/hd.h"
#include "kernels/numerics.h"

namespace moerl {

MOERL_HD uint64_t rng_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One more coordinate folded into a derived state: rng_derive(seed, stream, {c0, …, cn}) is
// rng_derive_extend(rng_derive(seed, stream, {c0, …, cn-1}), cn), so a loop over the last
// coordinate derives the shared prefix once.
MOERL_HD uint64_t rng_derive_extend(uint64_t h, uint64_t c) {
  return rng_mix64(h ^ rng_mix64(c + 0x632BE59BD9B4E019ull));
}

// Derives a stream state from a seed, a stream id and any number of coordinates.
inline uint64_t rng_derive(uint64_t seed, uint64_t stream, std::initializer_list<uint64_t> coords) {
  uint64_t h = rng_mix64(seed ^ rng_mix64(stream * 0xD1B54A32D192ED03ull));
  for (uint64_t c : coords) h = rng_derive_extend(h, c);
  return h;
}

// rng_derive(seed, stream, {c0, c1, c2}) without the initializer_list, callable on a GPU
// (kernels/hd.h): the same values.
MOERL_HD uint64_t rng_derive3(uint64_t seed, uint64_t stream, uint64_t c0, uint64_t c1,
                              uint64_t c2) {
  uint64_t h = rng_mix64(seed ^ rng_mix64(stream * 0xD1B54A32D192ED03ull));
  h = rng_mix64(h ^ rng_mix64(c0 + 0x632BE59BD9B4E019ull));
  h = rng_mix64(h ^ rng_mix64(c1 + 0x632BE59BD9B4E019ull));
  return rng_mix64(h ^ rng_mix64(c2 + 0x632BE59BD9B4E019ull));
}

inline uint64_t rng_derive(const NoiseKey& key, Stream stream) {
  return rng_derive(key.seed, static_cast<uint64_t>(stream), {key.layer, key.site, key.call});
}

// A small sequential generator seeded from a derived state.
struct Rng {
  uint64_t state;
  MOERL_HD explicit Rng(uint64_t s) : state(s) {}
  MOERL_HD uint64_t next_u64() { return rng_mix64(state++); }
  // Uniform in [0, 1) with 24 random bits (exactly representable in float).
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }
  // Uniform integer in [0, n): next_u64() % n. The small n of a shuffle's swaps (a split-K
  // order's, one a GEMM row) are constants to the compiler, so no 64-bit division runs for them.
  MOERL_HD uint64_t below(uint64_t n) {
    if (n == 0) return 0;  // no draw
    const uint64_t x = next_u64();
    switch (n) {
      case 1: return 0;
      case 2: return x % 2;
      case 3: return x % 3;
      case 4: return x % 4;
      case 5: return x % 5;
      case 6: return x % 6;
      case 7: return x % 7;
      case 8: return x % 8;
      default: return x % n;
    }
  }
  // Standard normal (Box–Muller, one value per call).
  float normal() {
    double u1 = uniform_double(), u2 = uniform_double();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // Fisher–Yates shuffle of a[0..n).
  template <class T>
  MOERL_HD void shuffle(T* a, int n) {
    for (int i = n - 1; i > 0; --i) {
      int j = static_cast<int>(below(static_cast<uint64_t>(i) + 1));
      T t = a[i]; a[i] = a[j]; a[j] = t;
    }
  }
};

}  // namespace moerl
