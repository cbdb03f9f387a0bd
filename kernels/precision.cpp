// precision.cpp — rounding into the emulated formats by integer manipulation of the float's bits.
//
// A target format with M fraction bits and minimum normal exponent emin is a subset of FP32 (all
// our formats have M < 23 and an exponent range inside FP32's, except bf16 whose range equals
// FP32's). Rounding x therefore means:
//  * |x| ≥ 2^emin: round the 23-bit fraction to M bits, to nearest even, by adding
//    (half − 1 + lsb) and clearing the low 23 − M bits; a carry ripples into the exponent, which
//    is exactly the rounding up to the next binade;
//  * |x| < 2^emin (the target's subnormals): the spacing is the fixed quantum 2^(emin − M); the
//    significand with its implicit bit is shifted right by the (per-element) distance to that
//    quantum with the same round-to-nearest-even trick, and the integer count of quanta is scaled
//    back by an exact power of two;
//  * overflow: fp8_e4m3 saturates to ±448 (inf included); bf16/fp16/fp8_e5m2 give ±inf when the
//    rounded magnitude exceeds the largest finite value (IEEE round-to-nearest overflow);
//  * NaN stays NaN (quieted, sign kept).
// round_to_format runs these steps on one value; round_array and the scaled quantisation run a
// transcription of the very same integer steps over Google Highway's vectors (the compiler does not
// reliably if-convert the scalar form), compiled for every target of kernels/simd_config.h and
// dispatched at run time; the portable target ("scalar") runs the scalar form.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_PRECISION_ONCE_
#define MOERL_KERNELS_PRECISION_ONCE_

#include "kernels/precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace moerl::precision_detail {

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Compile-time description of a target format: fraction bits, FP32-biased exponent of its minimum
// normal, FP32 bit pattern of its largest finite value, saturating overflow or not.
template <int M, int EminB, uint32_t MaxBits, bool Saturate>
struct Fmt {
  static constexpr int kM = M;
  static constexpr int kEminB = EminB;
  static constexpr uint32_t kMaxBits = MaxBits;
  static constexpr bool kSaturate = Saturate;
};
using Bf16 = Fmt<7, 1, 0x7F7F0000u, false>;      // emin −126
using Fp16 = Fmt<10, 113, 0x477FE000u, false>;   // emin −14, max 65504
using E4m3 = Fmt<3, 121, 0x43E00000u, true>;     // emin −6, max 448
using E5m2 = Fmt<2, 113, 0x47600000u, false>;    // emin −14, max 57344

template <class F>
inline uint32_t round_bits(uint32_t u) {
  constexpr int s = 23 - F::kM;
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normal range: round the fraction at bit s.
  uint32_t r = (a + ((1u << (s - 1)) - 1u) + ((a >> s) & 1u)) & ~((1u << s) - 1u);
  if constexpr (F::kEminB > 1) {
    // Target subnormal range: count quanta of 2^(emin − M). FP32 subnormals (e = 0) have no
    // implicit bit and the exponent of e = 1.
    const int e = static_cast<int>(a >> 23);
    const uint32_t mant = (a & 0x7FFFFFu) | (static_cast<uint32_t>(e != 0) << 23);
    // > s in the subnormal range; clamped only to keep the shifts defined elsewhere.
    const int sh = std::min(std::max(s + F::kEminB - std::max(e, 1), 1), 31);
    const uint32_t q = (mant + ((1u << (sh - 1)) - 1u) + ((mant >> sh) & 1u)) >> sh;
    // q·2^(emin − M) is exact: q ≤ 2^M and the result is a normal FP32 number (or zero).
    constexpr float quantum =
        static_cast<float>(1.0 / static_cast<double>(1ull << (127 - F::kEminB + F::kM)));
    const uint32_t sub = bits_of(static_cast<float>(static_cast<int32_t>(q)) * quantum);
    r = a < (static_cast<uint32_t>(F::kEminB) << 23) ? sub : r;
  }
  if constexpr (F::kSaturate) {
    r = r > F::kMaxBits ? F::kMaxBits : r;  // inf included
  } else {
    r = r > F::kMaxBits ? 0x7F800000u : r;
  }
  r = a > 0x7F800000u ? (a | 0x00400000u) : r;  // NaN: quiet, keep payload
  return sign | r;
}

