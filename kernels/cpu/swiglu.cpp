// cpu/swiglu.cpp — SwiGLU gate, TBB over element blocks, 16 lanes at a time. Forward writes out
// with '='; backward accumulates dgate and dup with '+='. Element-wise with the formulas and the
// operation order of ref/swiglu.cpp, and exp_f32 (kernels/expf.h) on 16 lanes with the scalar
// function's bits, so bit-identical to the reference.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_SWIGLU_CPP_ONCE_
#define MOERL_KERNELS_CPU_SWIGLU_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>

#include "kernels/cpu/ops.h"
#include "kernels/expf.h"

#endif  // MOERL_KERNELS_CPU_SWIGLU_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/expf_avx512-inl.h"
#include "kernels/cpu/expf-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {
constexpr int64_t kGrain = 8192;  // elements per task

// σ(g) = 1 / (1 + e^(−g))
inline float sigmoid(float g) { return 1.0f / (1.0f + exp_f32(-g)); }
[[maybe_unused]] constexpr int kExpBlock = 256;  // elements per vector-exp pass (not on AVX3)

#if MOERL_SIMD_AVX512
inline __m512 sigmoid_v16(__m512 g) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 neg = _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_f32_v16(neg)));
}
#endif
}  // namespace

// out[N,F], gate[N,F], up[N,F]
void swiglu_forward(float* out, const float* gate, const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_el, kGrain),
                    [&](const tbb::blocked_range<int64_t>& br) {
    int64_t i = br.begin();
#if MOERL_SIMD_AVX512
    for (; i + 16 <= br.end(); i += 16) {
      const __m512 g = _mm512_loadu_ps(gate + i);
      const __m512 sig = sigmoid_v16(g);
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(up + i)));
    }
#else  // e^(−g) of a block by the vector exp, then the same formula
    float e[kExpBlock];
    for (; i < br.end(); i += kExpBlock) {
      const int nb = static_cast<int>(std::min<int64_t>(kExpBlock, br.end() - i));
      for (int j = 0; j < nb; ++j) e[j] = -gate[i + j];
      exp_f32_inplace(e, nb);
      for (int j = 0; j < nb; ++j) {
        const float g = gate[i + j];
        out[i + j] = (g * (1.0f / (1.0f + e[j]))) * up[i + j];
      }
    }
#endif
    for (; i < br.end(); ++i) {
      const float g = gate[i];
      out[i] = (g * sigmoid(g)) * up[i];
    }
  });
}

// dgate[N,F] +=, dup[N,F] +=, dout[N,F], gate[N,F], up[N,F]
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_el, kGrain),
                    [&](const tbb::blocked_range<int64_t>& br) {
    int64_t i = br.begin();
#if MOERL_SIMD_AVX512
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= br.end(); i += 16) {
      const __m512 g = _mm512_loadu_ps(gate + i), d = _mm512_loadu_ps(dout + i);
      const __m512 sig = sigmoid_v16(g);
      // (dout·up)·(σ·(1 + g·(1 − σ)))
      const __m512 slope = _mm512_mul_ps(
          sig, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, sig))));
      const __m512 dg = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_loadu_ps(up + i)), slope);
      _mm512_storeu_ps(dgate + i, _mm512_add_ps(_mm512_loadu_ps(dgate + i), dg));
      const __m512 du = _mm512_mul_ps(d, _mm512_mul_ps(g, sig));
      _mm512_storeu_ps(dup + i, _mm512_add_ps(_mm512_loadu_ps(dup + i), du));
    }
#else  // e^(−g) of a block by the vector exp, then the same formulas
    float e[kExpBlock];
    for (; i < br.end(); i += kExpBlock) {
      const int nb = static_cast<int>(std::min<int64_t>(kExpBlock, br.end() - i));
      for (int j = 0; j < nb; ++j) e[j] = -gate[i + j];
      exp_f32_inplace(e, nb);
      for (int j = 0; j < nb; ++j) {
        const int64_t k = i + j;
        const float g = gate[k];
        const float sig = 1.0f / (1.0f + e[j]);
        dgate[k] += (dout[k] * up[k]) * (sig * (1.0f + g * (1.0f - sig)));
        dup[k] += dout[k] * (g * sig);
      }
    }
#endif
    for (; i < br.end(); ++i) {
      const float g = gate[i];
      const float sig = sigmoid(g);
      dgate[i] += (dout[i] * up[i]) * (sig * (1.0f + g * (1.0f - sig)));
      dup[i] += dout[i] * (g * sig);
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(swiglu_forward);
HWY_EXPORT(swiglu_backward);

void swiglu_forward(float* out, const float* gate, const float* up, int N, int F) {
  HWY_DYNAMIC_DISPATCH(swiglu_forward)(out, gate, up, N, F);
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, int N, int F) {
  HWY_DYNAMIC_DISPATCH(swiglu_backward)(dgate, dup, dout, gate, up, N, F);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
