// cpu/vec.cpp — kernels/vec.h per Highway target.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_VEC_ONCE_
#define MOERL_KERNELS_CPU_VEC_ONCE_
#include "kernels/vec.h"

#include <cmath>
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/vec.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

void VecFmaAxpy(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
#if !MOERL_SIMD_SCALAR
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const VF va = hn::Set(d, a);
  for (; i + L <= n; i += L) hn::StoreU(MulAddExact(d, va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
#endif
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

float VecFmaDot(const float* a, const float* b, int64_t n, float init) {
  float acc = init;
  for (int64_t i = 0; i < n; ++i) acc = std::fma(a[i], b[i], acc);
  return acc;
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl {
namespace cpu {
HWY_EXPORT(VecFmaAxpy);
HWY_EXPORT(VecFmaDot);
}  // namespace cpu
void vec_fma_axpy(float* y, float a, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(cpu::VecFmaAxpy)(y, a, x, n);
}
float vec_fma_dot(const float* a, const float* b, int64_t n, float init) {
  return HWY_DYNAMIC_DISPATCH(cpu::VecFmaDot)(a, b, n, init);
}
}  // namespace moerl
#endif
