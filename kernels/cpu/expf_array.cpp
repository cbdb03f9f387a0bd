// cpu/expf_array.cpp — exp_f32 over an array with the target's vector kernel (the one attention
// and SwiGLU run: expf_avx512-inl.h on AVX3, expf-inl.h elsewhere), for tests that compare it with the scalar function lane by lane.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_EXPF_ARRAY_ONCE_
#define MOERL_KERNELS_CPU_EXPF_ARRAY_ONCE_
#include "kernels/cpu/ops.h"
#include "kernels/expf.h"
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/expf_array.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/expf_avx512-inl.h"
#include "kernels/cpu/expf-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

void exp_f32_array(float* y, const float* x, int64_t n) {
  int64_t i = 0;
#if MOERL_SIMD_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_f32_v16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f32(x[i]);
#else
  for (; i < n; ++i) y[i] = x[i];
  exp_f32_inplace(y, n);
#endif
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {
HWY_EXPORT(exp_f32_array);
void exp_f32_array(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(exp_f32_array)(y, x, n); }
}  // namespace moerl::cpu
#endif
