// test_gemm_hd.cpp — the CUDA linear layer's per-element and index arithmetic
// (kernels/cuda/hd/gemm_hd.h) run on the CPU, against the CPU backend's own code:
//  * scales: group amax by the kernels' order-free key max, scale = amax / format_max — bit for
//    bit quantize_matrix's scales for every format and scaling (tensor, row, 1×B, B×B), with
//    zero groups, NaN, inf and subnormal inputs;
//  * element codes and fake-quantised values: the CUDA conversions (host implementations of the
//    same intrinsics) give format_encode's bits and quantize_matrix's values, including
//    saturation (E4M3), overflow to inf (E5M2, fp16) and subnormals;
//  * the padded K layout (16-aligned K-blocks) and the split-K chunk bounds;
//  * the split-K combine order: the same permutation as cpu::gemm_chunk_order for every kind;
//  * the combine and epilogue arithmetic (one rounding per operation, no leading zero).
#include <gtest/gtest.h>

#if MOERL_HAVE_CUDA  // the CUDA headers (cuda_fp8.h & co.) come with the toolkit

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/linear.h"
#include "kernels/cuda/hd/gemm_hd.h"
#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

using namespace moerl::cuda;

const Format kQuantFormats[] = {Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2};

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
// Equal bits, or both NaN.
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b); }

// Values over a wide dynamic range with the awkward ones mixed in: whole zero rows, NaN, ±inf,
// FP32 subnormals, huge values.
std::vector<float> awkward_matrix(int rows, int cols, uint64_t seed) {
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(rows), static_cast<uint64_t>(cols)}));
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (auto& v : x) v = rng.normal() * std::ldexp(1.0f, static_cast<int>(rng.below(40)) - 20);
  if (rows > 2)
    for (int j = 0; j < cols; ++j) x[static_cast<size_t>(cols) + j] = 0.0f;  // row 1: all zero
  if (rows > 3) {
    x[static_cast<size_t>(2) * cols] = std::numeric_limits<float>::quiet_NaN();
    x[static_cast<size_t>(3) * cols + cols / 2] = 1e-42f;  // FP32 subnormal
  }
  if (rows > 4) x[static_cast<size_t>(4) * cols + cols - 1] = 3e38f;
  if (rows > 5) x[static_cast<size_t>(5) * cols] = -std::numeric_limits<float>::infinity();
  return x;
}

// The scales the device computes: amax_kernel's key max over each group's extent, then scale_kernel.
std::vector<float> hd_scales(const std::vector<float>& x, const GemmGroups& g, Format f) {
  std::vector<float> s(gemm_group_count(g));
  for (int grp = 0; grp < gemm_group_count(g); ++grp) {
    int i0, i1, j0, j1;
    gemm_group_extent(g, grp, &i0, &i1, &j0, &j1);
    uint32_t m = 0;
    for (int i = i0; i < i1; ++i)
      for (int j = j0; j < j1; ++j) m = std::max(m, gemm_amax_key(x[static_cast<size_t>(i) * g.cols + j]));
    s[grp] = gemm_scale_from_amax(hd_bits_float(m), f);
  }
  return s;
}

TEST(GemmHd, FormatMaxIsTheCpus) {
  for (int i = 0; i < kFormatCount; ++i) {
    const Format f = static_cast<Format>(i);
    EXPECT_EQ(bits(gemm_fmt_max(f)), bits(format_max(f))) << format_name(f);
  }
}

