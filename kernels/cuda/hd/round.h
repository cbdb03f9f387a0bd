// hd/round.h — rounding into the emulated formats (kernels/precision.h) as a host-device function:
// the integer steps of precision.cpp's round_bits (round-to-nearest-even on the float's bits, the
// target's subnormals as a count of quanta, saturation or inf on overflow, NaN quieted), written
// once for both compilers, so the device's storage roundings (round_format, add_round) give the
// CPU's bits. tests/cuda_host/test_hd_round.cpp holds it to round_to_format on every format's
// values, their neighbours and midpoints, and a sweep of the whole FP32 bit space.
#pragma once

#include <cstdint>

#include "kernels/cuda/hd/bits.h"
#include "kernels/hd.h"
#include "kernels/numerics.h"

namespace moerl::cuda {

// u's float rounded to M fraction bits; eminb: the FP32-biased exponent of the target's minimum
// normal (1: no subnormal range of its own, bf16); max_bits: its largest finite value.
MOERL_HD uint32_t hd_round_bits(uint32_t u, int M, int eminb, uint32_t max_bits, bool saturate) {
  const int s = 23 - M;
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t r = (a + ((1u << (s - 1)) - 1u) + ((a >> s) & 1u)) & ~((1u << s) - 1u);
  if (eminb > 1 && a < (static_cast<uint32_t>(eminb) << 23)) {
    // the target's subnormals: a count of quanta 2^(emin − M), scaled back exactly
    const int e = static_cast<int>(a >> 23);
    const uint32_t mant = (a & 0x7FFFFFu) | (static_cast<uint32_t>(e != 0) << 23);
    int sh = s + eminb - (e > 1 ? e : 1);
    sh = sh < 1 ? 1 : (sh > 31 ? 31 : sh);
    const uint32_t q = (mant + ((1u << (sh - 1)) - 1u) + ((mant >> sh) & 1u)) >> sh;
    const float quantum = hd_bits_float(static_cast<uint32_t>(eminb - M) << 23);  // 2^(emin − M)
    r = hd_float_bits(static_cast<float>(static_cast<int32_t>(q)) * quantum);
  }
  if (r > max_bits) r = saturate ? max_bits : 0x7F800000u;  // inf included
  if (a > 0x7F800000u) r = a | 0x00400000u;                   // NaN: quiet, payload kept
  return sign | r;
}

// round_to_format(x, f) bit for bit; fp32 is the identity.
MOERL_HD float hd_round_to_format(float x, Format f) {
  switch (f) {
    case Format::bf16: return hd_bits_float(hd_round_bits(hd_float_bits(x), 7, 1, 0x7F7F0000u, false));
    case Format::fp16: return hd_bits_float(hd_round_bits(hd_float_bits(x), 10, 113, 0x477FE000u, false));
    case Format::fp8_e4m3: return hd_bits_float(hd_round_bits(hd_float_bits(x), 3, 121, 0x43E00000u, true));
    case Format::fp8_e5m2: return hd_bits_float(hd_round_bits(hd_float_bits(x), 2, 113, 0x47600000u, false));
    case Format::fp32: break;
  }
  return x;
}

}  // namespace moerl::cuda
