// ref/softmax.cpp — row-wise softmax / log-softmax, scalar reference. Forward writes with '=';
// softmax_backward accumulates dx with '+='.
//
// Per row: m = max_j x_j; e_j = exp(x_j − m); sum = e_0 + … + e_{C-1} (sequential from 0.0f);
// softmax_j = e_j / sum; log_softmax_j = (x_j − m) − log(sum).
#include <cmath>

#include "kernels/ref/ops.h"

namespace moerl::ref {

namespace {
float row_max(const float* x, int C) {
  float m = x[0];
  for (int j = 1; j < C; ++j) m = x[j] > m ? x[j] : m;
  return m;
}
float row_sum_exp(const float* x, float m, int C) {
  float sum = 0.0f;
  for (int j = 0; j < C; ++j) sum += std::exp(x[j] - m);
  return sum;
}
}  // namespace

// out[N,C], x[N,C]
void softmax_forward(float* out, const float* x, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<int64_t>(n) * C;
    float* y = out + static_cast<int64_t>(n) * C;
    float m = row_max(xr, C);
    float sum = 0.0f;
    for (int j = 0; j < C; ++j) {
      y[j] = std::exp(xr[j] - m);
      sum += y[j];
    }
    for (int j = 0; j < C; ++j) y[j] = y[j] / sum;
  }
}

// out[N,C], x[N,C]
void log_softmax_forward(float* out, const float* x, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<int64_t>(n) * C;
    float* y = out + static_cast<int64_t>(n) * C;
    float m = row_max(xr, C);
    float lse = std::log(row_sum_exp(xr, m, C));
    for (int j = 0; j < C; ++j) y[j] = (xr[j] - m) - lse;
  }
}

// dx[N,C] +=, dy[N,C], y[N,C] (the softmax output): dx_j += y_j·(dy_j − Σ_k y_k dy_k),
// the sum an fma chain over k = 0..C-1.
void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const float* g = dy + static_cast<int64_t>(n) * C;
    const float* p = y + static_cast<int64_t>(n) * C;
    float* d = dx + static_cast<int64_t>(n) * C;
    float dot = 0.0f;
    for (int j = 0; j < C; ++j) dot = std::fma(p[j], g[j], dot);
    for (int j = 0; j < C; ++j) d[j] += p[j] * (g[j] - dot);
  }
}

// logp[N], logits[N,V], targets[N]: logp = (x_t − m) − log(Σ exp(x_j − m)); 0 where target < 0.
void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      logp[n] = 0.0f;
      continue;
    }
    const float* x = logits + static_cast<int64_t>(n) * V;
    float m = row_max(x, V);
    logp[n] = (x[targets[n]] - m) - std::log(row_sum_exp(x, m, V));
  }
}

// dlogits[N,V] +=, dlogp[N], logits[N,V], targets[N]:
// dlogits_j += dlogp · (onehot_j − e_j / sum), rows with target < 0 untouched.
void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                      const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    const float* x = logits + static_cast<int64_t>(n) * V;
    float* d = dlogits + static_cast<int64_t>(n) * V;
    float m = row_max(x, V);
    float sum = row_sum_exp(x, m, V);
    for (int j = 0; j < V; ++j) {
      float onehot = j == targets[n] ? 1.0f : 0.0f;
      d[j] += dlogp[n] * (onehot - std::exp(x[j] - m) / sum);
    }
  }
}

}  // namespace moerl::ref