// Activations (1×B blocks) and weights (B×B blocks), shapes that are and are not multiples of B.
TEST(GemmHd, ScalesAndValuesBitIdenticalToQuantizeMatrix) {
  struct Shape {
    int rows, cols, block;
  };
  const Shape shapes[] = {{7, 33, 16}, {40, 256, 128}, {130, 300, 128}, {5, 8, 32}};
  const Scaling scalings[] = {Scaling::none, Scaling::tensor, Scaling::row, Scaling::block};
  for (const Shape& sh : shapes)
    for (Format f : kQuantFormats)
      for (Scaling s : scalings)
        for (int weight = 0; weight < 2; ++weight) {
          const int br = weight ? sh.block : 1, bc = sh.block;
          const auto x = awkward_matrix(sh.rows, sh.cols, 11 + weight);
          const int groups = quantize_group_count(sh.rows, sh.cols, s, br, bc);
          std::vector<float> want_q(x.size()), want_s(std::max(groups, 1));
          ASSERT_EQ(quantize_matrix(want_q.data(), want_s.data(), x.data(), sh.rows, sh.cols, f, s, br, bc),
                    groups);
          const GemmGroups g = gemm_groups(sh.rows, sh.cols, s, br, bc);
          ASSERT_EQ(gemm_group_count(g), groups);
          const auto got_s = hd_scales(x, g, f);
          for (int k = 0; k < groups; ++k)
            ASSERT_EQ(bits(got_s[k]), bits(want_s[k]))
                << format_name(f) << " " << scaling_name(s) << " group " << k << " weight " << weight;
          for (int i = 0; i < sh.rows; ++i)
            for (int j = 0; j < sh.cols; ++j) {
              const size_t at = static_cast<size_t>(i) * sh.cols + j;
              const float scale = groups ? got_s[gemm_group_of(g, i, j)] : 1.0f;
              ASSERT_TRUE(same(gemm_fake_quant(x[at], scale, f), want_q[at]))
                  << format_name(f) << " " << scaling_name(s) << " (" << i << "," << j << ") x=" << x[at]
                  << " got " << gemm_fake_quant(x[at], scale, f) << " want " << want_q[at];
            }
        }
}

// Every group's extent is inside the matrix, and together they cover each element exactly once,
// in the group that gemm_group_of names.
TEST(GemmHd, GroupExtentsPartitionTheMatrix) {
  for (Scaling s : {Scaling::tensor, Scaling::row, Scaling::block}) {
    const int rows = 37, cols = 70;
    const GemmGroups g = gemm_groups(rows, cols, s, 16, 16);
    std::vector<int> owner(rows * cols, -1);
    for (int grp = 0; grp < gemm_group_count(g); ++grp) {
      int i0, i1, j0, j1;
      gemm_group_extent(g, grp, &i0, &i1, &j0, &j1);
      for (int i = i0; i < i1; ++i)
        for (int j = j0; j < j1; ++j) {
          ASSERT_EQ(owner[i * cols + j], -1) << scaling_name(s);
          owner[i * cols + j] = grp;
        }
    }
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) ASSERT_EQ(owner[i * cols + j], gemm_group_of(g, i, j)) << scaling_name(s);
  }
}

// Codes are format_encode's bits, values round_to_format's, on every code's value, the midpoints
// between neighbours (ties to even), one FP32 ulp either side, and random values of all magnitudes.
TEST(GemmHd, CodesMatchTheEmulation) {
  for (Format f : kQuantFormats) {
    std::vector<float> xs;
    const uint32_t ncodes = gemm_code_bytes(f) == 1 ? 256u : 65536u;
    const uint32_t step = ncodes == 256u ? 1u : 7u;  // 16-bit formats: every 7th code
    for (uint32_t c = 0; c < ncodes; c += step) {
      const float v = format_decode(c, f), w = format_decode(c + 1, f);
      if (std::isnan(v)) continue;
      xs.push_back(v);
      xs.push_back(std::nextafter(v, 0.0f));
      xs.push_back(std::nextafter(v, std::copysign(INFINITY, v)));
      if (!std::isnan(w) && std::isfinite(v) && std::isfinite(w)) {
        const float mid = static_cast<float>((static_cast<double>(v) + w) / 2);
        xs.push_back(mid);
        xs.push_back(std::nextafter(mid, 0.0f));
        xs.push_back(std::nextafter(mid, INFINITY));
      }
    }
    Rng rng(rng_derive(3, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(f)}));
    for (int i = 0; i < 20000; ++i) xs.push_back(rng.normal() * std::ldexp(1.0f, static_cast<int>(rng.below(80)) - 40));
    xs.push_back(1e30f);
    xs.push_back(-1e30f);
    xs.push_back(INFINITY);
    xs.push_back(1e-42f);
    for (float x : xs) {
      const uint32_t code = gemm_quant_code(x, 1.0f, f);
      ASSERT_EQ(code, format_encode(x, f)) << format_name(f) << " x=" << x;
      ASSERT_TRUE(same(gemm_code_value(code, f), round_to_format(x, f))) << format_name(f) << " x=" << x;
    }
    EXPECT_TRUE(std::isnan(gemm_code_value(gemm_quant_code(NAN, 1.0f, f), f))) << format_name(f);
  }
}

