// ref/adamw.cpp — one AdamW update, scalar reference (see ref/ops.h). Writes w, m, v in place.
#include <cmath>

#include "kernels/ref/ops.h"

namespace moerl::ref {

void sum_squares(double* sq, const float* x, const int64_t* begin, const int64_t* end, int n_ranges, bool per_range) {
  double acc = 0.0;
  for (int r = 0; r < n_ranges; ++r) {
    if (per_range) acc = 0.0;
    for (int64_t j = begin[r]; j < end[r]; ++j) acc += static_cast<double>(x[j]) * x[j];
    if (per_range) sq[r] = acc;
  }
  if (!per_range) sq[0] = acc;
}

// w[n], m[n], v[n] updated; g[n]
void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip, float beta1,
                  float beta2, double bc1, double bc2, float lr, float decay, float eps) {
  for (int64_t j = 0; j < n; ++j) {
    const float gj = g[j] * clip;
    m[j] = beta1 * m[j] + (1.0f - beta1) * gj;
    v[j] = beta2 * v[j] + (1.0f - beta2) * gj * gj;
    const double mhat = m[j] / bc1, vhat = v[j] / bc2;
    w[j] -= decay * w[j];
    w[j] -= static_cast<float>(lr * mhat / (std::sqrt(vhat) + eps));
  }
}

}  // namespace moerl::ref
