// ep_fixture.h — models, profiles and comparisons shared by the MPI tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "models/model.h"
#include "../model_configs.h"

namespace moerl::test {

// A small MoE whose expert count divides 1, 2 and 4 ranks.
inline ModelConfig ep_config() { return tiny_moe_config(8); }

inline NumericsProfile builtin_profile(const char* name) {
  NumericsProfile p;
  profile_builtin(name, &p);
  return p;
}

// FP8 operands with block scales and the limited-precision accumulator, but fixed orders,
// batch-invariant splits and lowest-index ties: low precision that is still rank-invariant.
inline NumericsProfile fp8_deterministic() {
  NumericsProfile p = builtin_profile("fp8-rollout");
  p.name = "fp8-det";
  p.gemm_order = p.attn_order = p.norm_order = p.combine_order = ReduceOrder{};
  p.batch_invariant = true;
  p.tie_break = TieBreak::lowest;
  return p;
}

inline std::vector<int32_t> seeded_tokens(int n, int vocab, uint64_t seed) {
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {11}));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return t;
}

inline std::vector<float> seeded_vector(int n, uint64_t seed) {
  Rng rng(rng_derive(seed, 999, {static_cast<uint64_t>(n)}));
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = rng.normal();
  return v;
}

// K distinct experts per row, seeded: replayed routing that no router chose.
inline std::vector<int32_t> seeded_ids(int rows, int E, int K, uint64_t seed) {
  Rng rng(rng_derive(seed, 4242, {}));
  std::vector<int32_t> ids(static_cast<size_t>(rows) * K);
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> all(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) all[static_cast<size_t>(e)] = e;
    rng.shuffle(all.data(), E);
    std::copy_n(all.begin(), K, ids.begin() + static_cast<int64_t>(r) * K);
  }
  return ids;
}

// Bit-for-bit equality of two arrays (NaN payloads and signed zeros included).
template <class T>
::testing::AssertionResult bits_equal(const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "first difference at " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}
template <class T>
::testing::AssertionResult bits_equal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  return bits_equal(a.data(), b.data(), a.size());
}

// Rows [r0, r1) of every layer of an [L, rows, K] array.
template <class T>
std::vector<T> layer_rows(const std::vector<T>& v, int L, int rows, int K, int r0, int r1) {
  std::vector<T> out;
  for (int l = 0; l < L; ++l)
    out.insert(out.end(), v.begin() + (static_cast<int64_t>(l) * rows + r0) * K,
               v.begin() + (static_cast<int64_t>(l) * rows + r1) * K);
  return out;
}

inline bool is_expert_param(const std::string& n) {
  return n.ends_with(".moe.w_gate") || n.ends_with(".moe.w_up") || n.ends_with(".moe.w_down");
}

}  // namespace moerl::test
