// gemm_shapes.h — the GEMM ceiling at the model's own sizes. The n×n×n ceiling (kernels/linear.h)
// says what the cores can do on a large square product; a small model never runs one. Here every
// linear-layer product a phase runs is listed with its shape (M rows of tokens, N outputs, K
// inputs; y[M, N] = x[M, K]·Wᵀ), timed alone with moerl's exact FP32 kernel (linear_forward, what
// the fp32-ref profile runs), and the phase's ceiling is the FLOP-weighted harmonic mean of those
// rates: the GFLOP/s the phase would reach if it did nothing but its own GEMMs, each at its best.
// Shapes (flops.h's products; D d_model, E experts, K top-k, F d_ff, S shared, V vocab), per layer
// unless said:
//   q, k, v, o projections   [M, D] · [D, D]ᵀ           4 products
//   router                   [M, D] · [E, D]ᵀ
//   expert gate, up          [M·K/E, D] · [F, D]ᵀ       2·E products (the tokens spread evenly)
//   expert down              [M·K/E, F] · [D, F]ᵀ       E products
//   shared gate, up / down   [M, D] · [S, D]ᵀ, [M, S] · [D, S]ᵀ
//   dense MLP gate, up/down  [M, D] · [K·F, D]ᵀ, [M, K·F] · [D, K·F]ᵀ
//   LM head (once)           [M, D] · [V, D]ᵀ
// The train phase's M is a mini-batch's tokens on this rank (its backward is counted as twice the
// forward's products, at the forward's rate: an approximation, said in the report); the rollout's
// are the prefill (M = sequences × prompt, LM head at the last position only) and each decode step
// (M = sequences).
#pragma once

#include <string>
#include <vector>

#include "models/config.h"

namespace moerl {

struct GemmShape {
  std::string name;  // "qkvo", "router", "expert_gate_up", ... ("prefill " / "decode " in the rollout)
  int M = 0, N = 0, K = 0;
  double count = 0;   // products of this shape in the phase (per step)
  double gflops = 0;  // measured, best so far

  double flops() const { return 2.0 * M * N * static_cast<double>(K) * count; }
};

// The products of one forward over M tokens; prefix names them.
std::vector<GemmShape> gemm_shapes_forward(const ModelConfig& c, int M, int lm_head_rows, const std::string& prefix);
// The train phase: `minibatches` forward + backward passes over M tokens each (backward = 2 × forward).
std::vector<GemmShape> gemm_shapes_train(const ModelConfig& c, int M, int minibatches);
// The rollout: a prefill over rows × P tokens, then decode_steps steps of `rows` tokens.
std::vector<GemmShape> gemm_shapes_rollout(const ModelConfig& c, int rows, int P, int decode_steps);

// Times every shape for at least min_seconds each (best call kept; the better of this and the
// shape's gflops so far is kept, so rounds can call it repeatedly).
void gemm_shapes_measure(std::vector<GemmShape>* shapes, double min_seconds);
// The FLOP-weighted harmonic mean of the shapes' rates, GFLOP/s (0 when none is measured).
double gemm_shapes_ceiling(const std::vector<GemmShape>& shapes);

}  // namespace moerl
