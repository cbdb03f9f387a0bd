// cpu/simd-inl.h — per-target helpers of the Highway kernels in kernels/cpu/ (included inside
// each kernel file's foreach_target pass, hence the toggling include guard). Private to kernels/.
//
// MulAddExact: fused multiply-add, one rounding, on every target. Highway's MulAdd is fused on
// AVX2/AVX3/NEON(A64)/SVE but is mul-then-add on SCALAR, EMU128 and SSE4; the kernels' chains are
// defined with fused steps (std::fma in the references), so elsewhere each lane takes std::fma.
// MOERL_SIMD_SCALAR: true on the portable targets, whose kernels run the plain scalar loops.
// MOERL_SIMD_AVX512: true on AVX3, where the kernels not yet written over Highway's operations
// (attention, SwiGLU, AdamW, expf, the format rounding) run their AVX-512 intrinsics; elsewhere
// they run their scalar loops, which carry out the same operations in the same order.
#if defined(MOERL_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOERL_KERNELS_CPU_SIMD_INL_H_
#undef MOERL_KERNELS_CPU_SIMD_INL_H_
#else
#define MOERL_KERNELS_CPU_SIMD_INL_H_
#endif

#include <cmath>

#include <hwy/highway.h>

#undef MOERL_SIMD_SCALAR
#if HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
#define MOERL_SIMD_SCALAR 1
#else
#define MOERL_SIMD_SCALAR 0
#endif

// The kernels that keep hand-written AVX-512 intrinsics for this target (the rest of their code is
// the plain loops, compiled for every target).
#undef MOERL_SIMD_AVX512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define MOERL_SIMD_AVX512 1
#else
#define MOERL_SIMD_AVX512 0
#endif

#undef MOERL_SIMD_FUSED
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || \
    (HWY_TARGET == HWY_NEON && HWY_ARCH_ARM_A64) || HWY_TARGET == HWY_SVE ||            \
    HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128
#define MOERL_SIMD_FUSED 1
#else
#define MOERL_SIMD_FUSED 0
#endif

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The float vectors of the kernels: up to 16 lanes (a 64-byte row of a packed panel).
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

// a·b + c with one rounding, lane by lane.
template <class D>
HWY_INLINE hn::Vec<D> MulAddExact(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c) {
#if MOERL_SIMD_FUSED
  (void)d;
  return hn::MulAdd(a, b, c);
#else
  using T = hn::TFromD<D>;
  constexpr size_t kMax = 64 / sizeof(T);
  alignas(64) T A[kMax], B[kMax], C[kMax];
  hn::StoreU(a, d, A);
  hn::StoreU(b, d, B);
  hn::StoreU(c, d, C);
  for (size_t i = 0; i < hn::Lanes(d); ++i) C[i] = std::fma(A[i], B[i], C[i]);
  return hn::LoadU(d, C);
#endif
}

// Stores the first n lanes of v at p (n ≤ Lanes(d)).
template <class D>
HWY_INLINE void StoreFirst(D d, hn::Vec<D> v, size_t n, hn::TFromD<D>* p) {
  if (n >= hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else if (n > 0) {
    hn::BlendedStore(v, hn::FirstN(d, n), d, p);
  }
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