template <class F>
inline float round_one(float x) {
  return float_of(round_bits<F>(bits_of(x)));
}


struct Layout {
  int E, M, bias;
};
Layout layout_of(Format f) {
  switch (f) {
    case Format::bf16: return {8, 7, 127};
    case Format::fp16: return {5, 10, 15};
    case Format::fp8_e4m3: return {4, 3, 7};
    case Format::fp8_e5m2: return {5, 2, 15};
    case Format::fp32: break;
  }
  return {8, 23, 127};
}

// Group geometry of quantize_matrix: group of (i, j) = (i / br) * ceil(cols / bc) + j / bc.
bool group_dims(int rows, int cols, Scaling s, int block_rows, int block_cols, int* br, int* bc) {
  if (rows <= 0 || cols <= 0 || s == Scaling::none) return false;
  switch (s) {
    case Scaling::tensor: *br = rows; *bc = cols; break;
    case Scaling::row: *br = 1; *bc = cols; break;
    case Scaling::block:
      if (block_rows < 1 || block_cols < 1)
        throw std::invalid_argument("quantize_matrix: block scaling needs block sizes >= 1");
      *br = block_rows; *bc = block_cols;
      break;
    case Scaling::none: return false;
  }
  return true;
}

}  // namespace moerl::precision_detail

#endif  // MOERL_KERNELS_PRECISION_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/precision.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::HWY_NAMESPACE {

using namespace precision_detail;

namespace {

#if !MOERL_SIMD_SCALAR
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;

// round_bits<F> lane by lane, the same integer steps. Every compared quantity is below 2^31 (a
// magnitude's bits), so signed compares stand in for unsigned ones.
template <class F>
HWY_INLINE VF round_bits_v(VF y) {
  constexpr int s = 23 - F::kM;
  const DF df;
  const DU du;
  const DI di;
  const auto u = hn::BitCast(du, y);
  const auto one = hn::Set(du, 1u);
  const auto a = hn::And(u, hn::Set(du, 0x7FFFFFFFu));
  const auto sign = hn::And(u, hn::Set(du, 0x80000000u));
  auto r = hn::And(hn::Add(hn::Add(a, hn::Set(du, (1u << (s - 1)) - 1u)), hn::And(hn::ShiftRight<s>(a), one)),
                   hn::Set(du, ~((1u << s) - 1u)));
  if constexpr (F::kEminB > 1) {
    const auto e = hn::ShiftRight<23>(a);
    const auto frac = hn::And(a, hn::Set(du, 0x7FFFFFu));
    const auto mant = hn::Or(frac, hn::IfThenElseZero(hn::Ne(e, hn::Zero(du)), hn::Set(du, 0x800000u)));
    const auto ei = hn::Max(hn::BitCast(di, e), hn::Set(di, 1));
    const auto shi = hn::Min(hn::Max(hn::Sub(hn::Set(di, s + F::kEminB), ei), hn::Set(di, 1)), hn::Set(di, 31));
    const auto sh = hn::BitCast(du, shi);
    const auto half_m1 = hn::Sub(hn::Shl(one, hn::Sub(sh, one)), one);
    const auto lsb = hn::And(hn::Shr(mant, sh), one);
    const auto q = hn::Shr(hn::Add(hn::Add(mant, half_m1), lsb), sh);
    constexpr float quantum =
        static_cast<float>(1.0 / static_cast<double>(1ull << (127 - F::kEminB + F::kM)));
    const auto sub = hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, q)), hn::Set(df, quantum)));
    const auto is_sub = hn::Lt(hn::BitCast(di, a), hn::Set(di, F::kEminB << 23));
    r = hn::IfThenElse(hn::RebindMask(du, is_sub), sub, r);
  }
  const auto over = hn::Gt(hn::BitCast(di, r), hn::Set(di, static_cast<int32_t>(F::kMaxBits)));
  r = hn::IfThenElse(hn::RebindMask(du, over), hn::Set(du, F::kSaturate ? F::kMaxBits : 0x7F800000u), r);
  const auto nan = hn::Gt(hn::BitCast(di, a), hn::Set(di, 0x7F800000));
  r = hn::IfThenElse(hn::RebindMask(du, nan), hn::Or(a, hn::Set(du, 0x00400000u)), r);
  return hn::BitCast(df, hn::Or(r, sign));
}

