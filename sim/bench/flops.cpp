// flops.cpp — the formulas of flops.h.
#include "sim/bench/flops.h"

namespace moerl {

double flops_token_linear(const ModelConfig& c) {
  const double D = c.d_model, E = c.n_experts, K = c.top_k, F = c.d_ff, S = c.shared_expert_ff;
  double f = 8.0 * D * D;
  if (c.is_moe()) f += 2.0 * D * E + 6.0 * K * D * F + 6.0 * D * S;
  else f += 6.0 * D * (K * F);
  return f;
}

double flops_forward_sequence(const ModelConfig& c, int T) {
  const double D = c.d_model, L = c.n_layers, V = c.vocab_size, t = T;
  return t * L * flops_token_linear(c) + L * 2.0 * D * t * (t + 1.0) + t * 2.0 * D * V;
}

double flops_train_sequence(const ModelConfig& c, int T) { return 3.0 * flops_forward_sequence(c, T); }

double flops_prefill(const ModelConfig& c, int P) {
  const double D = c.d_model, L = c.n_layers, V = c.vocab_size, p = P;
  return p * L * flops_token_linear(c) + L * 2.0 * D * p * (p + 1.0) + 2.0 * D * V;
}

double flops_decode_step(const ModelConfig& c, int pos) {
  const double D = c.d_model, L = c.n_layers, V = c.vocab_size;
  return L * flops_token_linear(c) + L * 4.0 * D * (pos + 1.0) + 2.0 * D * V;
}

}  // namespace moerl
