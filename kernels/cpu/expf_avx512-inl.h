// cpu/expf_avx512-inl.h — exp_f32 (kernels/expf.h) on 16 lanes: the same double-precision
// operations per lane, so each lane gives exactly exp_f32's bits. Lanes outside the main path
// (|x| ≥ 88, inf, NaN) are finished by the scalar function. Defined for Highway's AVX3 target
// (MOERL_SIMD_AVX512) inside each including kernel's foreach_target pass. Private to kernels/cpu.
#if defined(MOERL_KERNELS_CPU_EXPF_AVX512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOERL_KERNELS_CPU_EXPF_AVX512_INL_H_
#undef MOERL_KERNELS_CPU_EXPF_AVX512_INL_H_
#else
#define MOERL_KERNELS_CPU_EXPF_AVX512_INL_H_
#endif

#include "kernels/cpu/simd-inl.h"
#include "kernels/expf.h"

#if MOERL_SIMD_AVX512
#include <immintrin.h>

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

namespace expf_avx512_detail {

// 8 lanes of the main path.
inline __m256 exp8_main(__m256 x) {
  using namespace expf_detail;
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kInvLn2N)));
  const __m512d shift = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kShift)));
  const __m512d z = _mm512_fmadd_pd(inv, xd, shift);
  const __m512i ki = _mm512_castpd_si512(z);
  const __m512d kd = _mm512_sub_pd(z, shift);
  const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
  // T[k mod 32]: two 16-entry permutes, picked by bit 4 of k
  const __m512i t0 = _mm512_loadu_si512(kTable), t1 = _mm512_loadu_si512(kTable + 8),
                t2 = _mm512_loadu_si512(kTable + 16), t3 = _mm512_loadu_si512(kTable + 24);
  const __m512i lo = _mm512_permutex2var_epi64(t0, ki, t1);
  const __m512i hi = _mm512_permutex2var_epi64(t2, ki, t3);
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(upper, lo, hi), _mm512_slli_epi64(ki, 47));
  const __m512d s = _mm512_castsi512_pd(t);
  const __m512d c0 = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kC0)));
  const __m512d c1 = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kC1)));
  const __m512d c2 = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kC2)));
  const __m512d z2 = _mm512_fmadd_pd(r, c0, c1);
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(r, c2, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z2, r2, y);
  y = _mm512_mul_pd(y, s);
  return _mm512_cvtpd_ps(y);
}

}  // namespace expf_avx512_detail

// e^x of 16 lanes, bit-identical to exp_f32 lane by lane.
inline __m512 exp_f32_v16(__m512 x) {
  using namespace expf_avx512_detail;
  const __m256 a = exp8_main(_mm512_castps512_ps256(x));
  const __m256 b = exp8_main(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  __m512 y = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)),
                                                 _mm256_castps_pd(b), 1));
  const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20),
                                       _mm512_set1_epi32(0x7ff));
  const __mmask16 slow = _mm512_cmpge_epi32_mask(top, _mm512_set1_epi32(expf_detail::kMainTop));
  if (__builtin_expect(slow != 0, 0)) {
    alignas(64) float xs[16], ys[16];
    _mm512_store_ps(xs, x);
    _mm512_store_ps(ys, y);
    for (int i = 0; i < 16; ++i)
      if (slow & (1u << i)) ys[i] = exp_f32(xs[i]);
    y = _mm512_load_ps(ys);
  }
  return y;
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MOERL_SIMD_AVX512
#endif  // include guard