// Padded K layout: injective, inside the row, each K-block starting on a 16-element boundary,
// padded length a multiple of 16.
TEST(GemmHd, PaddedKLayout) {
  for (int K : {1, 15, 16, 17, 100, 128, 300, 1024})
    for (int kblock : {K, 16, 100, 128}) {
      const GemmKLayout L = gemm_k_layout(K, kblock, kGemmAlign);
      ASSERT_EQ(L.kp % kGemmAlign, 0);
      ASSERT_EQ(L.bp % kGemmAlign, 0);
      ASSERT_GE(L.kp, K);
      ASSERT_LT(L.bp - std::min(L.kblock, K), kGemmAlign);
      std::set<int64_t> seen;
      for (int k = 0; k < K; ++k) {
        const int64_t p = gemm_padded_col(L, k);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, L.kp);
        ASSERT_TRUE(seen.insert(p).second) << "K=" << K << " kblock=" << kblock << " k=" << k;
        if (k % L.kblock == 0) {
          ASSERT_EQ(p % kGemmAlign, 0);
        }
      }
      ASSERT_EQ(L.nkb, (K + L.kblock - 1) / L.kblock);
    }
}

// The CPU's bounds; the aligned bounds: from 0 to kp, non-decreasing, multiples of 16, within 16
// below the CPU's; block chunks: every K-block in exactly one chunk.
TEST(GemmHd, SplitKBounds) {
  for (int K : {16, 33, 100, 256, 1000})
    for (int S : {1, 2, 3, 4, 7, 16}) {
      const GemmKLayout L = gemm_k_layout(K, K, kGemmAlign);
      EXPECT_EQ(gemm_chunk_bound(0, S, K), 0);
      EXPECT_EQ(gemm_chunk_bound(S, S, K), K);
      EXPECT_EQ(gemm_chunk_bound_aligned(0, S, K, L.kp, kGemmAlign), 0);
      EXPECT_EQ(gemm_chunk_bound_aligned(S, S, K, L.kp, kGemmAlign), L.kp);
      for (int c = 0; c < S; ++c) {
        EXPECT_EQ(gemm_chunk_bound(c, S, K), static_cast<int>(static_cast<int64_t>(c) * K / S));
        const int a = gemm_chunk_bound_aligned(c, S, K, L.kp, kGemmAlign);
        const int b = gemm_chunk_bound_aligned(c + 1, S, K, L.kp, kGemmAlign);
        EXPECT_EQ(a % kGemmAlign, 0);
        EXPECT_LE(a, b);
        EXPECT_LE(a, gemm_chunk_bound(c, S, K));
        EXPECT_GT(a + kGemmAlign, gemm_chunk_bound(c, S, K));
      }
      const int nkb = (K + 15) / 16;
      const int S_eff = std::min(S, nkb);
      int covered = 0;
      for (int c = 0; c < S_eff; ++c) {
        const int b0 = gemm_chunk_first_block(c, S_eff, nkb), b1 = gemm_chunk_first_block(c + 1, S_eff, nkb);
        EXPECT_EQ(b0, covered);
        EXPECT_GT(b1, b0) << "no empty chunk once S is clamped to the block count";
        covered = b1;
      }
      EXPECT_EQ(covered, nkb);
    }
}

// The device's combine order is the CPU's: same permutation for every kind, split, key and row.
TEST(GemmHd, ChunkOrderIsTheCpus) {
  const OrderKind kinds[] = {OrderKind::fixed, OrderKind::reversed, OrderKind::split_k};
  for (OrderKind kind : kinds)
    for (int split : {1, 2, 3, 4, 8, 64, 256})
      for (uint64_t seed : {0ull, 7ull, 0xDEADBEEFull})
        for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}}) {
          cpu::GemmReduce red;
          red.split = split;
          red.kind = kind;
          red.key.seed = seed;
          red.key.layer = 3;
          red.key.site = 2;
          red.key.call = 17 + static_cast<uint64_t>(m % 3);
          std::vector<int> want(split), got(split);
          cpu::gemm_chunk_order(want.data(), red, m);
          gemm_chunk_order_hd(got.data(), split, kind, red.key.seed, red.key.layer, red.key.site,
                              red.key.call, m);
          ASSERT_EQ(got, want) << "kind " << static_cast<int>(kind) << " split " << split << " m " << m;
        }
}

