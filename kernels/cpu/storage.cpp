// cpu/storage.cpp — the storage glue between ops (kernels/ops.def): rounding into a format (the
// vector rounding of precision.cpp, dispatched over SIMD targets), the rounded residual add and the
// division by a scalar. Bit-identical to kernels/ref: element-wise, one FP32 operation per element
// before the rounding.
#include "kernels/cpu/ops.h"
#include "kernels/precision.h"

namespace moerl::cpu {

void round_format(float* x, int64_t n, Format f) {
  if (n > 0) round_array(x, n, f);
}

void add_round(float* out, const float* a, const float* b, int64_t n, Format f) {
  if (n <= 0) return;
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  round_array(out, n, f);
}

void divide_scalar(float* out, const float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / s;
}

}  // namespace moerl::cpu
