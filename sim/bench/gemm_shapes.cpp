// gemm_shapes.cpp — see gemm_shapes.h.
#include "sim/bench/gemm_shapes.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/linear.h"
#include "kernels/rng.h"

namespace moerl {

std::vector<GemmShape> gemm_shapes_forward(const ModelConfig& c, int M, int lm_head_rows, const std::string& prefix) {
  const int D = c.d_model, E = c.n_experts, K = c.top_k, F = c.d_ff, S = c.shared_expert_ff, L = c.n_layers;
  std::vector<GemmShape> v;
  auto add = [&](const char* name, int m, int n, int k, double count) {
    if (m > 0 && n > 0 && k > 0 && count > 0) v.push_back({prefix + name, m, n, k, count, 0.0});
  };
  add("qkvo", M, D, D, 4.0 * L);
  if (c.is_moe()) {
    const int Me = std::max(1, static_cast<int>(std::lround(static_cast<double>(M) * K / E)));
    add("router", M, E, D, L);
    add("expert_gate_up", Me, F, D, 2.0 * E * L);
    add("expert_down", Me, D, F, 1.0 * E * L);
    add("shared_gate_up", M, S, D, 2.0 * L);
    add("shared_down", M, D, S, 1.0 * L);
  } else {
    add("mlp_gate_up", M, K * F, D, 2.0 * L);
    add("mlp_down", M, D, K * F, 1.0 * L);
  }
  add("lm_head", lm_head_rows, c.vocab_size, D, 1.0);
  return v;
}

std::vector<GemmShape> gemm_shapes_train(const ModelConfig& c, int M, int minibatches) {
  std::vector<GemmShape> v = gemm_shapes_forward(c, M, M, "");
  for (GemmShape& g : v) g.count *= 3.0 * minibatches;  // forward + the backward's two products
  return v;
}

std::vector<GemmShape> gemm_shapes_rollout(const ModelConfig& c, int rows, int P, int decode_steps) {
  std::vector<GemmShape> v = gemm_shapes_forward(c, rows * P, rows, "prefill ");
  std::vector<GemmShape> d = gemm_shapes_forward(c, rows, rows, "decode ");
  for (GemmShape& g : d) g.count *= decode_steps;
  v.insert(v.end(), d.begin(), d.end());
  return v;
}

namespace {

double gemm_shape_gflops(const GemmShape& g, double min_seconds) {
  std::vector<float> x(static_cast<size_t>(g.M) * g.K), w(static_cast<size_t>(g.N) * g.K), y(static_cast<size_t>(g.M) * g.N);
  Rng rng(rng_derive(0, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(g.M), static_cast<uint64_t>(g.N),
                                                               static_cast<uint64_t>(g.K)}));
  for (float& a : x) a = rng.normal();
  for (float& a : w) a = rng.normal();
  const LinearNumerics nm;  // exact FP32: the fp32-ref profile's products
  PackedWeight pw;
  linear_pack_weight(&pw, w.data(), g.N, g.K, nm);
  linear_forward(y.data(), x.data(), pw, g.M, nm);  // warm-up
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double best = 1e300;
  do {
    const auto t0 = Clock::now();
    linear_forward(y.data(), x.data(), pw, g.M, nm);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds);
  return 2.0 * g.M * g.N * static_cast<double>(g.K) / best * 1e-9;
}

}  // namespace

void gemm_shapes_measure(std::vector<GemmShape>* shapes, double min_seconds) {
  for (GemmShape& g : *shapes) g.gflops = std::max(g.gflops, gemm_shape_gflops(g, min_seconds));
}

double gemm_shapes_ceiling(const std::vector<GemmShape>& shapes) {
  double flops = 0, seconds = 0;
  for (const GemmShape& g : shapes)
    if (g.gflops > 0) {
      flops += g.flops();
      seconds += g.flops() / (g.gflops * 1e9);
    }
  return seconds > 0 ? flops / seconds * 1e-9 : 0.0;
}

}  // namespace moerl