// Left to right in the given order with one rounding per add, and no leading zero (−0 stays −0).
TEST(GemmHd, CombineAndEpilogueArithmetic) {
  const float parts[4] = {1.0f, 1e8f, -1e8f, 3.0f};  // order-sensitive: 1 is absorbed by 1e8
  const int fwd[4] = {0, 1, 2, 3}, other[4] = {1, 2, 0, 3};
  EXPECT_EQ(gemm_combine_ordered(parts, 1, fwd, 4), ((1.0f + 1e8f) + -1e8f) + 3.0f);
  EXPECT_EQ(gemm_combine_ordered(parts, 1, other, 4), 4.0f);
  const float zeros[2] = {-0.0f, -0.0f};
  const int two[2] = {0, 1};
  EXPECT_TRUE(std::signbit(gemm_combine_ordered(zeros, 1, two, 2)));
  // stride: parts [S][M·N] read at one element
  const float strided[6] = {1, 9, 2, 9, 4, 9};
  const int three[3] = {2, 0, 1};
  EXPECT_EQ(gemm_combine_ordered(strided, 2, three, 3), 7.0f);
  // acc·sa·sw rounds after each multiply, the smaller scale first (no spurious overflow)
  const float acc = 1.0f + std::ldexp(1.0f, -23), sa = 3.0f, sw = 1.0f / 3.0f;
  EXPECT_EQ(bits(gemm_apply_scales(acc, sa, sw)), bits((acc * sw) * sa));
  EXPECT_EQ(bits(gemm_apply_scales(acc, sw, sa)), bits((acc * sw) * sa));
  EXPECT_EQ(gemm_apply_scales(448.0f * 448.0f * 128.0f, 3e38f / 448.0f, 1e-3f / 448.0f),
            (448.0f * 448.0f * 128.0f * (1e-3f / 448.0f)) * (3e38f / 448.0f));
  EXPECT_TRUE(std::isfinite(gemm_apply_scales(448.0f * 448.0f * 128.0f, 3e38f / 448.0f, 1e-3f / 448.0f)));
  // scale lookup: row scales by row, block scales by (row block, K-block), null → 1
  const GemmGroups g = gemm_groups(40, 300, Scaling::block, 16, 128);
  std::vector<float> s(gemm_group_count(g));
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i);
  EXPECT_EQ(gemm_scale_at(s.data(), g, 17, 2, 128), static_cast<float>(1 * g.gc + 2));
  EXPECT_EQ(gemm_scale_at(nullptr, g, 17, 2, 128), 1.0f);
}

