// ref/matmul.cpp — scalar reference of the linear layer's matmul (see ref/ops.h).
// matmul_forward writes out with '='; matmul_backward accumulates dinp and dweight with '+='.
// The forward's order is THE canonical order of the project: each output is one fused
// multiply-add chain over k = 0..K-1 starting from 0.0f. The fast kernel (cpu/gemm.cpp)
// reproduces it bit for bit.
#include <cmath>
#include <cstdint>

#include "kernels/ref/ops.h"

namespace moerl::ref {

// out[M,N], inp[M,K], weight[N,K]
void matmul_forward(float* out, const float* inp, const float* weight, int M, int N, int K) {
  for (int m = 0; m < M; ++m) {
    const float* x = inp + static_cast<int64_t>(m) * K;
    for (int n = 0; n < N; ++n) {
      const float* w = weight + static_cast<int64_t>(n) * K;
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc = std::fma(x[k], w[k], acc);
      out[static_cast<int64_t>(m) * N + n] = acc;
    }
  }
}

// dinp[M,K] += dout[M,N]·weight[N,K] ; dweight[N,K] += dout[M,N]ᵀ·inp[M,K]
// Each gradient element is accumulated in its own FP32 chain (over n for dinp, over m for
// dweight, in increasing index order) and then added to the existing value once.
void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int M, int N, int K) {
  if (dinp) {
    for (int m = 0; m < M; ++m) {
      const float* g = dout + static_cast<int64_t>(m) * N;
      for (int k = 0; k < K; ++k) {
        float acc = 0.0f;
        for (int n = 0; n < N; ++n) acc = std::fma(g[n], weight[static_cast<int64_t>(n) * K + k], acc);
        dinp[static_cast<int64_t>(m) * K + k] += acc;
      }
    }
  }
  if (dweight) {
    for (int n = 0; n < N; ++n) {
      for (int k = 0; k < K; ++k) {
        float acc = 0.0f;
        for (int m = 0; m < M; ++m)
          acc = std::fma(dout[static_cast<int64_t>(m) * N + n], inp[static_cast<int64_t>(m) * K + k], acc);
        dweight[static_cast<int64_t>(n) * K + k] += acc;
      }
    }
  }
}

}  // namespace moerl::ref
