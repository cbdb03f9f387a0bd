// test_precision.cpp — the emulated formats against an independent reference.
//
// The reference never calls the code under test: it decodes every bit pattern of a format
// arithmetically in double (sign·2^(e−bias)·(1 + m/2^M), subnormals m·2^(1−bias−M)), and rounds
// by binary search in that table with ties going to the even mantissa. Against it we check every
// representable value (decode, encode, round trip), every midpoint between neighbours (subnormal
// ones and the one above the largest finite value included) and a few million random floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/numerics.h"
#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

struct Spec {
  Format f;
  int E, M, bias;
  bool saturate;  // fp8_e4m3 (FN): no inf, S.1111.111 is NaN, overflow saturates
};
const Spec kSpecs[] = {{Format::bf16, 8, 7, 127, false},
                       {Format::fp16, 5, 10, 15, false},
                       {Format::fp8_e4m3, 4, 3, 7, true},
                       {Format::fp8_e5m2, 5, 2, 15, false}};

void PrintTo(const Spec& s, std::ostream* os) { *os << format_name(s.f); }

enum class Kind { finite, inf, nan };

// Independent model of one format, built from its bit layout only.
struct RefFormat {
  Spec s;
  std::vector<double> pos;        // every non-negative finite value, ascending
  std::vector<uint32_t> pattern;  // its bit pattern (LSB = mantissa parity)
  double max = 0, next_above_max = 0;

  explicit RefFormat(const Spec& sp) : s(sp) {
    const uint32_t exp_all = (1u << s.E) - 1u;
    for (uint32_t p = 0; p < (1u << (s.E + s.M)); ++p) {
      double v;
      if (kind(p, &v) != Kind::finite) continue;
      pos.push_back(v);
      pattern.push_back(p);
    }
    for (size_t i = 1; i < pos.size(); ++i) EXPECT_LT(pos[i - 1], pos[i]);
    max = pos.back();
    // The next grid point after max: one more mantissa step in max's binade.
    int e;
    std::frexp(max, &e);
    next_above_max = max + std::ldexp(1.0, e - 1 - s.M);
    (void)exp_all;
  }

  int width() const { return 1 + s.E + s.M; }

  // Decodes pattern p (sign bit included) arithmetically.
  Kind kind(uint32_t p, double* v) const {
    const uint32_t exp_all = (1u << s.E) - 1u;
    const uint32_t sign = (p >> (s.E + s.M)) & 1u;
    const uint32_t e = (p >> s.M) & exp_all;
    const uint32_t m = p & ((1u << s.M) - 1u);
    if (s.saturate) {
      if (e == exp_all && m == (1u << s.M) - 1u) return Kind::nan;
    } else if (e == exp_all) {
      *v = sign ? -INFINITY : INFINITY;
      return m ? Kind::nan : Kind::inf;
    }
    double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - s.bias - s.M)
                        : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -s.M),
                                     static_cast<int>(e) - s.bias);
    *v = sign ? -mag : mag;
    return Kind::finite;
  }

  // Round-to-nearest-even of x into the format, with the format's overflow rule.
  double round(float xf) const {
    const double x = xf;
    if (std::isnan(x)) return NAN;
    const double a = std::fabs(x);
    double r;
    if (std::isinf(a) || a > max) {
      if (s.saturate) {
        r = max;
      } else {
        // Past max the grid continues with next_above_max (even mantissa, = overflow).
        const double mid = 0.5 * (max + next_above_max);
        r = a >= mid ? INFINITY : max;
      }
    } else {
      size_t hi = std::upper_bound(pos.begin(), pos.end(), a) - pos.begin();  // pos[hi] > a
      size_t lo = hi - 1;                                                      // pos[lo] <= a
      if (pos[lo] == a || hi == pos.size()) {
        r = pos[lo];
      } else {
        const double dl = a - pos[lo], dh = pos[hi] - a;
        if (dl < dh)
          r = pos[lo];
        else if (dh < dl)
          r = pos[hi];
        else
          r = (pattern[lo] & 1u) ? pos[hi] : pos[lo];
      }
    }
    return std::signbit(x) ? -r : r;
  }
};

