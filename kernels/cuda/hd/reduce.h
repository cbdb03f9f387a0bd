// hd/reduce.h — the summation order of the CUDA backend's row reductions, as functions the host
// can run.
//
// A row of n terms is reduced by one thread block of kRowThreads threads:
//   1. thread t folds its terms t, t + T, t + 2T, … (T = kRowThreads) in ascending order into a
//      chain from 0 (hd_chain_*: add, fma or max) — coalesced loads, one partial per thread;
//   2. the T partials are combined by a pairwise tree in shared memory: for half = T/2, T/4, …, 1,
//      part[t] = part[t] ⊕ part[t + half] for t < half (hd_tree_fold); the result is part[0].
// The device kernels (kernels/cuda/ops.cu) call exactly these functions, one per thread and one
// fold per thread and level, so hd_row_* below computes on the CPU the bits the GPU computes (up to
// the device's expf in hd_chain_sum_exp). The order is fixed: deterministic run to run and
// independent of how many rows a call holds, but not the references' sequential order — results
// agree with those within FP32 rounding of an n-term sum.
#pragma once

#include <cmath>

#include "kernels/cuda/hd/arith.h"

namespace moerl::cuda {

inline constexpr int kRowThreads = 256;  // threads per row block: a power of two

// Step 1 chains of thread t of T over x[0..n).
MOERL_HD float hd_chain_sum(const float* x, int n, int t, int T) {
  float acc = 0.0f;
  for (int i = t; i < n; i += T) acc = hd_add(acc, x[i]);
  return acc;
}
MOERL_HD float hd_chain_max(const float* x, int n, int t, int T) {
  float acc = -INFINITY;
  for (int i = t; i < n; i += T) acc = hd_max(x[i], acc);
  return acc;
}
// Σ a_i·b_i as an fma chain (the references' dot products).
MOERL_HD float hd_chain_dot(const float* a, const float* b, int n, int t, int T) {
  float acc = 0.0f;
  for (int i = t; i < n; i += T) acc = hd_fma(a[i], b[i], acc);
  return acc;
}
MOERL_HD float hd_chain_sumsq(const float* x, int n, int t, int T) {
  return hd_chain_dot(x, x, n, t, T);
}
// Σ exp(x_i − m), each term rounded, added from 0 (softmax denominators).
MOERL_HD float hd_chain_sum_exp(const float* x, float m, int n, int t, int T) {
  float acc = 0.0f;
  for (int i = t; i < n; i += T) acc = hd_add(acc, hd_exp(hd_sub(x[i], m)));
  return acc;
}

// Step 2, one fold of thread t at one tree level.
MOERL_HD void hd_tree_fold_sum(float* part, int t, int half) {
  part[t] = hd_add(part[t], part[t + half]);
}
MOERL_HD void hd_tree_fold_max(float* part, int t, int half) {
  part[t] = hd_max(part[t + half], part[t]);
}

// ---- the whole row on one thread (host tests; the device splits it over a block) ----------
// part[T] holds the partials on entry; returns the tree's result. T a power of two.
MOERL_HD float hd_tree_sum(float* part, int T) {
  for (int half = T / 2; half > 0; half /= 2)
    for (int t = 0; t < half; ++t) hd_tree_fold_sum(part, t, half);
  return part[0];
}
MOERL_HD float hd_tree_max(float* part, int T) {
  for (int half = T / 2; half > 0; half /= 2)
    for (int t = 0; t < half; ++t) hd_tree_fold_max(part, t, half);
  return part[0];
}
MOERL_HD float hd_row_sum(const float* x, int n) {
  float part[kRowThreads];
  for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_sum(x, n, t, kRowThreads);
  return hd_tree_sum(part, kRowThreads);
}
MOERL_HD float hd_row_max(const float* x, int n) {
  float part[kRowThreads];
  for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_max(x, n, t, kRowThreads);
  return hd_tree_max(part, kRowThreads);
}
MOERL_HD float hd_row_dot(const float* a, const float* b, int n) {
  float part[kRowThreads];
  for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_dot(a, b, n, t, kRowThreads);
  return hd_tree_sum(part, kRowThreads);
}
MOERL_HD float hd_row_sum_exp(const float* x, float m, int n) {
  float part[kRowThreads];
  for (int t = 0; t < kRowThreads; ++t) part[t] = hd_chain_sum_exp(x, m, n, t, kRowThreads);
  return hd_tree_sum(part, kRowThreads);
}

}  // namespace moerl::cuda
