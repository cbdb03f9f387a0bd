// test_linear.cpp — the linear layer (linear.h, cpu/gemm.cpp) against ref::matmul_forward /
// ref::matmul_backward and against a scalar emulation, written here, of the documented reduction
// (chunks, direction, seeded per-row chunk order, limited-precision accumulator).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include <tbb/global_control.h>

#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/ref/ops.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {n}));
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

int count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& w, int M, int N,
                           int K, const LinearNumerics& nm) {
  PackedWeight pw;
  linear_pack_weight(&pw, w.data(), N, K, nm);
  std::vector<float> y(static_cast<size_t>(M) * N, NAN);
  linear_forward(y.data(), x.data(), pw, M, nm);
  return y;
}

std::vector<float> ref_forward(const std::vector<float>& x, const std::vector<float>& w, int M,
                               int N, int K) {
  std::vector<float> y(static_cast<size_t>(M) * N);
  ref::matmul_forward(y.data(), x.data(), w.data(), M, N, K);
  return y;
}

// Scalar emulation of one output's reduction as documented in kernels/cpu/gemm.h.
float emulate_dot(const float* x, const float* w, int K, int split, OrderKind kind, int accum_bits,
                  int promote_every, const NoiseKey& key, int64_t row) {
  std::vector<float> partial(split);
  for (int c = 0; c < split; ++c) {
    const int k0 = static_cast<int>(int64_t{c} * K / split), k1 = static_cast<int>(int64_t{c + 1} * K / split);
    std::vector<int> ks;
    for (int k = k0; k < k1; ++k) ks.push_back(k);
    if (kind == OrderKind::reversed) std::reverse(ks.begin(), ks.end());
    float acc = 0.0f;
    if (accum_bits == 0) {
      for (int k : ks) acc = std::fma(x[k], w[k], acc);
    } else {
      for (size_t t0 = 0; t0 < ks.size(); t0 += promote_every) {
        float p = 0.0f;
        for (size_t t = t0; t < std::min(ks.size(), t0 + promote_every); ++t)
          p = round_to_bits(std::fma(x[ks[t]], w[ks[t]], p), accum_bits);
        acc = acc + p;
      }
    }
    partial[c] = acc;
  }
  if (split == 1) return partial[0];
  std::vector<int> order(split);
  for (int i = 0; i < split; ++i) order[i] = kind == OrderKind::reversed ? split - 1 - i : i;
  if (kind == OrderKind::split_k) {
    Rng rng(rng_derive(key.seed, static_cast<uint64_t>(Stream::gemm_order),
                       {key.layer, key.site, key.call, static_cast<uint64_t>(row)}));
    rng.shuffle(order.data(), split);
  }
  float sum = partial[order[0]];
  for (int j = 1; j < split; ++j) sum = sum + partial[order[j]];
  return sum;
}

// The whole forward emulated: quantised operands (quantize_matrix, tested in test_precision),
// then emulate_dot per output with the call's effective split.
std::vector<float> emulate_forward(const std::vector<float>& x, const std::vector<float>& w, int M,
                                   int N, int K, const LinearNumerics& nm) {
  std::vector<float> xq(x.size()), wq(w.size());
  quantize_matrix(xq.data(), nullptr, x.data(), M, K, nm.format, nm.act_scaling, 1, nm.scale_block);
  quantize_matrix(wq.data(), nullptr, w.data(), N, K, nm.format, nm.weight_scaling, nm.scale_block,
                  nm.scale_block);
  const int split = reduce_effective_split(nm.reduce, M, K);
  std::vector<float> y(static_cast<size_t>(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      y[static_cast<size_t>(m) * N + n] =
          emulate_dot(&xq[static_cast<size_t>(m) * K], &wq[static_cast<size_t>(n) * K], K, split,
                      nm.reduce.order.kind, nm.accum_bits, nm.promote_every, nm.reduce.key, m);
  return y;
}

// Any summation order of K products is within γ_K·Σ|x_k·w_k| of the exact sum (Higham,
// "Accuracy and Stability of Numerical Algorithms", §3.1; γ_K ≈ K·eps/2), and so is the fixed
// order: their difference is within K·eps(fp32)·Σ|x_k·w_k|. The scale is Σ|x·w|, not |ref|,
// because cancellation can make |ref| arbitrarily small.
void expect_within_reassociation(const std::vector<float>& y, const std::vector<float>& x,
                                 const std::vector<float>& w, int M, int N, int K) {
  const std::vector<float> ref = ref_forward(x, w, M, N, K);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double mag = 0;
      for (int k = 0; k < K; ++k)
        mag += std::fabs(static_cast<double>(x[static_cast<size_t>(m) * K + k]) * w[static_cast<size_t>(n) * K + k]);
      const double tol = K * static_cast<double>(format_eps(Format::fp32)) * mag;
      ASSERT_LE(std::fabs(static_cast<double>(y[static_cast<size_t>(m) * N + n]) - ref[static_cast<size_t>(m) * N + n]), tol)
          << "m " << m << " n " << n;
    }
  }
}

