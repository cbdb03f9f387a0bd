// hd/softmax.h — per-element formulas of softmax, log-softmax, their backward and the per-target
// log-prob (ref/softmax.cpp), given a row's max m and denominator sum = Σ exp(x_j − m) (block
// reductions, hd/reduce.h):
//   softmax_j = exp(x_j − m) / sum;  log_softmax_j = (x_j − m) − log(sum)
//   dx_j += y_j·(dy_j − Σ y·dy);     dlogits_j += dlogp·(onehot_j − exp(x_j − m)/sum)
#pragma once

#include "kernels/cuda/hd/reduce.h"

namespace moerl::cuda {

MOERL_HD float hd_softmax_exp(float x, float m) { return hd_exp(hd_sub(x, m)); }
MOERL_HD float hd_softmax_prob(float e, float sum) { return hd_div(e, sum); }
MOERL_HD float hd_log_softmax(float x, float m, float lse) { return hd_sub(hd_sub(x, m), lse); }
// log-prob of the target with logit xt: (xt − m) − log(sum)
MOERL_HD float hd_logprob(float xt, float m, float sum) { return hd_sub(hd_sub(xt, m), hd_log(sum)); }
MOERL_HD float hd_softmax_dx(float y, float dy, float dot) { return hd_mul(y, hd_sub(dy, dot)); }
MOERL_HD float hd_logprob_dlogit(float dlogp, bool is_target, float x, float m, float sum) {
  const float onehot = is_target ? 1.0f : 0.0f;
  return hd_mul(dlogp, hd_sub(onehot, hd_div(hd_softmax_exp(x, m), sum)));
}

}  // namespace moerl::cuda
