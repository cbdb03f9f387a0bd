// cpu/rope.cpp — rotate-half RoPE in place, TBB over rows. Same angle and rotation formulas as
// ref/rope.cpp (angles in double, rounded once to float cos/sin), hence bit-identical to it.
// When the positions of the call span at most N distinct values (the usual case: a batch of
// sequences), the cos/sin table is built once per position instead of once per row.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_ROPE_CPP_ONCE_
#define MOERL_KERNELS_CPU_ROPE_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

#endif  // MOERL_KERNELS_CPU_ROPE_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {
// cs[2·half]: cos then sin of the angles of position `pos`.
void rope_angles(float* cs, int32_t pos, int half, int Dh, float theta) {
  for (int j = 0; j < half; ++j) {
    double inv_freq = std::pow(static_cast<double>(theta), -2.0 * j / Dh);
    double angle = static_cast<double>(pos) * inv_freq;
    cs[j] = static_cast<float>(std::cos(angle));
    cs[half + j] = static_cast<float>(std::sin(angle));
  }
}

// x[H,Dh] of one row; sign +1 forward, −1 backward.
void rope_row(float* x, const float* cs, int H, int Dh, float sign) {
  const int half = Dh / 2;
  for (int h = 0; h < H; ++h) {
    float* xh = x + static_cast<int64_t>(h) * Dh;
    for (int j = 0; j < half; ++j) {
      const float c = cs[j], s = sign * cs[half + j];
      const float a = xh[j], b = xh[j + half];
      xh[j] = a * c - b * s;
      xh[j + half] = b * c + a * s;
    }
  }
}

void rope_rotate(float* x, const int32_t* pos, int N, int H, int Dh, float theta, float sign) {
  if (N <= 0) return;
  const int half = Dh / 2;
  const int32_t pmin = *std::min_element(pos, pos + N), pmax = *std::max_element(pos, pos + N);
  const int64_t span = static_cast<int64_t>(pmax) - pmin + 1;
  std::vector<float> table;
  if (span <= N) {
    table.resize(static_cast<size_t>(span) * Dh);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, span), [&](const tbb::blocked_range<int64_t>& br) {
      for (int64_t i = br.begin(); i < br.end(); ++i)
        rope_angles(table.data() + i * Dh, static_cast<int32_t>(pmin + i), half, Dh, theta);
    });
  }
  tbb::parallel_for(tbb::blocked_range<int>(0, N, 16), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> own(table.empty() ? Dh : 0);
    for (int n = br.begin(); n < br.end(); ++n) {
      const float* cs;
      if (!table.empty()) {
        cs = table.data() + static_cast<int64_t>(pos[n] - pmin) * Dh;
      } else {
        rope_angles(own.data(), pos[n], half, Dh, theta);
        cs = own.data();
      }
      rope_row(x + static_cast<int64_t>(n) * H * Dh, cs, H, Dh, sign);
    }
  });
}
}  // namespace

// x[N,H,Dh] in place, pos[N]
void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(x, pos, N, H, Dh, theta, 1.0f);
}

// dx[N,H,Dh] in place (transformed, not accumulated), pos[N]
void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta) {
  rope_rotate(dx, pos, N, H, Dh, theta, -1.0f);
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(rope_forward);
HWY_EXPORT(rope_backward);

void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float theta) {
  HWY_DYNAMIC_DISPATCH(rope_forward)(x, pos, N, H, Dh, theta);
}

void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float theta) {
  HWY_DYNAMIC_DISPATCH(rope_backward)(dx, pos, N, H, Dh, theta);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