const int kSizes[] = {1, 3, 7, 17, 33, 100, 129};

TEST(Linear, ExactPathIsBitIdenticalToReference) {
  const LinearNumerics nm;
  for (int M : kSizes)
    for (int N : kSizes)
      for (int K : kSizes) {
        const auto x = randn(static_cast<size_t>(M) * K, 1), w = randn(static_cast<size_t>(N) * K, 2);
        ASSERT_TRUE(bits_equal(forward(x, w, M, N, K, nm), ref_forward(x, w, M, N, K)))
            << "M " << M << " N " << N << " K " << K;
      }
}

// Rows computed alone, in a small call at another tile alignment, or in a 1000-row call give the
// same bits; and the thread count does not matter.
TEST(Linear, ExactPathIsBatchAndThreadInvariant) {
  const int M = 1000, N = 75, K = 129;
  const auto x = randn(static_cast<size_t>(M) * K, 3), w = randn(static_cast<size_t>(N) * K, 4);
  const LinearNumerics nm;
  PackedWeight pw;
  linear_pack_weight(&pw, w.data(), N, K, nm);
  std::vector<float> big(static_cast<size_t>(M) * N);
  linear_forward(big.data(), x.data(), pw, M, nm);
  for (int m : {0, 1, 5, 6, 7, 500, 999}) {
    std::vector<float> one(N);
    linear_forward(one.data(), &x[static_cast<size_t>(m) * K], pw, 1, nm);
    ASSERT_EQ(0, std::memcmp(one.data(), &big[static_cast<size_t>(m) * N], sizeof(float) * N)) << m;
  }
  std::vector<float> tail(13 * N);
  linear_forward(tail.data(), &x[987 * K], pw, 13, nm);
  ASSERT_EQ(0, std::memcmp(tail.data(), &big[987 * N], sizeof(float) * tail.size()));
  std::vector<float> t1(big.size()), t2(big.size());
  {
    tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
    linear_forward(t1.data(), x.data(), pw, M, nm);
  }
  {
    tbb::global_control two_threads(tbb::global_control::max_allowed_parallelism, 2);
    linear_forward(t2.data(), x.data(), pw, M, nm);
  }
  EXPECT_TRUE(bits_equal(t1, big));
  EXPECT_TRUE(bits_equal(t2, big));
}

TEST(Linear, ReversedAndSplitKMatchEmulationAndStayNearReference) {
  const int M = 40, N = 37, K = 300;
  const auto x = randn(static_cast<size_t>(M) * K, 5), w = randn(static_cast<size_t>(N) * K, 6);
  const auto ref = ref_forward(x, w, M, N, K);
  for (const char* order : {"reversed", "split_k:2", "split_k:3", "split_k:7", "split_k:64"}) {
    SCOPED_TRACE(order);
    LinearNumerics nm;
    ASSERT_TRUE(reduce_order_parse(order, &nm.reduce.order));
    nm.reduce.key = NoiseKey{11, 2, 3, 400};
    const auto y = forward(x, w, M, N, K, nm);
    ASSERT_TRUE(bits_equal(y, emulate_forward(x, w, M, N, K, nm)));
    expect_within_reassociation(y, x, w, M, N, K);
    EXPECT_GT(count_bit_differences(y, ref), 0) << "order had no effect";
  }
}

