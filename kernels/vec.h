// vec.h — fused element-wise helpers for host code outside the kernels (the MoE dispatcher's
// combine), run with the best instruction set of the CPU (kernels/simd.h) so that a std::fma is an
// instruction, not a call into libm, also in a portable build. Same bits as the scalar loops they
// replace, on every target.
#pragma once

#include <cstdint>

namespace moerl {

// y[i] = fma(a, x[i], y[i]) for i < n  (each element one fused step).
void vec_fma_axpy(float* y, float a, const float* x, int64_t n);
// The sequential chain acc = fma(a[i], b[i], acc), i = 0..n-1, from acc = init.
float vec_fma_dot(const float* a, const float* b, int64_t n, float init);

}  // namespace moerl