// Bitwise float equality with NaN == NaN.
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return bits_of(a) == bits_of(b);
}

class FormatTest : public ::testing::TestWithParam<Spec> {};

TEST_P(FormatTest, LayoutConstants) {
  const Spec s = GetParam();
  const RefFormat ref(s);
  EXPECT_EQ(format_mantissa_bits(s.f), s.M);
  EXPECT_EQ(static_cast<double>(format_max(s.f)), ref.max);
  EXPECT_EQ(static_cast<double>(format_eps(s.f)), std::ldexp(1.0, -s.M));
}

TEST_P(FormatTest, EveryPatternDecodesEncodesAndRoundTrips) {
  const Spec s = GetParam();
  const RefFormat ref(s);
  const uint32_t n = 1u << ref.width();
  int checked = 0;
  for (uint32_t p = 0; p < n; ++p) {
    double v = 0;
    const Kind k = ref.kind(p, &v);
    const float d = format_decode(p, s.f);
    if (k == Kind::nan) {
      EXPECT_TRUE(std::isnan(d)) << "pattern " << p;
      EXPECT_TRUE(std::isnan(format_decode(format_encode(d, s.f), s.f)));
      continue;
    }
    ASSERT_EQ(static_cast<double>(d), v) << format_name(s.f) << " pattern " << p;
    ASSERT_EQ(std::signbit(d), ((p >> (s.E + s.M)) & 1u) != 0) << "pattern " << p;
    ASSERT_EQ(format_encode(d, s.f), p) << format_name(s.f) << " pattern " << p;
    ASSERT_TRUE(same(round_to_format(d, s.f), d)) << format_name(s.f) << " pattern " << p;
    ++checked;
  }
  EXPECT_EQ(checked, 2 * static_cast<int>(ref.pos.size()) + (s.saturate ? 0 : 2));
}

TEST_P(FormatTest, EveryMidpointRoundsToEven) {
  const Spec s = GetParam();
  const RefFormat ref(s);
  int ties_up = 0, ties_down = 0;
  for (size_t i = 0; i + 1 < ref.pos.size(); ++i) {
    const double lo = ref.pos[i], hi = ref.pos[i + 1];
    const double mid = 0.5 * (lo + hi);
    const float mf = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(mf), mid) << "midpoint not exact in float";
    const double even = (ref.pattern[i] & 1u) ? hi : lo;
    (even == hi ? ties_up : ties_down)++;
    for (float sign : {1.0f, -1.0f}) {
      const float x = sign * mf;
      ASSERT_EQ(static_cast<double>(round_to_format(x, s.f)), sign * even)
          << format_name(s.f) << " midpoint " << mid;
      // One float step either side of the midpoint goes to the nearer neighbour.
      const float below = std::nextafter(mf, 0.0f), above = std::nextafter(mf, INFINITY);
      ASSERT_EQ(static_cast<double>(round_to_format(sign * below, s.f)), sign * lo);
      ASSERT_EQ(static_cast<double>(round_to_format(sign * above, s.f)), sign * hi);
    }
  }
  EXPECT_GT(ties_up, 0);
  EXPECT_GT(ties_down, 0);
  // The midpoint above the largest finite value: ties to the (even) next grid point, which is
  // an overflow: ±inf for IEEE formats, saturation to ±max for E4M3.
  const float mid = static_cast<float>(0.5 * (ref.max + ref.next_above_max));
  ASSERT_EQ(static_cast<double>(mid), 0.5 * (ref.max + ref.next_above_max));
  const float below = std::nextafter(mid, 0.0f);
  for (float sign : {1.0f, -1.0f}) {
    const float over = round_to_format(sign * mid, s.f);
    if (s.saturate)
      EXPECT_EQ(static_cast<double>(over), sign * ref.max);
    else
      EXPECT_EQ(over, sign * INFINITY);
    EXPECT_EQ(static_cast<double>(round_to_format(sign * below, s.f)), sign * ref.max);
    const float inf = round_to_format(sign * INFINITY, s.f);
    if (s.saturate)
      EXPECT_EQ(static_cast<double>(inf), sign * ref.max);
    else
      EXPECT_EQ(inf, sign * INFINITY);
    const float big = round_to_format(sign * FLT_MAX, s.f);
    if (s.f == Format::bf16) {  // FLT_MAX is above bf16's rounding boundary
      EXPECT_EQ(big, sign * INFINITY);
    }
  }
  EXPECT_TRUE(std::isnan(round_to_format(NAN, s.f)));
  EXPECT_TRUE(std::isnan(round_to_format(-NAN, s.f)));
  // Half the smallest subnormal ties to zero (even), signed.
  const float half_min = static_cast<float>(0.5 * ref.pos[1]);
  EXPECT_EQ(bits_of(round_to_format(half_min, s.f)), 0u);
  EXPECT_EQ(bits_of(round_to_format(-half_min, s.f)), 0x80000000u);
}