#if HWY_ARCH_X86
// round_bits_v<E4m3> by FP arithmetic, the same bits in a third of the operations (the FP8
// operands of every fp8-rollout GEMM call go through it): saturate first (anything beyond ±448
// rounds to ±448 in the reference too; the operand order of min/max passes NaN through: x86's
// min/max return the second operand when one is NaN), then add and subtract
// σ = 1.5·2^(max(e, −6) + 20), e = y's exponent: σ's ulp 2^(max(e, −6) − 3) is E4M3's spacing at
// y (4 significant bits in the normal range, the fixed quantum 2^−9 below it), y + σ stays in σ's
// binade, so the adder rounds y to that spacing, to nearest even (σ is an even multiple of its
// ulp), and subtracting σ is exact (Sterbenz). NaN passes both adds quieted with its payload (x86
// returns the NaN operand), as the reference quiets it. The sign is ORed back: what rounds to zero
// is −0 when y is negative, as in the reference. x86 only: the NaN rules are x86's.
HWY_INLINE VF round_e4m3_fp_v(VF y) {
  const DF df;
  const DU du;
  y = hn::Min(hn::Set(df, 448.0f), hn::Max(hn::Set(df, -448.0f), y));
  const auto u = hn::BitCast(du, y);
  const auto e = hn::Max(hn::And(u, hn::Set(du, 0x7F800000u)), hn::Set(du, static_cast<uint32_t>(E4m3::kEminB) << 23));
  const VF sigma = hn::BitCast(df, hn::Add(e, hn::Set(du, (20u << 23) | 0x400000u)));
  const VF r = hn::Sub(hn::Add(y, sigma), sigma);
  return hn::BitCast(df, hn::Or(hn::BitCast(du, r), hn::And(u, hn::Set(du, 0x80000000u))));
}
#endif

// round_bits_v<Bf16> in fewer steps: bf16 has FP32's exponent range, so there is no subnormal
// case and the sign needs no masking off (the rounding carry of a non-NaN magnitude ends at
// 0x7F800000 at most, inf: the IEEE overflow). Only NaN takes the other branch (quiet, payload
// kept).
HWY_INLINE VF round_bf16_v(VF y) {
  const DF df;
  const DU du;
  const auto u = hn::BitCast(du, y);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  auto r = hn::And(hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), lsb), hn::Set(du, 0xFFFF0000u));
  r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(y)), hn::Or(u, hn::Set(du, 0x00400000u)), r);
  return hn::BitCast(df, r);
}

template <class F>
HWY_INLINE VF round_v(VF y) {
#if HWY_ARCH_X86
  if constexpr (std::is_same_v<F, E4m3>) return round_e4m3_fp_v(y);
#endif
  if constexpr (std::is_same_v<F, Bf16>) {
    return round_bf16_v(y);
  } else {
    return round_bits_v<F>(y);
  }
}
#endif  // !MOERL_SIMD_SCALAR

template <class F>
void round_loop(float* x, int64_t n) {
  int64_t i = 0;
#if !MOERL_SIMD_SCALAR
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (; i + L <= n; i += L) hn::StoreU(round_v<F>(hn::LoadU(d, x + i)), d, x + i);
#endif
  for (; i < n; ++i) x[i] = round_one<F>(x[i]);
}

// Quantises x[0..n) with one scale: out = round(x / scale) * scale (out may alias x).
template <class F>
void scale_round_loop(float* out, const float* x, int64_t n, float scale) {
  int64_t i = 0;
#if !MOERL_SIMD_SCALAR
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF sv = hn::Set(d, scale);
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(round_v<F>(hn::Div(hn::LoadU(d, x + i), sv)), sv), d, out + i);
#endif
  for (; i < n; ++i) out[i] = round_one<F>(x[i] / scale) * scale;
}

