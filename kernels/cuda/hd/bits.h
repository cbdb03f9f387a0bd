// hd/bits.h — a float's bit pattern and back, as host-device functions (kernels/hd.h): the
// device's intrinsics under nvcc, memcpy on the host. Shared by the linear layer's scales
// (hd/gemm_hd.h) and the storage rounding (hd/round.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/hd.h"

namespace moerl::cuda {

MOERL_HD uint32_t hd_float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
MOERL_HD float hd_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

}  // namespace moerl::cuda