// Random floats: uniform bit patterns (mostly far outside fp8's range) and values spread over
// the format's own range; the scalar and the vectorised (round_array) paths are both checked.
TEST_P(FormatTest, RandomFloatsRoundToNearest) {
  const Spec s = GetParam();
  const RefFormat ref(s);
  Rng rng(rng_derive(1, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(s.f)}));
  const int n = 2'000'003;  // odd: exercises the tail of round_array
  std::vector<float> x(n);
  int emin = 1 - s.bias, emax = static_cast<int>(std::log2(ref.max));
  for (int i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      x[i] = float_of(static_cast<uint32_t>(rng.next_u64()));
    } else {
      const int e = emin - s.M - 3 + static_cast<int>(rng.below(emax - emin + s.M + 6));
      const float m = 1.0f + rng.uniform();
      x[i] = std::ldexp(m, e) * (rng.below(2) ? -1.0f : 1.0f);
    }
  }
  std::vector<float> y = x;
  round_array(y.data(), n, s.f);
  for (int i = 0; i < n; ++i) {
    const float r = round_to_format(x[i], s.f);
    const double want = ref.round(x[i]);
    ASSERT_TRUE(same(r, static_cast<float>(want)))
        << format_name(s.f) << " x=" << x[i] << " got " << r << " want " << want;
    ASSERT_TRUE(same(y[i], r)) << "round_array differs at x=" << x[i];
    if (!std::isnan(r)) {
      ASSERT_EQ(format_decode(format_encode(x[i], s.f), s.f), r);
    }
  }
}

// The vector path of round_array against the scalar round_to_format over a sweep of all float
// patterns (every 61st, both signs, NaN and inf included).
TEST_P(FormatTest, RoundArrayMatchesScalarOverPatternSweep) {
  const Spec s = GetParam();
  std::vector<float> x;
  x.reserve(1 << 20);
  for (uint64_t p = 0; p < (1ull << 32); p += 61 * 67) x.push_back(float_of(static_cast<uint32_t>(p)));
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f})
    x.push_back(v);
  std::vector<float> y = x;
  round_array(y.data(), static_cast<int64_t>(y.size()), s.f);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_TRUE(same(y[i], round_to_format(x[i], s.f))) << "x bits " << bits_of(x[i]);
}

INSTANTIATE_TEST_SUITE_P(Formats, FormatTest, ::testing::ValuesIn(kSpecs),
                         [](const ::testing::TestParamInfo<Spec>& i) {
                           return std::string(format_name(i.param.f));
                         });

TEST(Precision, Fp32IsIdentity) {
  for (float v : {0.0f, -0.0f, 1.0f / 3.0f, FLT_MAX, 1e-45f, -INFINITY}) {
    EXPECT_TRUE(same(round_to_format(v, Format::fp32), v));
    EXPECT_EQ(format_encode(v, Format::fp32), bits_of(v));
    EXPECT_TRUE(same(format_decode(bits_of(v), Format::fp32), v));
  }
  std::vector<float> x = {1.1f, 2.2f, 3.3f};
  round_array(x.data(), 3, Format::fp32);
  EXPECT_EQ(x[1], 2.2f);
}

