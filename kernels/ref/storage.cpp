// storage.cpp — the scalar references of the storage glue between ops (kernels/ref/ops.h):
// rounding into a format, the rounded residual add, the division by a scalar.
#include "kernels/precision.h"
#include "kernels/ref/ops.h"

namespace moerl::ref {

void round_format(float* x, int64_t n, Format f) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_to_format(x[i], f);
}

void add_round(float* out, const float* a, const float* b, int64_t n, Format f) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_format(a[i] + b[i], f);
}

void divide_scalar(float* out, const float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / s;
}

}  // namespace moerl::ref