TEST(Linear, SplitKDrawsAreSeededPerKey) {
  const int M = 64, N = 40, K = 256;
  const auto x = randn(static_cast<size_t>(M) * K, 7), w = randn(static_cast<size_t>(N) * K, 8);
  LinearNumerics nm;
  nm.reduce.order = {OrderKind::split_k, 8};
  nm.reduce.key = NoiseKey{1, 0, 0, 0};
  const auto a = forward(x, w, M, N, K, nm);
  EXPECT_TRUE(bits_equal(a, forward(x, w, M, N, K, nm)));  // same key, same bits
  for (NoiseKey k : {NoiseKey{2, 0, 0, 0}, NoiseKey{1, 1, 0, 0}, NoiseKey{1, 0, 1, 0}, NoiseKey{1, 0, 0, 1}}) {
    LinearNumerics other = nm;
    other.reduce.key = k;
    EXPECT_GT(count_bit_differences(a, forward(x, w, M, N, K, other)), 0);
  }
  // Under split_k with batch invariance a row's draws depend on its index in the call, not on M.
  PackedWeight pw;
  linear_pack_weight(&pw, w.data(), N, K, nm);
  std::vector<float> first(N);
  linear_forward(first.data(), x.data(), pw, 1, nm);
  EXPECT_EQ(0, std::memcmp(first.data(), a.data(), sizeof(float) * N));
  // Thread count does not change the drawn orders.
  std::vector<float> t1(a.size());
  {
    tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
    linear_forward(t1.data(), x.data(), pw, M, nm);
  }
  EXPECT_TRUE(bits_equal(t1, a));
}

// The split-K orders' draws: Rng::below(n) is the next draw modulo n for every n (its small n run
// as constant divisors) and draws nothing for n = 0; a row's stream derived from the call's prefix
// (rng_derive_extend, gemm_chunk_orders) is rng_derive with the row as its last coordinate.
TEST(Linear, SplitKDrawsAreTheDocumentedStream) {
  for (uint64_t n = 0; n < 70; ++n)
    for (uint64_t s : {uint64_t{1}, uint64_t{0x9E3779B97F4A7C15ull}, ~uint64_t{0}}) {
      Rng a(s);
      const uint64_t got = a.below(n);
      EXPECT_EQ(got, n ? rng_mix64(s) % n : 0) << n;
      EXPECT_EQ(a.state, n ? s + 1 : s) << n;
    }
  const NoiseKey key{5, 2, 3, 91};
  const uint64_t prefix = rng_derive(key.seed, static_cast<uint64_t>(Stream::gemm_order), {key.layer, key.site, key.call});
  for (uint64_t m : {uint64_t{0}, uint64_t{7}, uint64_t{1} << 40})
    EXPECT_EQ(rng_derive_extend(prefix, m),
              rng_derive(key.seed, static_cast<uint64_t>(Stream::gemm_order), {key.layer, key.site, key.call, m}));
}

TEST(Linear, BatchVariantSplitFollowsM) {
  const int M = 600, N = 48, K = 256;
  const auto x = randn(static_cast<size_t>(M) * K, 9), w = randn(static_cast<size_t>(N) * K, 10);
  for (bool invariant : {true, false}) {
    LinearNumerics nm;
    nm.reduce.batch_invariant = invariant;
    PackedWeight pw;
    linear_pack_weight(&pw, w.data(), N, K, nm);
    std::vector<float> big(static_cast<size_t>(M) * N), small(static_cast<size_t>(8) * N);
    linear_forward(big.data(), x.data(), pw, M, nm);
    linear_forward(small.data(), x.data(), pw, 8, nm);  // decode-sized call: 4 chunks if variant
    const std::vector<float> big_head(big.begin(), big.begin() + small.size());
    if (invariant) {
      EXPECT_TRUE(bits_equal(small, big_head));
    } else {
      EXPECT_GT(count_bit_differences(small, big_head), 0);
      // M = 600 ≥ 512 keeps one chunk: the reference order.
      EXPECT_TRUE(bits_equal(big, ref_forward(x, w, M, N, K)));
      const std::vector<float> xs(x.begin(), x.begin() + 8 * K);
      EXPECT_TRUE(bits_equal(small, emulate_forward(xs, w, 8, N, K, nm)));
      // split_k:64 × 4 for a decode-sized call: 256 chunks of one product each.
      nm.reduce.order = {OrderKind::split_k, 64};
      ASSERT_EQ(reduce_effective_split(nm.reduce, 8, K), 256);
      linear_forward(small.data(), x.data(), pw, 8, nm);
      EXPECT_TRUE(bits_equal(small, emulate_forward(xs, w, 8, N, K, nm)));
    }
  }
}

