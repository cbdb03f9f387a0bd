// cpu/softmax.cpp — row-wise softmax, log-softmax and per-target log-prob, TBB over rows. Forward
// writes with '='; backward accumulates with '+='. Each row repeats ref/softmax.cpp's sequence
// (sequential max and exp-sum, std::exp), so every kernel here equals the reference bit for bit
// and no result depends on the thread count; the element-wise passes vectorise.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_SOFTMAX_CPP_ONCE_
#define MOERL_KERNELS_CPU_SOFTMAX_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

#endif  // MOERL_KERNELS_CPU_SOFTMAX_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/softmax.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {
constexpr int kGrain = 16;  // rows per task

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
template <class F>
void for_rows(int N, F&& f) {
  tbb::parallel_for(tbb::blocked_range<int>(0, N, kGrain), [&](const tbb::blocked_range<int>& br) {
    for (int n = br.begin(); n < br.end(); ++n) f(static_cast<int64_t>(n));
  });
}
}  // namespace

// out[N,C], x[N,C]
void softmax_forward(float* out, const float* x, int N, int C) {
  for_rows(N, [&](int64_t n) {
    const float* xr = x + n * C;
    float* y = out + n * C;
    const float m = row_max(xr, C);
    float sum = 0.0f;
    for (int j = 0; j < C; ++j) {
      y[j] = std::exp(xr[j] - m);
      sum += y[j];
    }
    for (int j = 0; j < C; ++j) y[j] = y[j] / sum;
  });
}

// out[N,C], x[N,C]
void log_softmax_forward(float* out, const float* x, int N, int C) {
  for_rows(N, [&](int64_t n) {
    const float* xr = x + n * C;
    float* y = out + n * C;
    const float m = row_max(xr, C);
    const float lse = std::log(row_sum_exp(xr, m, C));
    for (int j = 0; j < C; ++j) y[j] = (xr[j] - m) - lse;
  });
}

// dx[N,C] +=, dy[N,C], y[N,C]
void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) {
  for_rows(N, [&](int64_t n) {
    const float *g = dy + n * C, *p = y + n * C;
    float* d = dx + n * C;
    float dot = 0.0f;
    for (int j = 0; j < C; ++j) dot = std::fma(p[j], g[j], dot);
    for (int j = 0; j < C; ++j) d[j] += p[j] * (g[j] - dot);
  });
}

// logp[N], logits[N,V], targets[N]
void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V) {
  for_rows(N, [&](int64_t n) {
    if (targets[n] < 0) {
      logp[n] = 0.0f;
      return;
    }
    const float* x = logits + n * V;
    const float m = row_max(x, V);
    logp[n] = (x[targets[n]] - m) - std::log(row_sum_exp(x, m, V));
  });
}

// dlogits[N,V] +=, dlogp[N], logits[N,V], targets[N]
void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                      const int32_t* targets, int N, int V) {
  tbb::enumerable_thread_specific<std::vector<float>> scratch(static_cast<size_t>(V));  // e[V]
  for_rows(N, [&](int64_t n) {
    if (targets[n] < 0) return;
    const float* x = logits + n * V;
    float* d = dlogits + n * V;
    float* e = scratch.local().data();
    const float m = row_max(x, V);
    float sum = 0.0f;
    for (int j = 0; j < V; ++j) {  // each exp once (the reference evaluates it twice, same bits)
      e[j] = std::exp(x[j] - m);
      sum += e[j];
    }
    const float g = dlogp[n];
    for (int j = 0; j < V; ++j) {
      const float onehot = j == targets[n] ? 1.0f : 0.0f;
      d[j] += g * (onehot - e[j] / sum);
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(softmax_forward);
HWY_EXPORT(log_softmax_forward);
HWY_EXPORT(softmax_backward);
HWY_EXPORT(logprob_forward);
HWY_EXPORT(logprob_backward);

void softmax_forward(float* out, const float* x, int N, int C) {
  HWY_DYNAMIC_DISPATCH(softmax_forward)(out, x, N, C);
}

void log_softmax_forward(float* out, const float* x, int N, int C) {
  HWY_DYNAMIC_DISPATCH(log_softmax_forward)(out, x, N, C);
}

void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) {
  HWY_DYNAMIC_DISPATCH(softmax_backward)(dx, dy, y, N, C);
}

void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V) {
  HWY_DYNAMIC_DISPATCH(logprob_forward)(logp, logits, targets, N, V);
}

void logprob_backward(float* dlogits, const float* dlogp, const float* logits, const int32_t* targets, int N, int V) {
  HWY_DYNAMIC_DISPATCH(logprob_backward)(dlogits, dlogp, logits, targets, N, V);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