// max |x[i]| over n values, NaN ignored. Max is exact in any order, so lanes may be combined
// freely (the compiler will not vectorise the scalar form: NaN makes it order-sensitive).
float amax_abs(const float* x, int n, float m) {
  int i = 0;
#if !MOERL_SIMD_SCALAR
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  if (n >= L) {
    VF mv = hn::Set(d, m);
    for (; i + L <= n; i += L) {
      const VF v = hn::Abs(hn::LoadU(d, x + i));
      mv = hn::IfThenElse(hn::IsNaN(v), mv, hn::Max(mv, v));
    }
    m = hn::GetLane(hn::MaxOfLanes(d, mv));
  }
#endif
  for (; i < n; ++i) {
    const float v = std::fabs(x[i]);
    m = v > m ? v : m;
  }
  return m;
}

void scale_round(float* out, const float* x, int64_t n, float scale, Format f) {
  switch (f) {
    case Format::fp32:
      if (out != x) std::memcpy(out, x, sizeof(float) * n);
      return;
    case Format::bf16: return scale_round_loop<Bf16>(out, x, n, scale);
    case Format::fp16: return scale_round_loop<Fp16>(out, x, n, scale);
    case Format::fp8_e4m3: return scale_round_loop<E4m3>(out, x, n, scale);
    case Format::fp8_e5m2: return scale_round_loop<E5m2>(out, x, n, scale);
  }
}

}  // namespace

void RoundArray(float* x, int64_t n, Format f) {
  switch (f) {
    case Format::fp32: return;
    case Format::bf16: return round_loop<Bf16>(x, n);
    case Format::fp16: return round_loop<Fp16>(x, n);
    case Format::fp8_e4m3: return round_loop<E4m3>(x, n);
    case Format::fp8_e5m2: return round_loop<E5m2>(x, n);
  }
}

int QuantizeMatrix(float* out, float* scales, const float* x, int rows, int cols, Format f,
                    Scaling s, int block_rows, int block_cols) {
  int br = 0, bc = 0;
  if (!group_dims(rows, cols, s, block_rows, block_cols, &br, &bc)) {
    // Scaling::none: plain rounding, no groups.
    const int64_t n = rows > 0 && cols > 0 ? static_cast<int64_t>(rows) * cols : 0;
    if (out != x && n > 0) std::memcpy(out, x, sizeof(float) * n);
    RoundArray(out, n, f);
    return 0;
  }
  const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
  const float fmax = format_max(f);
  for (int bi = 0; bi < gr; ++bi) {
    const int i0 = bi * br, i1 = std::min(rows, i0 + br);
    float amax[1024];
    float* am = amax;
    std::unique_ptr<float[]> big;
    if (gc > 1024) {
      big.reset(new float[gc]);
      am = big.get();
    }
    std::fill(am, am + gc, 0.0f);
    for (int i = i0; i < i1; ++i) {
      const float* xr = x + static_cast<int64_t>(i) * cols;
      for (int bj = 0; bj < gc; ++bj) {
        const int j0 = bj * bc, j1 = std::min(cols, j0 + bc);
        am[bj] = amax_abs(xr + j0, j1 - j0, am[bj]);
      }
    }
    for (int bj = 0; bj < gc; ++bj) {
      // fp32 keeps its values unscaled (scale 1); a zero, infinite or underflowing amax gives 1.
      float scale = f == Format::fp32 ? 1.0f : am[bj] / fmax;
      if (!(scale > 0.0f) || !std::isfinite(scale)) scale = 1.0f;
      am[bj] = scale;
      if (scales) scales[static_cast<int64_t>(bi) * gc + bj] = scale;
    }
    for (int i = i0; i < i1; ++i) {
      const int64_t off = static_cast<int64_t>(i) * cols;
      for (int bj = 0; bj < gc; ++bj) {
        const int j0 = bj * bc, j1 = std::min(cols, j0 + bc);
        scale_round(out + off + j0, x + off + j0, j1 - j0, am[bj], f);
      }
    }
  }
  return gr * gc;
}

}  // namespace moerl::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl {

using namespace precision_detail;

HWY_EXPORT(RoundArray);
HWY_EXPORT(QuantizeMatrix);