// Quantised operands with FP32 accumulation in the fixed order: exactly the reference on the
// pre-quantised operands (the kernel runs the same chains on the same floats).
TEST(Linear, QuantisedPathsEqualReferenceOnQuantisedOperands) {
  struct Case {
    Format f;
    Scaling act, wt;
    int block;
  };
  const Case cases[] = {{Format::bf16, Scaling::none, Scaling::none, 128},
                        {Format::fp16, Scaling::none, Scaling::none, 128},
                        {Format::fp8_e4m3, Scaling::tensor, Scaling::tensor, 128},
                        {Format::fp8_e4m3, Scaling::row, Scaling::row, 128},
                        {Format::fp8_e4m3, Scaling::block, Scaling::block, 128},
                        {Format::fp8_e4m3, Scaling::block, Scaling::block, 32},
                        {Format::fp8_e5m2, Scaling::block, Scaling::tensor, 16}};
  const int M = 77, N = 50, K = 200;
  const auto x = randn(static_cast<size_t>(M) * K, 11, 4.0f), w = randn(static_cast<size_t>(N) * K, 12, 0.05f);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(format_name(c.f)) + " " + scaling_name(c.act) + "/" + scaling_name(c.wt) +
                 " B=" + std::to_string(c.block));
    LinearNumerics nm;
    nm.format = c.f;
    nm.act_scaling = c.act;
    nm.weight_scaling = c.wt;
    nm.scale_block = c.block;
    std::vector<float> xq(x.size()), wq(w.size());
    quantize_matrix(xq.data(), nullptr, x.data(), M, K, c.f, c.act, 1, c.block);
    quantize_matrix(wq.data(), nullptr, w.data(), N, K, c.f, c.wt, c.block, c.block);
    const auto y = forward(x, w, M, N, K, nm);
    ASSERT_TRUE(bits_equal(y, ref_forward(xq, wq, M, N, K)));
    EXPECT_GT(count_bit_differences(y, ref_forward(x, w, M, N, K)), 0) << "quantisation had no effect";
  }
}

TEST(Linear, LimitedAccumulatorMatchesScalarEmulation) {
  const int M = 23, N = 35, K = 300;
  const auto x = randn(static_cast<size_t>(M) * K, 13, 2.0f), w = randn(static_cast<size_t>(N) * K, 14, 0.1f);
  for (int bits : {4, 13, 23}) {
    for (int promote : {1, 7, 128, 1000}) {
      for (const char* order : {"fixed", "reversed", "split_k:3"}) {
        SCOPED_TRACE(std::to_string(bits) + " bits, promote " + std::to_string(promote) + ", " + order);
        LinearNumerics nm;
        nm.format = Format::fp8_e4m3;
        nm.act_scaling = Scaling::block;
        nm.weight_scaling = Scaling::block;
        nm.accum_bits = bits;
        nm.promote_every = promote;
        ASSERT_TRUE(reduce_order_parse(order, &nm.reduce.order));
        nm.reduce.key = NoiseKey{5, 1, 2, 3};
        const auto y = forward(x, w, M, N, K, nm);
        ASSERT_TRUE(bits_equal(y, emulate_forward(x, w, M, N, K, nm)));
        if (bits == 4) {
          LinearNumerics fp32acc = nm;
          fp32acc.accum_bits = 0;
          EXPECT_GT(count_bit_differences(y, forward(x, w, M, N, K, fp32acc)), 0);
        }
      }
    }
  }
}