// The pieces composed as gemm.cu composes them on the device — codes in the padded K layout, one
// product per K-block, the epilogue's scales per (row, K-block), the blocks summed in K order — give
// the CPU's linear_forward up to the summation order: a check of the index arithmetic end to end.
// (Products summed in double here, so the only differences are the CPU's FP32 rounding:
// tol = (K + 4)·2^-23·Σ|a'||w'|.)
TEST(GemmHd, ComposedLowPrecisionForwardMatchesCpu) {
  struct Sc {
    Format f;
    Scaling act, w;
    int block;
  };
  const Sc cases[] = {{Format::fp8_e4m3, Scaling::block, Scaling::block, 128},
                      {Format::fp8_e4m3, Scaling::row, Scaling::tensor, 128},
                      {Format::fp8_e4m3, Scaling::tensor, Scaling::block, 32},
                      {Format::fp8_e5m2, Scaling::block, Scaling::row, 16},
                      {Format::fp16, Scaling::none, Scaling::none, 128}};
  const int M = 5, N = 20, K = 300;
  for (const Sc& c : cases) {
    LinearNumerics nm;
    nm.format = c.f;
    nm.act_scaling = c.act;
    nm.weight_scaling = c.w;
    nm.scale_block = c.block;
    const auto x = awkward_matrix(M, K, 21);
    std::vector<float> w(static_cast<size_t>(N) * K);
    Rng rng(rng_derive(22, static_cast<uint64_t>(Stream::data), {}));
    for (auto& v : w) v = rng.normal() * 0.05f;
    std::vector<float> xc = x;  // the CPU's operands: NaN/inf rows would poison the comparison
    for (auto& v : xc)  // (and unscaled fp16 would overflow on 3e38)
      if (!std::isfinite(v) || (c.act == Scaling::none && std::fabs(v) > 1e4f)) v = 1.0f;
    PackedWeight pw;
    linear_pack_weight(&pw, w.data(), N, K, nm);
    std::vector<float> want(static_cast<size_t>(M) * N);
    linear_forward(want.data(), xc.data(), pw, M, nm);

    const bool blocked = c.act == Scaling::block || c.w == Scaling::block;
    const GemmKLayout L = gemm_k_layout(K, blocked ? c.block : K, kGemmAlign);
    const GemmGroups xg = gemm_groups(M, K, c.act, 1, c.block), wg = gemm_groups(N, K, c.w, c.block, c.block);
    const auto xs = hd_scales(xc, xg, c.f), ws = hd_scales(w, wg, c.f);
    std::vector<uint32_t> xq(static_cast<size_t>(M) * L.kp, 0), wq(static_cast<size_t>(N) * L.kp, 0);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < K; ++j)
        xq[i * L.kp + gemm_padded_col(L, j)] =
            gemm_quant_code(xc[i * K + j], xs.empty() ? 1.0f : xs[gemm_group_of(xg, i, j)], c.f);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < K; ++j)
        wq[i * L.kp + gemm_padded_col(L, j)] =
            gemm_quant_code(w[i * K + j], ws.empty() ? 1.0f : ws[gemm_group_of(wg, i, j)], c.f);
    std::vector<float> xd(x.size()), wd(w.size());  // the CPU's quantised operands, for the bound
    quantize_matrix(xd.data(), nullptr, xc.data(), M, K, c.f, c.act, 1, c.block);
    quantize_matrix(wd.data(), nullptr, w.data(), N, K, c.f, c.w, c.block, c.block);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float out = 0.0f;
        for (int kb = 0; kb < L.nkb; ++kb) {
          double piece = 0.0;
          for (int p = kb * L.bp; p < (kb + 1) * L.bp; ++p)
            piece += static_cast<double>(gemm_code_value(xq[m * L.kp + p], c.f)) * gemm_code_value(wq[n * L.kp + p], c.f);
          const float v = gemm_apply_scales(static_cast<float>(piece),
                                            gemm_scale_at(xs.empty() ? nullptr : xs.data(), xg, m, kb, L.kblock),
                                            gemm_scale_at(ws.empty() ? nullptr : ws.data(), wg, n, kb, L.kblock));
          out = kb == 0 ? v : out + v;
        }
        double absprod = 0.0;
        for (int k = 0; k < K; ++k) absprod += std::fabs(static_cast<double>(xd[m * K + k]) * wd[n * K + k]);
        ASSERT_NEAR(out, want[m * N + n], (K + 4) * std::ldexp(1.0, -23) * absprod + 1e-30)
            << format_name(c.f) << " act " << scaling_name(c.act) << " w " << scaling_name(c.w) << " (" << m
            << "," << n << ")";
      }
  }
}

// Scales from extreme amax values: zero, inf and values whose quotient underflows give 1.
TEST(GemmHd, ScaleEdgeCases) {
  for (Format f : kQuantFormats) {
    EXPECT_EQ(gemm_scale_from_amax(0.0f, f), 1.0f);
    EXPECT_EQ(gemm_scale_from_amax(INFINITY, f), 1.0f);
    EXPECT_EQ(gemm_scale_from_amax(1e-45f, f), 1.0f) << format_name(f);  // quotient rounds to 0
    EXPECT_EQ(bits(gemm_scale_from_amax(448.0f, f)), bits(448.0f / format_max(f)));
  }
  EXPECT_EQ(gemm_amax_key(NAN), 0u);
  EXPECT_EQ(gemm_amax_key(-2.0f), bits(2.0f));
  EXPECT_GT(gemm_amax_key(INFINITY), gemm_amax_key(3e38f));
}

}  // namespace
}  // namespace moerl

#endif  // MOERL_HAVE_CUDA