float round_to_format(float x, Format f) {
  switch (f) {
    case Format::fp32: return x;
    case Format::bf16: return round_one<Bf16>(x);
    case Format::fp16: return round_one<Fp16>(x);
    case Format::fp8_e4m3: return round_one<E4m3>(x);
    case Format::fp8_e5m2: return round_one<E5m2>(x);
  }
  return x;
}

void round_array(float* x, int64_t n, Format f) { HWY_DYNAMIC_DISPATCH(RoundArray)(x, n, f); }

uint32_t format_encode(float x, Format f) {
  const uint32_t r = bits_of(round_to_format(x, f));
  if (f == Format::fp32) return r;
  if (f == Format::bf16) return r >> 16;  // same exponent field; NaN keeps its quiet bit
  const Layout L = layout_of(f);
  const uint32_t sign = (r >> 31) << (L.E + L.M);
  const uint32_t a = r & 0x7FFFFFFFu;
  const uint32_t exp_all = (1u << L.E) - 1u;
  if (a > 0x7F800000u)  // NaN: E4M3 has only S.1111.111; the IEEE formats a quiet NaN
    return sign | (f == Format::fp8_e4m3 ? 0x7Fu : (exp_all << L.M) | (1u << (L.M - 1)));
  if (a == 0x7F800000u) return sign | (exp_all << L.M);  // ±inf (never produced for E4M3)
  const int e = static_cast<int>(a >> 23) - 127;         // unbiased FP32 exponent
  const int emin = 1 - L.bias;
  if (e >= emin)
    return sign | (static_cast<uint32_t>(e + L.bias) << L.M) | ((a & 0x7FFFFFu) >> (23 - L.M));
  // Subnormal (or zero): the value is an exact multiple q of 2^(emin − M).
  const uint32_t q = static_cast<uint32_t>(std::ldexp(float_of(a), L.M - emin));
  return sign | q;
}

float format_decode(uint32_t bits, Format f) {
  if (f == Format::fp32) return float_of(bits);
  if (f == Format::bf16) return float_of((bits & 0xFFFFu) << 16);
  const Layout L = layout_of(f);
  const uint32_t width = 1u + L.E + L.M;
  bits &= (1u << width) - 1u;
  const uint32_t sign = (bits >> (L.E + L.M)) << 31;
  const uint32_t exp = (bits >> L.M) & ((1u << L.E) - 1u);
  const uint32_t frac = bits & ((1u << L.M) - 1u);
  const uint32_t exp_all = (1u << L.E) - 1u;
  if (f == Format::fp8_e4m3) {
    if (exp == exp_all && frac == (1u << L.M) - 1u) return float_of(sign | 0x7FC00000u);
  } else if (exp == exp_all) {
    return float_of(sign | (frac ? 0x7FC00000u : 0x7F800000u));
  }
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(frac), 1 - L.bias - L.M);
    return float_of(sign | bits_of(v));
  }
  const uint32_t e32 = exp - L.bias + 127;
  return float_of(sign | (e32 << 23) | (frac << (23 - L.M)));
}

int quantize_group_count(int rows, int cols, Scaling s, int block_rows, int block_cols) {
  int br = 0, bc = 0;
  if (!group_dims(rows, cols, s, block_rows, block_cols, &br, &bc)) return 0;
  return ((rows + br - 1) / br) * ((cols + bc - 1) / bc);
}

int quantize_matrix(float* out, float* scales, const float* x, int rows, int cols, Format f,
                    Scaling s, int block_rows, int block_cols) {
  return HWY_DYNAMIC_DISPATCH(QuantizeMatrix)(out, scales, x, rows, cols, f, s, block_rows, block_cols);
}

float round_to_bits(float x, int fraction_bits) {
  if (fraction_bits >= 23 || fraction_bits < 0) return x;
  const uint32_t u = bits_of(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;  // NaN
  const int s = 23 - fraction_bits;
  return float_of((u + ((1u << (s - 1)) - 1u) + ((u >> s) & 1u)) & ~((1u << s) - 1u));
}

}  // namespace moerl
#endif  // HWY_ONCE
