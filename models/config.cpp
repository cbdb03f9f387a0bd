// config.cpp — names, parsing and validation of the model config.
#include "models/config.h"

#include <stdexcept>
#include <string>

namespace moerl {

namespace {
[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& allowed) {
  throw std::invalid_argument("model." + key + " = " + value + ": " + allowed);
}
void check_range(const char* key, long v, long lo, long hi) {
  if (v < lo || v > hi)
    bad(key, std::to_string(v), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
}  // namespace

void ModelConfig::validate() const {
  check_range("vocab_size", vocab_size, 2, 1 << 20);
  check_range("d_model", d_model, 2, 1 << 16);
  check_range("n_layers", n_layers, 1, 1024);
  check_range("n_heads", n_heads, 1, d_model);
  if (d_model % n_heads != 0)
    bad("n_heads", std::to_string(n_heads), "must divide model.d_model = " + std::to_string(d_model));
  if (head_dim() % 2 != 0)
    bad("n_heads", std::to_string(n_heads),
        "head width d_model/n_heads = " + std::to_string(head_dim()) + " must be even for RoPE");
  check_range("n_experts", n_experts, 0, 256);
  if (is_moe()) check_range("top_k", top_k, 1, n_experts);
  else check_range("top_k", top_k, 1, 64);
  check_range("d_ff", d_ff, 1, 1 << 20);
  check_range("shared_expert_ff", shared_expert_ff, 0, 1 << 20);
  if (!is_moe() && shared_expert_ff > 0)
    bad("shared_expert_ff", std::to_string(shared_expert_ff), "needs model.n_experts > 0");
  check_range("max_seq_len", max_seq_len, 2, 1 << 16);
  if (!(rope_theta > 1.0f)) bad("rope_theta", std::to_string(rope_theta), "must be > 1");
  if (!(norm_eps > 0.0f && norm_eps < 1.0f)) bad("norm_eps", std::to_string(norm_eps), "must be in (0, 1)");
  if (!(init_std > 0.0f && init_std < 10.0f)) bad("init_std", std::to_string(init_std), "must be in (0, 10)");
  if (!(bias_update_rate >= 0.0f)) bad("bias_update_rate", std::to_string(bias_update_rate), "must be >= 0");
  if (!(aux_loss_coef >= 0.0f)) bad("aux_loss_coef", std::to_string(aux_loss_coef), "must be >= 0");
  if (!(z_loss_coef >= 0.0f)) bad("z_loss_coef", std::to_string(z_loss_coef), "must be >= 0");
  if (expert_bias && !is_moe()) bad("expert_bias", "true", "needs model.n_experts > 0");
}

}  // namespace moerl
