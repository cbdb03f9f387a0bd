// flops.h — analytic FLOP counts of the model, for `moerl bench`'s GFLOP/s. A multiply-add is 2
// FLOPs; only matrix products are counted (norms, RoPE, softmax, SwiGLU and top-k are O(D) per
// token and ignored). Per token and layer, with D = d_model, E = n_experts, K = top_k,
// F = d_ff, S = shared_expert_ff, V = vocab_size:
//   attention projections q, k, v, o   8·D²
//   router (MoE)                        2·D·E
//   experts (MoE)                       6·K·D·F        (gate, up, down for each of K experts)
//   shared expert (MoE)                 6·D·S
//   dense twin MLP                      6·D·(K·F)
// causal attention at position t (0-based): QKᵀ over t+1 keys and P·V: 4·D·(t+1), so a whole
// sequence of T tokens costs 2·D·T·(T+1) per layer; LM head 2·D·V per position whose logits are
// computed. Training forward+backward = 3 × forward (the backward does two products per forward
// product: input gradient and weight gradient).
#pragma once

#include "models/config.h"

namespace moerl {

// Per-token, per-layer FLOPs of the linear layers (everything except attention scores and LM head).
double flops_token_linear(const ModelConfig& c);
// Forward over one sequence of T tokens, logits at every position.
double flops_forward_sequence(const ModelConfig& c, int T);
// Training forward + backward over one sequence of T tokens.
double flops_train_sequence(const ModelConfig& c, int T);
// Prefill of P prompt tokens (logits at the last position only).
double flops_prefill(const ModelConfig& c, int P);
// One decode step writing position `pos` (0-based; it attends over pos + 1 keys), with logits.
double flops_decode_step(const ModelConfig& c, int pos);

}  // namespace moerl