// The limited accumulator's fast path rounds with Veltkamp's splitting (cpu/gemm.cpp): for every
// fraction width it must equal round_to_bits, ties (to even) and carries into the next binade
// included, over the exponents the GEMM admits to that path.
TEST(Linear, VeltkampSplittingIsRoundToBits) {
  Rng rng(rng_derive(3, static_cast<uint64_t>(Stream::data), {0x5E17}));
  for (int bits = 1; bits <= 22; ++bits) {
    const int s = 23 - bits;
    const float C = static_cast<float>((1u << s) + 1u);
    for (int i = 0; i < 20000; ++i) {
      uint32_t u = static_cast<uint32_t>(rng.next_u64());
      u = (u & 0x807FFFFFu) | ((27u + static_cast<uint32_t>(rng.below(200))) << 23);  // 2^-100..2^100
      const uint32_t low = (1u << s) - 1u;
      if (i % 4 == 0) u = (u & ~low) | (1u << (s - 1));  // a tie
      if (i % 4 == 1) u |= low;                           // rounds up, may carry into the exponent
      float q;
      std::memcpy(&q, &u, 4);
      const float g = q * C;
      const float hi = g + (q - g);
      const float want = round_to_bits(q, bits);
      ASSERT_EQ(0, std::memcmp(&hi, &want, 4)) << "bits " << bits << " q " << q;
    }
  }
}

// Operands far from 1 leave the Veltkamp path (a product could be subnormal, or C·q overflow) for
// the integer rounding; both give the emulation's bits, whichever rows take which path.
TEST(Linear, LimitedAccumulatorMatchesEmulationOverWideRanges) {
  const int M = 30, N = 40, K = 200;
  // Veltkamp; too small (fallback); large but safe (Veltkamp); C·q could overflow (fallback); mixed
  for (const auto& [lo, hi] : {std::array<int, 2>{-10, 10}, {-75, -30}, {35, 60}, {50, 70}, {-60, 40}}) {
    SCOPED_TRACE("exponents " + std::to_string(lo) + ".." + std::to_string(hi));
    Rng rng(rng_derive(11, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(lo + 100)}));
    auto draw = [&](size_t n, int e0, int e1) {
      std::vector<float> v(n);
      for (float& x : v) x = std::ldexp(rng.normal(), e0 + static_cast<int>(rng.below(static_cast<uint64_t>(e1 - e0 + 1))));
      return v;
    };
    // the first 12 rows (one tile) in a benign range, the rest in [lo, hi]
    auto x = draw(static_cast<size_t>(M) * K, lo, hi);
    const auto x0 = draw(static_cast<size_t>(12) * K, -3, 3);
    std::copy(x0.begin(), x0.end(), x.begin());
    const auto w = draw(static_cast<size_t>(N) * K, lo / 2, hi / 2);
    for (int bits : {5, 13}) {
      for (const char* order : {"fixed", "reversed", "split_k:3"}) {
        LinearNumerics nm;
        nm.format = Format::bf16;
        nm.accum_bits = bits;
        nm.promote_every = 64;
        ASSERT_TRUE(reduce_order_parse(order, &nm.reduce.order));
        nm.reduce.key = NoiseKey{2, 3, 4, 5};
        ASSERT_TRUE(bits_equal(forward(x, w, M, N, K, nm), emulate_forward(x, w, M, N, K, nm)))
            << bits << " bits, " << order;
      }
    }
  }
}

// NaN operands take the NaN-safe limited kernel; a NaN whose payload would carry into the sign
// bit under the integer rounding (0x7FFFFFFF) must still come out as NaN.
TEST(Linear, LimitedAccumulatorPropagatesNaN) {
  const int M = 13, N = 20, K = 64;
  auto x = randn(static_cast<size_t>(M) * K, 29), w = randn(static_cast<size_t>(N) * K, 30);
  float nan;
  const uint32_t payload = 0x7FFFFFFFu;
  std::memcpy(&nan, &payload, 4);
  x[7 * K + 3] = nan;   // row 7
  w[11 * K + 40] = nan;  // column 11
  LinearNumerics nm;
  nm.format = Format::bf16;
  nm.accum_bits = 7;
  nm.promote_every = 16;
  const auto y = forward(x, w, M, N, K, nm);
  const auto want = emulate_forward(x, w, M, N, K, nm);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const float a = y[m * N + n], b = want[m * N + n];
      ASSERT_EQ(std::isnan(a), m == 7 || n == 11) << m << "," << n;
      ASSERT_EQ(std::isnan(a), std::isnan(b));
      if (!std::isnan(b)) {
        ASSERT_EQ(0, std::memcmp(&a, &b, 4)) << m << "," << n;
      }
    }
}

