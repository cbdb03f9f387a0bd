// cpu/adamw.cpp — one AdamW update (ref/adamw.cpp), 16 parameters at a time (AVX-512 intrinsics; on
// the other vector targets Highway's vectors, as many as doubles fit) and TBB over blocks;
// element-wise with the reference's operations in its order (FP32 moments, the step in double), so
// bit-identical to it. The scalar loop did not vectorise (sqrt may set errno) and took ~5% of an RL
// step of the reference workload (6.5M parameters).
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_ADAMW_CPP_ONCE_
#define MOERL_KERNELS_CPU_ADAMW_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>

#include "kernels/cpu/ops.h"

#endif  // MOERL_KERNELS_CPU_ADAMW_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adamw.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


// w[n], m[n], v[n] updated; g[n]
void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps) {
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 16384), [&](const tbb::blocked_range<int64_t>& br) {
    int64_t j = br.begin();
#if MOERL_SIMD_AVX512
    const __m512 vclip = _mm512_set1_ps(clip), vb1 = _mm512_set1_ps(beta1), vb2 = _mm512_set1_ps(beta2),
                 va1 = _mm512_set1_ps(a1), va2 = _mm512_set1_ps(a2), vdecay = _mm512_set1_ps(decay);
    const __m512d vbc1 = _mm512_set1_pd(bc1), vbc2 = _mm512_set1_pd(bc2),
                  vlr = _mm512_set1_pd(static_cast<double>(lr)), veps = _mm512_set1_pd(static_cast<double>(eps));
    // the double-precision step of 8 lanes: (float)(lr·(m/bc1) / (sqrt(v/bc2) + eps))
    auto step8 = [&](__m256 m8, __m256 v8) {
      const __m512d mhat = _mm512_div_pd(_mm512_cvtps_pd(m8), vbc1);
      const __m512d vhat = _mm512_div_pd(_mm512_cvtps_pd(v8), vbc2);
      return _mm512_cvtpd_ps(_mm512_div_pd(_mm512_mul_pd(vlr, mhat), _mm512_add_pd(_mm512_sqrt_pd(vhat), veps)));
    };
    for (; j + 16 <= br.end(); j += 16) {
      const __m512 gj = _mm512_mul_ps(_mm512_loadu_ps(g + j), vclip);
      const __m512 mj = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + j)), _mm512_mul_ps(va1, gj));
      const __m512 vj = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + j)),
                                      _mm512_mul_ps(_mm512_mul_ps(va2, gj), gj));
      _mm512_storeu_ps(m + j, mj);
      _mm512_storeu_ps(v + j, vj);
      __m512 wj = _mm512_loadu_ps(w + j);
      wj = _mm512_sub_ps(wj, _mm512_mul_ps(vdecay, wj));
      const __m256 lo = step8(_mm512_castps512_ps256(mj), _mm512_castps512_ps256(vj));
      const __m256 hi = step8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mj), 1)),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vj), 1)));
      const __m512 upd = _mm512_castpd_ps(_mm512_insertf64x4(
          _mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
      _mm512_storeu_ps(w + j, _mm512_sub_ps(wj, upd));
    }
#elif !MOERL_SIMD_SCALAR
    // The same operations over Highway's vectors, as many floats per step as doubles fit.
    const hn::CappedTag<double, 8> dd;
    const hn::Rebind<float, decltype(dd)> dh;
    const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
    const auto vclip = hn::Set(dh, clip), vb1 = hn::Set(dh, beta1), vb2 = hn::Set(dh, beta2),
               va1 = hn::Set(dh, a1), va2 = hn::Set(dh, a2), vdecay = hn::Set(dh, decay);
    const auto vbc1 = hn::Set(dd, bc1), vbc2 = hn::Set(dd, bc2), vlr = hn::Set(dd, static_cast<double>(lr)),
               veps = hn::Set(dd, static_cast<double>(eps));
    for (; j + L <= br.end(); j += L) {
      const auto gj = hn::Mul(hn::LoadU(dh, g + j), vclip);
      const auto mj = hn::Add(hn::Mul(vb1, hn::LoadU(dh, m + j)), hn::Mul(va1, gj));
      const auto vj = hn::Add(hn::Mul(vb2, hn::LoadU(dh, v + j)), hn::Mul(hn::Mul(va2, gj), gj));
      hn::StoreU(mj, dh, m + j);
      hn::StoreU(vj, dh, v + j);
      auto wj = hn::LoadU(dh, w + j);
      wj = hn::Sub(wj, hn::Mul(vdecay, wj));
      const auto mhat = hn::Div(hn::PromoteTo(dd, mj), vbc1), vhat = hn::Div(hn::PromoteTo(dd, vj), vbc2);
      const auto upd = hn::DemoteTo(dh, hn::Div(hn::Mul(vlr, mhat), hn::Add(hn::Sqrt(vhat), veps)));
      hn::StoreU(hn::Sub(wj, upd), dh, w + j);
    }
#endif
    for (; j < br.end(); ++j) {
      const float gj = g[j] * clip;
      m[j] = beta1 * m[j] + a1 * gj;
      v[j] = beta2 * v[j] + a2 * gj * gj;
      const double mhat = m[j] / bc1, vhat = v[j] / bc2;
      w[j] -= decay * w[j];
      w[j] -= static_cast<float>(lr * mhat / (std::sqrt(vhat) + eps));
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(adamw_update);

void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1, float beta2, double bc1, double bc2, float lr, float decay, float eps) {
  HWY_DYNAMIC_DISPATCH(adamw_update)(w, m, v, g, n, clip, beta1, beta2, bc1, bc2, lr, decay, eps);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
