// cpu/expf-inl.h — exp_f32 (kernels/expf.h) in place over an array on every vector target: the
// same double-precision operations per lane (Google Highway; the table lookup is a gather), so each
// lane gives exactly exp_f32's bits. Lanes outside the main path (|x| ≥ 88, inf, NaN) are
// finished by the scalar function. On AVX3 the kernels use the hand-written 16-lane twin
// (expf_avx512-inl.h); on the portable target, the scalar function. Private to kernels/cpu.
#if defined(MOERL_KERNELS_CPU_EXPF_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MOERL_KERNELS_CPU_EXPF_INL_H_
#undef MOERL_KERNELS_CPU_EXPF_INL_H_
#else
#define MOERL_KERNELS_CPU_EXPF_INL_H_
#endif

#include <cstring>

#include "kernels/cpu/simd-inl.h"
#include "kernels/expf.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {

// x[0..n) ← exp_f32(x[0..n)).
HWY_INLINE void exp_f32_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if !MOERL_SIMD_SCALAR
  using namespace expf_detail;
  const hn::CappedTag<double, 8> dd;
  const hn::Rebind<float, decltype(dd)> dh;  // as many floats as doubles
  const hn::RebindToUnsigned<decltype(dd)> du64;
  const hn::RebindToSigned<decltype(dd)> di64;
  const hn::RebindToUnsigned<decltype(dh)> du32;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto inv = hn::BitCast(dd, hn::Set(du64, kInvLn2N)), shift = hn::BitCast(dd, hn::Set(du64, kShift));
  const auto c0 = hn::BitCast(dd, hn::Set(du64, kC0)), c1 = hn::BitCast(dd, hn::Set(du64, kC1));
  const auto c2 = hn::BitCast(dd, hn::Set(du64, kC2)), one = hn::Set(dd, 1.0);
  const auto idx_mask = hn::Set(du64, uint64_t{31});
  const hn::RebindToSigned<decltype(dh)> di32;
  const auto top_mask = hn::Set(du32, 0x7ffu);
  const auto main_top_m1 = hn::Set(di32, static_cast<int32_t>(kMainTop) - 1);
  for (; i + L <= n; i += L) {
    const auto xf = hn::LoadU(dh, x + i);
    const auto xd = hn::PromoteTo(dd, xf);
    const auto z = hn::MulAdd(inv, xd, shift);
    const auto ki = hn::BitCast(du64, z);
    const auto kd = hn::Sub(z, shift);
    const auto r = hn::MulSub(inv, xd, kd);
    const auto t = hn::GatherIndex(du64, kTable, hn::BitCast(di64, hn::And(ki, idx_mask)));
    const auto s = hn::BitCast(dd, hn::Add(t, hn::ShiftLeft<47>(ki)));
    const auto z2 = hn::MulAdd(r, c0, c1);
    const auto r2 = hn::Mul(r, r);
    auto y = hn::MulAdd(r, c2, one);
    y = hn::MulAdd(z2, r2, y);
    y = hn::Mul(y, s);
    const auto top = hn::And(hn::ShiftRight<20>(hn::BitCast(du32, xf)), top_mask);
    const bool slow = !hn::AllFalse(di32, hn::Gt(hn::BitCast(di32, top), main_top_m1));
    float xs[8];
    if (HWY_UNLIKELY(slow)) hn::StoreU(xf, dh, xs);
    hn::StoreU(hn::DemoteTo(dh, y), dh, x + i);
    if (HWY_UNLIKELY(slow))
      for (int64_t l = 0; l < L; ++l) {
        uint32_t u;
        std::memcpy(&u, xs + l, 4);
        if (((u >> 20) & 0x7ff) >= kMainTop) x[i + l] = exp_f32(xs[l]);
      }
  }
#endif
  for (; i < n; ++i) x[i] = exp_f32(x[i]);
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