// The fp8-rollout recipe end to end (split_k:4, batch-variant, 13-bit accumulator, 128 blocks).
TEST(Linear, RolloutRecipeMatchesEmulationAndIsThreadInvariant) {
  const int M = 70, N = 64, K = 256;
  const auto x = randn(static_cast<size_t>(M) * K, 15), w = randn(static_cast<size_t>(N) * K, 16, 0.1f);
  LinearNumerics nm;
  nm.format = Format::fp8_e4m3;
  nm.act_scaling = Scaling::block;
  nm.weight_scaling = Scaling::block;
  nm.accum_bits = 13;
  nm.reduce.order = {OrderKind::split_k, 4};
  nm.reduce.batch_invariant = false;
  nm.reduce.key = NoiseKey{9, 3, 1, 17};
  const auto y = forward(x, w, M, N, K, nm);
  ASSERT_TRUE(bits_equal(y, emulate_forward(x, w, M, N, K, nm)));
  std::vector<float> t1;
  {
    tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
    t1 = forward(x, w, M, N, K, nm);
  }
  EXPECT_TRUE(bits_equal(t1, y));
}

TEST(Linear, EdgeCasesAndErrors) {
  LinearNumerics nm;
  PackedWeight pw;
  std::vector<float> w(6, 1.0f);
  linear_pack_weight(&pw, w.data(), 3, 0, nm);  // K = 0: outputs are empty sums
  std::vector<float> y(6, NAN), x(2, 1.0f);
  linear_forward(y.data(), x.data(), pw, 2, nm);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  linear_pack_weight(&pw, w.data(), 3, 2, nm);
  linear_forward(nullptr, nullptr, pw, 0, nm);  // M = 0: nothing happens
  LinearNumerics bf = nm;
  bf.format = Format::bf16;
  EXPECT_THROW(linear_forward(y.data(), x.data(), pw, 1, bf), std::invalid_argument);
}

// The backward runs the reference's chains (cpu/gemm_backward.h): bit-identical to
// ref::matmul_backward for ragged shapes, for chains longer than one cache block (M = 700 >
// 256 steps of dweight's chain) and for a small call that skips the parallel region.
TEST(Linear, BackwardIsBitIdenticalToReferenceAndAccumulates) {
  for (const auto& [M, N, K] : {std::array<int, 3>{130, 33, 70}, {700, 17, 45}, {5, 3, 7}, {64, 256, 128}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    const auto dout = randn(static_cast<size_t>(M) * N, 17), x = randn(static_cast<size_t>(M) * K, 18),
               w = randn(static_cast<size_t>(N) * K, 19);
    const auto dinp0 = randn(static_cast<size_t>(M) * K, 20), dw0 = randn(static_cast<size_t>(N) * K, 21);
    auto dinp = dinp0, dw = dw0, rdinp = dinp0, rdw = dw0;
    linear_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), M, N, K);
    ref::matmul_backward(rdinp.data(), rdw.data(), dout.data(), x.data(), w.data(), M, N, K);
    ASSERT_TRUE(bits_equal(dinp, rdinp));
    ASSERT_TRUE(bits_equal(dw, rdw));
    EXPECT_FALSE(bits_equal(dw, dw0));
    // Null gradients are skipped; the other one is unchanged by the skip.
    auto only_dw = dw0;
    linear_backward(nullptr, only_dw.data(), dout.data(), x.data(), w.data(), M, N, K);
    EXPECT_TRUE(bits_equal(only_dw, dw));
    auto only_dinp = dinp0;
    linear_backward(only_dinp.data(), nullptr, dout.data(), x.data(), w.data(), M, N, K);
    EXPECT_TRUE(bits_equal(only_dinp, dinp));
    // One thread gives the same bits.
    auto t1_dinp = dinp0, t1_dw = dw0;
    {
      tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
      linear_backward(t1_dinp.data(), t1_dw.data(), dout.data(), x.data(), w.data(), M, N, K);
    }
    EXPECT_TRUE(bits_equal(t1_dinp, dinp));
    EXPECT_TRUE(bits_equal(t1_dw, dw));
  }
}

