// hd/router.h — the MoE router's per-row formulas after its scores (models/router.cpp, reference
// §7.1), as host-device functions (kernels/hd.h): the gate weights of the selected experts, the
// router log-probs at given ids, the selection scores' sigmoid, and the gate weights' backward.
// The CPU kernels (kernels/cpu/router.cpp) and the CUDA kernels run these same lines, so the
// router's bits on the CPU backend are the ones models/ had before the router moved onto the
// backend, and a device gives them up to its expf/logf (≤ 2 ulp).
//
// Gate weights of the ids id[K] of a row with logits z[E] and scores s[E]:
//   softmax scoring, renormalised: softmax over the k selected logits (= full softmax, top-k,
//     renormalise), max-subtracted;
//   otherwise: g_k = s[id_k], divided by their sum when scoring is sigmoid, renormalised and K > 1.
// Router log-prob: z[at_k] − logsumexp(z) (the max-subtracted sum in index order).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/hd/arith.h"
#include "kernels/cuda/hd/swiglu.h"  // hd_sigmoid

namespace moerl::cuda {

// IEEE fmax (a NaN loses), as std::fmax.
MOERL_HD float hd_fmax(float a, float b) { return fmaxf(a, b); }

// log Σ_e exp(z_e) of one row, max-subtracted, summed in index order.
MOERL_HD float hd_row_logsumexp(const float* z, int E) {
  float m = z[0];
  for (int e = 1; e < E; ++e) m = hd_fmax(m, z[e]);
  float s = 0.0f;
  for (int e = 0; e < E; ++e) s = hd_add(s, hd_exp(hd_sub(z[e], m)));
  return hd_add(m, hd_log(s));
}

// g[K] of the ids id[K]; logp[K] (null: skipped) at the ids at[K].
MOERL_HD void hd_router_gate_row(float* g, float* logp, const float* z, const float* s, const int32_t* id,
                                 const int32_t* at, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (softmax_scoring && norm_topk) {
    float m = z[id[0]];
    for (int k = 1; k < K; ++k) m = hd_fmax(m, z[id[k]]);
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
      g[k] = hd_exp(hd_sub(z[id[k]], m));
      sum = hd_add(sum, g[k]);
    }
    for (int k = 0; k < K; ++k) g[k] = hd_div(g[k], sum);
  } else {
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
      g[k] = s[id[k]];
      sum = hd_add(sum, g[k]);
    }
    if (!softmax_scoring && norm_topk && K > 1)
      for (int k = 0; k < K; ++k) g[k] = hd_div(g[k], sum);
  }
  if (logp) {
    const float lse = hd_row_logsumexp(z, E);
    for (int k = 0; k < K; ++k) logp[k] = hd_sub(z[at[k]], lse);
  }
}

// dz[E] += d(gate weights)/dz · dg[K], the mirror of hd_router_gate_row; dp[E] is scratch (used
// by softmax scoring without renormalisation only).
MOERL_HD void hd_router_gate_backward_row(float* dz, float* dp, const float* s, const int32_t* id, const float* g,
                                          const float* dg, int E, int K, bool softmax_scoring, bool norm_topk) {
  if (softmax_scoring && norm_topk) {
    float dot = 0.0f;
    for (int k = 0; k < K; ++k) dot = hd_add(dot, hd_mul(g[k], dg[k]));
    for (int k = 0; k < K; ++k) dz[id[k]] = hd_add(dz[id[k]], hd_mul(g[k], hd_sub(dg[k], dot)));
  } else if (softmax_scoring) {
    for (int e = 0; e < E; ++e) dp[e] = 0.0f;
    for (int k = 0; k < K; ++k) dp[id[k]] = hd_add(dp[id[k]], dg[k]);
    float dot = 0.0f;
    for (int e = 0; e < E; ++e) dot = hd_add(dot, hd_mul(s[e], dp[e]));
    for (int e = 0; e < E; ++e) dz[e] = hd_add(dz[e], hd_mul(s[e], hd_sub(dp[e], dot)));
  } else {
    float S = 0.0f, dot = 0.0f;
    for (int k = 0; k < K; ++k) {
      S = hd_add(S, s[id[k]]);
      dot = hd_add(dot, hd_mul(g[k], dg[k]));
    }
    const bool norm = norm_topk && K > 1;
    for (int k = 0; k < K; ++k) {
      const float sk = s[id[k]];
      const float ds = norm ? hd_div(hd_sub(dg[k], dot), S) : dg[k];
      dz[id[k]] = hd_add(dz[id[k]], hd_mul(hd_mul(ds, sk), hd_sub(1.0f, sk)));
    }
  }
}

}  // namespace moerl::cuda
