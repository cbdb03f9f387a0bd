// ref/router.cpp — the router after its scores, scalar reference: the loops models/router.cpp ran
// on the host before the router moved onto the backend (reference §7.1). Plain std::exp / std::log,
// one FP32 operation at a time, rows in turn.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ref/ops.h"

namespace moerl::ref {

namespace {
float row_logsumexp(const float* z, int E) {
  float m = z[0];
  for (int e = 1; e < E; ++e) m = std::fmax(m, z[e]);
  float s = 0.0f;
  for (int e = 0; e < E; ++e) s += std::exp(z[e] - m);
  return m + std::log(s);
}
}  // namespace

void sigmoid_forward(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void add_bias_rows(float* out, const float* x, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) out[static_cast<size_t>(n) * C + c] = x[static_cast<size_t>(n) * C + c] + bias[c];
}

void router_gate_forward(float* gate, float* logp, const float* z, const float* scores, const int32_t* ids,
                         const int32_t* at, int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  for (int n = 0; n < N; ++n) {
    const float* zn = z + static_cast<size_t>(n) * E;
    const float* sn = scores + static_cast<size_t>(n) * E;
    const int32_t* id = ids + static_cast<size_t>(n) * K;
    float* g = gate + static_cast<size_t>(n) * K;
    if (softmax_scoring && norm_topk) {
      float m = zn[id[0]];
      for (int k = 1; k < K; ++k) m = std::fmax(m, zn[id[k]]);
      float s = 0.0f;
      for (int k = 0; k < K; ++k) { g[k] = std::exp(zn[id[k]] - m); s += g[k]; }
      for (int k = 0; k < K; ++k) g[k] /= s;
    } else {
      float s = 0.0f;
      for (int k = 0; k < K; ++k) { g[k] = sn[id[k]]; s += g[k]; }
      if (!softmax_scoring && norm_topk && K > 1)
        for (int k = 0; k < K; ++k) g[k] /= s;
    }
    if (logp) {
      const float lse = row_logsumexp(zn, E);
      const int32_t* a = (at ? at : ids) + static_cast<size_t>(n) * K;
      for (int k = 0; k < K; ++k) logp[static_cast<size_t>(n) * K + k] = zn[a[k]] - lse;
    }
  }
}

void router_gate_backward(float* dz, const float* scores, const int32_t* ids, const float* gate, const float* dgate,
                          int N, int E, int K, bool softmax_scoring, bool norm_topk) {
  std::fill(dz, dz + static_cast<size_t>(N) * E, 0.0f);
  std::vector<float> dp(static_cast<size_t>(E));
  for (int n = 0; n < N; ++n) {
    const float* sn = scores + static_cast<size_t>(n) * E;
    const int32_t* id = ids + static_cast<size_t>(n) * K;
    const float* g = gate + static_cast<size_t>(n) * K;
    const float* dg = dgate + static_cast<size_t>(n) * K;
    float* dzn = dz + static_cast<size_t>(n) * E;
    if (softmax_scoring && norm_topk) {
      float dot = 0.0f;
      for (int k = 0; k < K; ++k) dot += g[k] * dg[k];
      for (int k = 0; k < K; ++k) dzn[id[k]] += g[k] * (dg[k] - dot);
    } else if (softmax_scoring) {
      std::fill(dp.begin(), dp.end(), 0.0f);
      for (int k = 0; k < K; ++k) dp[id[k]] += dg[k];
      float dot = 0.0f;
      for (int e = 0; e < E; ++e) dot += sn[e] * dp[e];
      for (int e = 0; e < E; ++e) dzn[e] += sn[e] * (dp[e] - dot);
    } else {
      float S = 0.0f, dot = 0.0f;
      for (int k = 0; k < K; ++k) { S += sn[id[k]]; dot += g[k] * dg[k]; }
      const bool norm = norm_topk && K > 1;
      for (int k = 0; k < K; ++k) {
        const float s = sn[id[k]];
        const float ds = norm ? (dg[k] - dot) / S : dg[k];
        dzn[id[k]] += ds * s * (1.0f - s);
      }
    }
  }
}

}  // namespace moerl::ref