TEST(Linear, GroupedForwardEqualsPerExpertCalls) {
  const int E = 6, N = 40, K = 96;
  const int offsets[E + 1] = {0, 0, 13, 14, 84, 84, 150};  // empty experts included
  const int rows = offsets[E];
  const auto x = randn(static_cast<size_t>(rows) * K, 22);
  const auto w = randn(static_cast<size_t>(E) * N * K, 23, 0.2f);
  LinearNumerics exact;
  LinearNumerics rollout;
  rollout.format = Format::fp8_e4m3;
  rollout.act_scaling = Scaling::tensor;  // per expert call
  rollout.weight_scaling = Scaling::block;
  rollout.scale_block = 32;
  rollout.accum_bits = 13;
  rollout.promote_every = 32;
  rollout.reduce.order = {OrderKind::split_k, 3};
  rollout.reduce.batch_invariant = false;
  rollout.reduce.key = NoiseKey{4, 1, 5, 1000};
  LinearNumerics blocked = rollout;  // activations quantised inside the GEMM, per row tile
  blocked.act_scaling = Scaling::block;
  blocked.reduce.order = {OrderKind::fixed, 1};
  blocked.accum_bits = 0;
  for (const LinearNumerics& nm : {exact, rollout, blocked}) {
    std::vector<PackedWeight> pw(E);
    for (int e = 0; e < E; ++e) linear_pack_weight(&pw[e], &w[static_cast<size_t>(e) * N * K], N, K, nm);
    std::vector<float> y(static_cast<size_t>(rows) * N, NAN), want(y.size(), NAN);
    linear_forward_grouped(y.data(), x.data(), pw.data(), offsets, E, nm);
    for (int e = 0; e < E; ++e) {
      LinearNumerics ne = nm;
      ne.reduce.key.call += e;
      linear_forward(&want[static_cast<size_t>(offsets[e]) * N], &x[static_cast<size_t>(offsets[e]) * K],
                     pw[e], offsets[e + 1] - offsets[e], ne);
    }
    EXPECT_TRUE(bits_equal(y, want));
    std::vector<float> t1(y.size());
    {
      tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
      linear_forward_grouped(t1.data(), x.data(), pw.data(), offsets, E, nm);
    }
    EXPECT_TRUE(bits_equal(t1, y));
  }
}

// The experts' gate and up projections with their SwiGLU as one op: each projection the grouped
// forward's bits, each rounding round_to_format's and the SwiGLU the reference's, element by element.
TEST(Linear, SwigluGroupedIsTheProjectionsRoundingsAndSwiglu) {
  const int E = 4, F = 24, D = 40;
  const int offsets[E + 1] = {0, 7, 7, 30, 33};
  const int rows = offsets[E];
  const auto x = randn(static_cast<size_t>(rows) * D, 24);
  const auto wg = randn(static_cast<size_t>(E) * F * D, 25, 0.2f), wu = randn(wg.size(), 26, 0.2f);
  LinearNumerics nm;
  nm.format = Format::bf16;
  for (const Format act : {Format::fp32, Format::bf16}) {
    std::vector<PackedWeight> pg(E), pu(E);
    for (int e = 0; e < E; ++e) {
      linear_pack_weight(&pg[e], &wg[static_cast<size_t>(e) * F * D], F, D, nm);
      linear_pack_weight(&pu[e], &wu[static_cast<size_t>(e) * F * D], F, D, nm);
    }
    const size_t n = static_cast<size_t>(rows) * F;
    std::vector<float> a(n, NAN), g(n, NAN), u(n, NAN), wantg(n), wantu(n);
    linear_swiglu_grouped(a.data(), g.data(), u.data(), x.data(), pg.data(), pu.data(), offsets, E, rows, nm, nm, act);
    linear_forward_grouped(wantg.data(), x.data(), pg.data(), offsets, E, nm);
    linear_forward_grouped(wantu.data(), x.data(), pu.data(), offsets, E, nm);
    for (size_t i = 0; i < n; ++i) {
      wantg[i] = round_to_format(wantg[i], act);
      wantu[i] = round_to_format(wantu[i], act);
    }
    std::vector<float> wanta(n);
    ref::swiglu_forward(wanta.data(), wantg.data(), wantu.data(), rows, F);
    for (float& v : wanta) v = round_to_format(v, act);
    EXPECT_TRUE(bits_equal(g, wantg)) << format_name(act);
    EXPECT_TRUE(bits_equal(u, wantu)) << format_name(act);
    EXPECT_TRUE(bits_equal(a, wanta)) << format_name(act);
  }
}

