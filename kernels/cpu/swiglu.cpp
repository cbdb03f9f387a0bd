// cpu/swiglu.cpp — SwiGLU gate, TBB over element blocks. Forward writes out with '='; backward
// accumulates dgate and dup with '+='. Element-wise with the formulas of ref/swiglu.cpp (std::exp),
// so bit-identical to the reference.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>

#include "kernels/cpu/ops.h"

namespace moerl::cpu {

namespace {
constexpr int64_t kGrain = 4096;  // elements per task
}

// out[N,F], gate[N,F], up[N,F]
void swiglu_forward(float* out, const float* gate, const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_el, kGrain),
                    [&](const tbb::blocked_range<int64_t>& br) {
    for (int64_t i = br.begin(); i < br.end(); ++i) {
      const float g = gate[i];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      out[i] = (g * sig) * up[i];
    }
  });
}

// dgate[N,F] +=, dup[N,F] +=, dout[N,F], gate[N,F], up[N,F]
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int N, int F) {
  const int64_t n_el = static_cast<int64_t>(N) * F;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_el, kGrain),
                    [&](const tbb::blocked_range<int64_t>& br) {
    for (int64_t i = br.begin(); i < br.end(); ++i) {
      const float g = gate[i];
      const float sig = 1.0f / (1.0f + std::exp(-g));
      dgate[i] += (dout[i] * up[i]) * (sig * (1.0f + g * (1.0f - sig)));
      dup[i] += dout[i] * (g * sig);
    }
  });
}

}  // namespace moerl::cpu
