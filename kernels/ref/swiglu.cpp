// ref/swiglu.cpp — SwiGLU gate, scalar reference. Forward writes out with '='; backward accumulates
// dgate and dup with '+='.
//   σ = 1 / (1 + exp(−g));  out = (g·σ)·u
//   dgate += (dout·u)·(σ·(1 + g·(1 − σ)));  dup += dout·(g·σ)
// exp is exp_f32 (kernels/expf.h): glibc's expf bits, but fixed by this project, not by the libm.
#include "kernels/expf.h"
#include "kernels/ref/ops.h"

namespace moerl::ref {

// out[N,F], gate[N,F], up[N,F]
void swiglu_forward(float* out, const float* gate, const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  for (int64_t i = 0; i < n_el; ++i) {
    float g = gate[i];
    float sig = 1.0f / (1.0f + exp_f32(-g));
    out[i] = (g * sig) * up[i];
  }
}

// dgate[N,F] +=, dup[N,F] +=, dout[N,F], gate[N,F], up[N,F]
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  for (int64_t i = 0; i < n_el; ++i) {
    float g = gate[i];
    float sig = 1.0f / (1.0f + exp_f32(-g));
    dgate[i] += (dout[i] * up[i]) * (sig * (1.0f + g * (1.0f - sig)));
    dup[i] += dout[i] * (g * sig);
  }
}

}  // namespace moerl::ref