// Its backward through the down projection and the SwiGLU as one op: the grouped backward's dinp
// (into zeros) and dweight, then the reference SwiGLU backward ('+=' into nonzero dg, du).
TEST(Linear, BackwardSwigluGroupedIsTheDownBackwardAndSwiglu) {
  const int E = 3, F = 16, D = 24;
  const int offsets[E + 1] = {0, 9, 9, 20};
  const int rows = offsets[E];
  const size_t n = static_cast<size_t>(rows) * F;
  const auto dy = randn(static_cast<size_t>(rows) * D, 27), a = randn(n, 28), g = randn(n, 29), u = randn(n, 30);
  const auto w = randn(static_cast<size_t>(E) * D * F, 31, 0.2f), dw0 = randn(w.size(), 32);
  const auto dg0 = randn(n, 33), du0 = randn(n, 34);
  std::vector<float> dg = dg0, du = du0, dw = dw0;
  linear_backward_swiglu_grouped(dg.data(), du.data(), dw.data(), dy.data(), a.data(), g.data(), u.data(), w.data(),
                                 offsets, E, rows, D, F);
  std::vector<float> da(n, 0.0f), wdg = dg0, wdu = du0, wdw = dw0;
  linear_backward_grouped(da.data(), wdw.data(), dy.data(), a.data(), w.data(), offsets, E, D, F);
  ref::swiglu_backward(wdg.data(), wdu.data(), da.data(), g.data(), u.data(), rows, F);
  EXPECT_TRUE(bits_equal(dg, wdg));
  EXPECT_TRUE(bits_equal(du, wdu));
  EXPECT_TRUE(bits_equal(dw, wdw));
  EXPECT_FALSE(bits_equal(dg, dg0));
}

TEST(Linear, GroupedBackwardEqualsPerExpertCalls) {
  const int E = 4, N = 24, K = 40;
  const int offsets[E + 1] = {0, 300, 300, 301, 900};  // chains of 599 steps: > 1 cache block
  const int rows = offsets[E];
  const auto dout = randn(static_cast<size_t>(rows) * N, 24), x = randn(static_cast<size_t>(rows) * K, 25);
  const auto w = randn(static_cast<size_t>(E) * N * K, 26);
  const auto dinp0 = randn(static_cast<size_t>(rows) * K, 27), dw0 = randn(static_cast<size_t>(E) * N * K, 28);
  auto dinp = dinp0, dw = dw0, want_dinp = dinp0, want_dw = dw0;
  linear_backward_grouped(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), offsets, E, N, K);
  for (int e = 0; e < E; ++e) {
    const size_t o = offsets[e];
    linear_backward(&want_dinp[o * K], &want_dw[static_cast<size_t>(e) * N * K], &dout[o * N], &x[o * K],
                    &w[static_cast<size_t>(e) * N * K], offsets[e + 1] - offsets[e], N, K);
  }
  EXPECT_TRUE(bits_equal(dinp, want_dinp));
  EXPECT_TRUE(bits_equal(dw, want_dw));
  EXPECT_FALSE(bits_equal(dw, dw0));
  auto t1_dinp = dinp0, t1_dw = dw0;
  {
    tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
    linear_backward_grouped(t1_dinp.data(), t1_dw.data(), dout.data(), x.data(), w.data(), offsets, E, N, K);
  }
  EXPECT_TRUE(bits_equal(t1_dinp, dinp));
  EXPECT_TRUE(bits_equal(t1_dw, dw));
  // An empty expert's weight gradient is untouched.
  EXPECT_EQ(0, std::memcmp(&dw[1 * N * K], &dw0[1 * N * K], sizeof(float) * N * K));
}

TEST(Linear, BlasNameAndMeasurement) {
  EXPECT_EQ(std::string(blas_kernel_name()).rfind("OpenBLAS ", 0), 0u);
  EXPECT_GT(gemm_measure_gflops(64, 0.005, false), 0.0);
  EXPECT_GT(gemm_measure_gflops(64, 0.005, true), 0.0);
}

}  // namespace
}  // namespace moerl
