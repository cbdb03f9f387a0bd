// config.h — the model's shape and router options: one typed struct, validated once.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/enum_names.h"

namespace moerl {

// How router logits become selection scores and gate weights (reference §7.1).
enum class Scoring : uint8_t { softmax = 0, sigmoid };
inline constexpr EnumNames<Scoring, 2> kScoringNames{{"softmax", "sigmoid"}};
static_assert(static_cast<int>(Scoring::sigmoid) + 1 == kScoringNames.size());
inline const char* scoring_name(Scoring v) { return kScoringNames.name(v); }
inline bool scoring_parse(std::string_view s, Scoring* out) { return kScoringNames.parse(s, out); }

// Load-balancing loss attached to every MoE layer (reference §7.2). The aux-loss-free expert bias
// is a separate switch (ModelConfig::expert_bias) because it is an update rule, not a loss.
enum class LoadBalance : uint8_t { none = 0, aux_loss, seq_aux_loss };
inline constexpr EnumNames<LoadBalance, 3> kLoadBalanceNames{{"none", "aux_loss", "seq_aux_loss"}};
static_assert(static_cast<int>(LoadBalance::seq_aux_loss) + 1 == kLoadBalanceNames.size());
inline const char* load_balance_name(LoadBalance v) { return kLoadBalanceNames.name(v); }
inline bool load_balance_parse(std::string_view s, LoadBalance* out) { return kLoadBalanceNames.parse(s, out); }

struct ModelConfig {
  int vocab_size = 64;      // V
  int d_model = 128;        // D
  int n_layers = 4;         // L
  int n_heads = 4;          // H (head width Dh = D / H, must be even for RoPE)
  int n_experts = 16;       // E; 0 = the dense twin
  int top_k = 2;            // K experts per token
  int d_ff = 256;           // F: expert width; the dense twin's MLP is top_k·d_ff wide
  int shared_expert_ff = 0; // width of an always-on shared expert (0 = none)
  int max_seq_len = 64;     // longest sequence the KV cache / RoPE tables hold
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool norm_topk_prob = true;           // renormalise the k gate weights to sum to 1
  Scoring scoring = Scoring::softmax;
  bool expert_bias = false;             // aux-loss-free selection bias b_e (DeepSeek-V3)
  float bias_update_rate = 1e-3f;       // u in b_e += u·sign(mean n − n_e)
  LoadBalance load_balance = LoadBalance::none;
  float aux_loss_coef = 1e-2f;          // c of the switch / sequence aux loss
  float z_loss_coef = 0.0f;             // c_z of the router z-loss (0 = off)
  float init_std = 0.02f;               // N(0, init_std²) for weights; norms start at 1

  bool is_moe() const { return n_experts > 0; }
  int head_dim() const { return d_model / n_heads; }
  int mlp_width() const { return is_moe() ? d_ff : top_k * d_ff; }  // dense twin: same active FFN
  // Throws std::invalid_argument("model.<key> = <value>: <what is allowed>") on a bad value.
  void validate() const;
};

}  // namespace moerl
