// hd/adamw.h — one AdamW element update, the operations of ref/adamw.cpp in its order: with
// g' = g·clip,
//   m = β1·m + (1 − β1)·g';  v = β2·v + ((1 − β2)·g')·g'     (FP32)
//   w = w − decay·w;  w = w − (float)(lr·(m/bc1) / (sqrt(v/bc2) + eps))   (the step in double)
// Every operation is correctly rounded on both sides (double sqrt/division included), so the
// device's result equals cpu::adamw_update's bit for bit.
#pragma once

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

MOERL_HD void hd_adamw_element(float* w, float* m, float* v, float g, float clip, float beta1,
                               float beta2, double bc1, double bc2, float lr, float decay,
                               float eps) {
  const float gj = hd_mul(g, clip);
  const float mj = hd_add(hd_mul(beta1, *m), hd_mul(hd_sub(1.0f, beta1), gj));
  const float vj = hd_add(hd_mul(beta2, *v), hd_mul(hd_mul(hd_sub(1.0f, beta2), gj), gj));
  *m = mj;
  *v = vj;
  const double mhat = hd_ddiv(static_cast<double>(mj), bc1);
  const double vhat = hd_ddiv(static_cast<double>(vj), bc2);
  float wj = *w;
  wj = hd_sub(wj, hd_mul(decay, wj));
  const double step = hd_ddiv(hd_dmul(static_cast<double>(lr), mhat),
                              hd_dadd(hd_dsqrt(vhat), static_cast<double>(eps)));
  *w = hd_sub(wj, static_cast<float>(step));
}

}  // namespace moerl::cuda
