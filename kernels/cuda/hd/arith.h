// hd/arith.h — FP32/FP64 arithmetic with one rounding per operation on host and device alike.
//
// nvcc contracts a·b + c into one FMA by default (--fmad=true, kept for the GEMMs' sake); the host
// build never does (-ffp-contract=off). The CUDA kernels' element-wise formulas go through these
// helpers (__fmul_rn & co. on the device, which nvcc never fuses), so a formula rounds at the same
// places on both sides and differences between the CPU and CUDA backends come only from reduction
// order and the device's transcendental functions (expf/logf: ≤ 2 ulp; double cos/sin/pow).
// Explicit multiply-adds use hd_fma (one rounding, as std::fma).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace moerl::cuda {

#if defined(__CUDA_ARCH__)
MOERL_HD float hd_add(float a, float b) { return __fadd_rn(a, b); }
MOERL_HD float hd_sub(float a, float b) { return __fsub_rn(a, b); }
MOERL_HD float hd_mul(float a, float b) { return __fmul_rn(a, b); }
MOERL_HD float hd_div(float a, float b) { return __fdiv_rn(a, b); }
MOERL_HD float hd_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
MOERL_HD float hd_sqrt(float a) { return __fsqrt_rn(a); }
MOERL_HD double hd_dadd(double a, double b) { return __dadd_rn(a, b); }
MOERL_HD double hd_dsub(double a, double b) { return __dsub_rn(a, b); }
MOERL_HD double hd_dmul(double a, double b) { return __dmul_rn(a, b); }
MOERL_HD double hd_ddiv(double a, double b) { return __ddiv_rn(a, b); }
MOERL_HD double hd_dsqrt(double a) { return __dsqrt_rn(a); }
#else
MOERL_HD float hd_add(float a, float b) { return a + b; }
MOERL_HD float hd_sub(float a, float b) { return a - b; }
MOERL_HD float hd_mul(float a, float b) { return a * b; }
MOERL_HD float hd_div(float a, float b) { return a / b; }
MOERL_HD float hd_fma(float a, float b, float c) { return std::fma(a, b, c); }
MOERL_HD float hd_sqrt(float a) { return std::sqrt(a); }
MOERL_HD double hd_dadd(double a, double b) { return a + b; }
MOERL_HD double hd_dsub(double a, double b) { return a - b; }
MOERL_HD double hd_dmul(double a, double b) { return a * b; }
MOERL_HD double hd_ddiv(double a, double b) { return a / b; }
MOERL_HD double hd_dsqrt(double a) { return std::sqrt(a); }
#endif

// e^x and ln x in FP32: glibc's expf/logf on the host (the same bits as kernels/expf.h's exp_f32
// and as std::exp/std::log in the references), CUDA's expf/logf (≤ 2 ulp) on the device.
MOERL_HD float hd_exp(float x) { return expf(x); }
MOERL_HD float hd_log(float x) { return logf(x); }
// e^x and ln x in FP64: glibc's exp/log on the host (std::exp/std::log of a double), CUDA's
// (≤ 1 ulp) on the device.
MOERL_HD double hd_dexp(double x) { return exp(x); }
MOERL_HD double hd_dlog(double x) { return log(x); }
// e^x − 1 in FP64, accurate near 0: glibc's expm1 on the host (std::expm1), CUDA's on the device.
MOERL_HD double hd_dexpm1(double x) { return expm1(x); }

// The references' running maximum: a if a > b, else b (so a NaN a never wins; see topk for NaN).
MOERL_HD float hd_max(float a, float b) { return a > b ? a : b; }
MOERL_HD bool hd_isnan(float x) { return x != x; }

}  // namespace moerl::cuda