// ---- round_to_bits ------------------------------------------------------------------------------

// Reference: x rounded to a multiple of 2^(max(e, −126) − bits), ties to even, in double.
float ref_round_to_bits(float x, int bits) {
  if (!std::isfinite(x) || x == 0.0f || bits >= 23) return x;
  int e;
  std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e−1), 2^e)
  const int ulp_exp = std::max(e - 1, -126) - bits;
  const double q = std::nearbyint(std::ldexp(static_cast<double>(x), -ulp_exp));  // ties-to-even
  return static_cast<float>(std::ldexp(q, ulp_exp));
}

TEST(Precision, RoundToBitsMatchesReference) {
  Rng rng(rng_derive(2, static_cast<uint64_t>(Stream::data), {}));
  for (int bits : {1, 2, 4, 7, 10, 13, 22, 23}) {  // (0 bits has no even mantissa to tie to)
    for (int i = 0; i < 200000; ++i) {
      float x;
      if (i % 3 == 0)
        x = float_of(static_cast<uint32_t>(rng.next_u64()));
      else
        x = std::ldexp(1.0f + rng.uniform(), static_cast<int>(rng.below(40)) - 20) *
            (i % 2 ? -1.0f : 1.0f);
      if (i % 7 == 0) {  // exact ties: a value with bit (23 − bits − 1) set and nothing below
        const uint32_t s = 23 - std::min(bits, 22);
        x = float_of((bits_of(x) & ~((1u << s) - 1u)) | (1u << (s - 1)));
      }
      ASSERT_TRUE(same(round_to_bits(x, bits), ref_round_to_bits(x, bits)))
          << "bits " << bits << " x " << x;
    }
  }
  EXPECT_TRUE(std::isnan(round_to_bits(NAN, 5)));
  EXPECT_EQ(round_to_bits(INFINITY, 5), INFINITY);
  EXPECT_EQ(round_to_bits(FLT_MAX, 5), INFINITY);  // IEEE-like overflow of the carry
  EXPECT_EQ(round_to_bits(1.0f + 0x1p-23f, 22), 1.0f);          // tie → even (1.0)
  EXPECT_EQ(round_to_bits(1.0f + 3 * 0x1p-23f, 22), 1.0f + 0x1p-21f);  // tie → even (up)
}

// ---- quantize_matrix -----------------------------------------------------------------------------

struct QCase {
  Format f;
  Scaling s;
  int br, bc;
};

