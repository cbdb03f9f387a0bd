// workload.cpp — see workload.h.
#include "sim/bench/workload.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/rng.h"
#include "sim/bench/flops.h"
#include "sim/rl/positions.h"

namespace moerl {

std::vector<int32_t> bench_length_schedule(uint64_t seed, int B, int mean) {
  if (mean < 1 || B < 1)
    throw std::invalid_argument("bench: long-answer schedule of " + std::to_string(B) + " sequences, mean " +
                                std::to_string(mean) + ": both must be >= 1");
  const int64_t span = 2 * static_cast<int64_t>(mean) - 1;
  std::vector<int32_t> len(static_cast<size_t>(B));
  for (int k = 0; k < B; ++k)  // ⌊(k + ½)·span/B⌋ in integers
    len[static_cast<size_t>(k)] = 1 + static_cast<int32_t>(((2 * static_cast<int64_t>(k) + 1) * span) / (2 * static_cast<int64_t>(B)));
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {kLengthStream}));
  for (int k = B - 1; k > 0; --k)  // Fisher–Yates
    std::swap(len[static_cast<size_t>(k)], len[static_cast<size_t>(rng.below(static_cast<uint64_t>(k) + 1))]);
  return len;
}

void bench_workload_measure(BenchWorkload* w, const ModelConfig& cfg, const int32_t* len, int R) {
  const int B = w->B, P = w->P;
  w->R = R;
  w->T = P + R;
  // rollout_generate runs a decode step for every generated position of an MoE model (the last
  // records the final position's routing), R − 1 when dense; a row is real while it feeds its
  // own response's tokens.
  const int steps = cfg.is_moe() ? R : R - 1;
  const double prefill = flops_prefill(cfg, P);
  std::vector<double> decode_upto(static_cast<size_t>(steps) + 1, 0.0);  // Σ_{r<n} decode_step(P + r)
  for (int r = 0; r < steps; ++r) decode_upto[r + 1] = decode_upto[r] + flops_decode_step(cfg, P + r);
  int64_t sum = 0;
  w->len_min = R;
  w->len_max = 0;
  w->decode_real = 0;
  w->flops_rollout_real = w->flops_train_real = 0.0;
  w->pairs_rollout_real = w->pairs_train_real = 0.0;
  for (int s = 0; s < B; ++s) {
    const int l = len[s];
    sum += l;
    w->len_min = std::min(w->len_min, l);
    w->len_max = std::max(w->len_max, l);
    const int fed = std::min(l, steps);
    w->decode_real += fed;
    w->flops_rollout_real += prefill + decode_upto[fed];
    w->flops_train_real += flops_train_sequence(cfg, P + l);
    w->pairs_train_real += 0.5 * (P + l) * (P + l + 1.0);
    w->pairs_rollout_real += 0.5 * P * (P + 1.0) + fed * (P + 1.0) + 0.5 * fed * (fed - 1.0);  // Σ_{r<fed} P + r + 1
  }
  w->len_mean = B > 0 ? static_cast<double>(sum) / B : 0.0;
  w->tokens_real = static_cast<int64_t>(B) * P + sum;
  w->tokens_computed = static_cast<int64_t>(B) * w->T;
  w->decode_computed = static_cast<int64_t>(B) * steps;
  w->flops_rollout = B * (prefill + decode_upto[steps]);
  w->flops_train = B * flops_train_sequence(cfg, w->T);
}

std::vector<float> bench_loss_dlogp(const int32_t* len, int n, int P, int T, int64_t N) {
  const std::vector<uint8_t> scored = rl_scored_positions_mask(n, P, T, len);  // [n·T]
  std::vector<float> d(static_cast<size_t>(n) * (T - 1), 0.0f);
  const float g = -1.0f / static_cast<float>(N);
  for (int s = 0; s < n; ++s)
    for (int t = 0; t < T - 1; ++t)
      if (scored[static_cast<size_t>(s) * T + t]) d[static_cast<size_t>(s) * (T - 1) + t] = g;
  return d;
}

}  // namespace moerl
