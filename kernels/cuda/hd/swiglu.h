// hd/swiglu.h — SwiGLU of one element (ref/swiglu.cpp):
//   σ = 1 / (1 + exp(−g));  out = (g·σ)·u
//   dgate += (dout·u)·(σ·(1 + g·(1 − σ)));  dup += dout·(g·σ)
#pragma once

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

MOERL_HD float hd_sigmoid(float g) { return hd_div(1.0f, hd_add(1.0f, hd_exp(-g))); }
MOERL_HD float hd_swiglu_forward(float g, float u) { return hd_mul(hd_mul(g, hd_sigmoid(g)), u); }
// Adds this element's gradients to *dgate and *dup.
MOERL_HD void hd_swiglu_backward(float* dgate, float* dup, float dout, float g, float u) {
  const float sig = hd_sigmoid(g);
  const float slope = hd_mul(sig, hd_add(1.0f, hd_mul(g, hd_sub(1.0f, sig))));
  *dgate = hd_add(*dgate, hd_mul(hd_mul(dout, u), slope));
  *dup = hd_add(*dup, hd_mul(dout, hd_mul(g, sig)));
}

}  // namespace moerl::cuda
