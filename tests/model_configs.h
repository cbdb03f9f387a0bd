// model_configs.h — the small model configurations the suites build (models, store, sim, rl, mpi),
// written once: each says what it is for. Tests that vary one of them copy it and set a field.
#pragma once

#include "models/config.h"

namespace moerl::test {

// The small MoE of the model and MPI tests: every dimension distinct where it can be, routing and
// attention far from uniform (init_std 0.2). n_experts 8 divides 1, 2 and 4 ranks.
inline ModelConfig tiny_moe_config(int n_experts = 6) {
  return {.vocab_size = 23, .d_model = 24, .n_layers = 2, .n_heads = 3, .n_experts = n_experts, .top_k = 2,
          .d_ff = 20, .max_seq_len = 16, .init_std = 0.2f};
}

// Checkpoint round trips: every field of the config away from its default, so a field the
// checkpoint drops shows.
inline ModelConfig off_default_moe_config() {
  return {.vocab_size = 19, .d_model = 16, .n_layers = 2, .n_heads = 2, .n_experts = 4, .top_k = 2, .d_ff = 12,
          .shared_expert_ff = 8, .max_seq_len = 24, .rope_theta = 500.0f, .norm_eps = 1e-6f,
          .norm_topk_prob = false, .scoring = Scoring::sigmoid, .expert_bias = true, .bias_update_rate = 3e-3f,
          .load_balance = LoadBalance::seq_aux_loss, .aux_loss_coef = 0.015f, .z_loss_coef = 1e-4f,
          .init_std = 0.03f};
}

// The smallest MoE with an expert bias: files of a few kilobytes (integrity tests).
inline ModelConfig smallest_moe_config() {
  return {.vocab_size = 11, .d_model = 8, .n_layers = 1, .n_heads = 2, .n_experts = 4, .top_k = 2, .d_ff = 8,
          .max_seq_len = 12, .expert_bias = true};
}

}  // namespace moerl::test