TEST(Precision, QuantizeMatrixGroupsScalesAndValues) {
  const int rows = 37, cols = 200;
  Rng rng(rng_derive(3, static_cast<uint64_t>(Stream::data), {}));
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = rng.normal() * 3.0f;
  // A zero group for block 16×64: rows 16..31, cols 64..127; and a zero row (row 36).
  for (int i = 16; i < 32; ++i)
    for (int j = 64; j < 128; ++j) x[i * cols + j] = 0.0f;
  for (int j = 0; j < cols; ++j) x[36 * cols + j] = 0.0f;
  x[5 * cols + 7] = 1000.0f;  // an outlier that sets the tensor scale

  const QCase cases[] = {{Format::fp8_e4m3, Scaling::tensor, 0, 0}, {Format::fp8_e4m3, Scaling::row, 0, 0},
                         {Format::fp8_e4m3, Scaling::block, 16, 64}, {Format::fp8_e5m2, Scaling::block, 1, 128},
                         {Format::fp16, Scaling::row, 0, 0},        {Format::bf16, Scaling::block, 7, 33}};
  for (const QCase& c : cases) {
    SCOPED_TRACE(std::string(format_name(c.f)) + " " + scaling_name(c.s));
    const RefFormat ref(*std::find_if(std::begin(kSpecs), std::end(kSpecs),
                                      [&](const Spec& s) { return s.f == c.f; }));
    int br = c.br, bc = c.bc;
    if (c.s == Scaling::tensor) br = rows, bc = cols;
    if (c.s == Scaling::row) br = 1, bc = cols;
    const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    ASSERT_EQ(quantize_group_count(rows, cols, c.s, c.br, c.bc), gr * gc);
    std::vector<float> out(x.size()), scales(gr * gc, -1.0f);
    ASSERT_EQ(quantize_matrix(out.data(), scales.data(), x.data(), rows, cols, c.f, c.s, c.br, c.bc),
              gr * gc);
    int zero_groups = 0;
    for (int bi = 0; bi < gr; ++bi) {
      for (int bj = 0; bj < gc; ++bj) {
        float amax = 0.0f;
        for (int i = bi * br; i < std::min(rows, (bi + 1) * br); ++i)
          for (int j = bj * bc; j < std::min(cols, (bj + 1) * bc); ++j)
            amax = std::max(amax, std::fabs(x[i * cols + j]));
        const float want = amax == 0.0f ? 1.0f : amax / format_max(c.f);
        zero_groups += amax == 0.0f;
        const float scale = scales[bi * gc + bj];
        ASSERT_EQ(scale, want) << "group " << bi << "," << bj;
        for (int i = bi * br; i < std::min(rows, (bi + 1) * br); ++i) {
          for (int j = bj * bc; j < std::min(cols, (bj + 1) * bc); ++j) {
            const float q = static_cast<float>(ref.round(x[i * cols + j] / scale));
            ASSERT_TRUE(std::isfinite(q));
            ASSERT_LE(std::fabs(q), format_max(c.f));  // amax maps to format_max: no overflow
            ASSERT_TRUE(same(out[i * cols + j], q * scale)) << i << "," << j;
            // out / scale is back on the format's grid (the product q·scale is one rounding
            // away, so dividing again lands on q, or within one float ulp of it).
            const float back = out[i * cols + j] / scale;
            ASSERT_LE(std::fabs(back - q), std::fabs(q) * 0x1p-23f) << i << "," << j;
          }
        }
      }
    }
    if (c.s == Scaling::block && c.br == 16) {
      EXPECT_GE(zero_groups, 1);
    }
    if (c.s == Scaling::row) {
      EXPECT_EQ(zero_groups, 1);
    }
    // In place (out aliases x) gives the same values.
    std::vector<float> inplace = x;
    quantize_matrix(inplace.data(), nullptr, inplace.data(), rows, cols, c.f, c.s, c.br, c.bc);
    ASSERT_EQ(0, std::memcmp(inplace.data(), out.data(), sizeof(float) * out.size()));
  }
}

TEST(Precision, QuantizeMatrixUnscaledAndFp32) {
  const int rows = 5, cols = 9;
  Rng rng(rng_derive(4, static_cast<uint64_t>(Stream::data), {}));
  std::vector<float> x(rows * cols), out(rows * cols);
  for (auto& v : x) v = rng.normal();
  EXPECT_EQ(quantize_group_count(rows, cols, Scaling::none, 4, 4), 0);
  EXPECT_EQ(quantize_matrix(out.data(), nullptr, x.data(), rows, cols, Format::bf16, Scaling::none, 4, 4), 0);
  for (int i = 0; i < rows * cols; ++i) ASSERT_EQ(out[i], round_to_format(x[i], Format::bf16));
  std::vector<float> scales(4, 0.0f);
  EXPECT_EQ(quantize_matrix(out.data(), scales.data(), x.data(), rows, cols, Format::fp32, Scaling::block, 4, 8), 4);
  for (float s : scales) EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(0, std::memcmp(out.data(), x.data(), sizeof(float) * x.size()));
  EXPECT_EQ(quantize_group_count(0, 7, Scaling::tensor, 1, 1), 0);
}

}  // namespace
}  // namespace moerl
