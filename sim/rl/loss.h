// loss.h — policy losses of the RL algorithms (formulas and sources: docs/algorithms.md), per
// token, with their exact gradient with respect to the current log-probs.
//
// The model's backward takes dLoss/dlogp_new, so every algorithm here is a function
//   (logp_new, logp_old, logp_rollout, mask, advantages, [γ], [logp_ref]) → (loss, dloss/dlogp_new)
// evaluated on one mini-batch of S sequences × R response tokens. Stop-gradient quantities (π_old,
// π_rollout, advantages, importance weights, RSPO's γ) enter as constants.
//
// Variants register by name (algorithm_create): grpo, gspo, rspo, icepop; `r3` is grpo with
// rollout routing replay (a routing choice, see sim/rl/algorithm.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/enum_names.h"

namespace moerl {

// How per-token losses become the mini-batch loss (docs/algorithms.md, "Losses").
enum class Aggregation : uint8_t { token_mean = 0, seq_mean_token_mean, seq_mean_token_sum };
inline constexpr EnumNames<Aggregation, 3> kAggregationNames{{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum"}};
static_assert(static_cast<int>(Aggregation::seq_mean_token_sum) + 1 == kAggregationNames.size());
inline const char* aggregation_name(Aggregation v) { return kAggregationNames.name(v); }
inline bool aggregation_parse(std::string_view s, Aggregation* out) { return kAggregationNames.parse(s, out); }

// Train/inference importance correction applied to every token's policy-gradient term
// (docs/algorithms.md, "Rollout corrections"), with ρ_t = π_old/π_rollout (a constant).
// Token level: tis w = clamp(ρ, C_low, C); mis w = ρ·1[ρ ≤ C]; icepop w = ρ·1[α ≤ ρ ≤ β].
// Sequence level (one weight on every token of sequence i, sim/rl/seq_corrections.h):
// seq-tis w = min(Π_t ρ_t, C); seq-tis-geo w = min(exp(mean_t log ρ_t), C);
// seq-mis w = 1[lo ≤ exp(mean_t log ρ_t) ≤ hi]; tis+seq-mis w = clamp(ρ_t, C_low, C)·seq-mis;
// seq-max-k3 w = 1[max_t (ρ_t − 1 − log ρ_t) ≤ k]. Masked/zeroed tokens keep counting in the
// denominators.
enum class Correction : uint8_t { none = 0, tis, mis, icepop, seq_tis, seq_tis_geo, seq_mis, tis_seq_mis, seq_max_k3 };
inline constexpr int kCorrectionCount = 9;
// A new Correction needs its name here and its weight in ppo_terms.h / seq_corrections.cpp.
inline constexpr EnumNames<Correction, kCorrectionCount> kCorrectionNames{{"none", "tis", "mis", "icepop", "seq-tis", "seq-tis-geo", "seq-mis", "tis+seq-mis", "seq-max-k3"}};
static_assert(static_cast<int>(Correction::seq_max_k3) + 1 == kCorrectionNames.size());
inline const char* correction_name(Correction v) { return kCorrectionNames.name(v); }
inline bool correction_parse(std::string_view s, Correction* out) { return kCorrectionNames.parse(s, out); }

struct LossConfig {
  std::string algorithm = "grpo";  // grpo | gspo | rspo | icepop | r3
  float clip_low = 0.2f;           // ε_low  (gspo: 3e-4)
  float clip_high = 0.2f;          // ε_high (gspo: 4e-4)
  float dual_clip = 0.0f;          // c of the dual clip for A < 0 (0 = off; verl uses 3)
  Aggregation aggregation = Aggregation::token_mean;  // gspo forces seq_mean_token_mean
  Correction correction = Correction::none;  // icepop forces Correction::icepop
  float correction_cap = 2.0f;     // C of tis / mis / seq-tis / seq-tis-geo / tis+seq-mis
  float correction_cap_low = 0.0f; // C_low: lower truncation of tis and tis+seq-mis (0 = none)
  float seq_mask_low = 0.99f;      // lo of seq-mis (slime/Miles: [0.99, 1.001])
  float seq_mask_high = 1.001f;    // hi of seq-mis
  float seq_k3_max = 0.01f;        // k of seq-max-k3 (verl's k3 rejection threshold)
  float icepop_low = 0.5f;         // α
  float icepop_high = 5.0f;        // β
  float rspo_floor = 0.1f;         // γ_min
  float kl_coef = 0.0f;            // β of the k3 KL to the reference policy (0 = off)
};

// One mini-batch. Arrays are [S, R] unless said otherwise.
struct LossBatch {
  int S = 0, R = 0;
  const float* logp_new = nullptr;
  const float* logp_old = nullptr;
  const float* logp_rollout = nullptr;
  const float* mask = nullptr;        // 1 for response tokens that count, else 0
  const float* advantages = nullptr;  // [S]
  const float* gamma = nullptr;       // RSPO router-shift weights (rspo only)
  const float* logp_ref = nullptr;    // reference policy (kl_coef > 0 only)
  // Denominators of the aggregation: the global token / sequence counts of the whole optimizer
  // batch (across mini-batch accumulation and data-parallel ranks). 0 = this mini-batch's own.
  double norm_tokens = 0.0;
  double norm_seqs = 0.0;
};

struct LossOutput {
  double loss = 0.0;            // policy loss + kl term, aggregated
  double kl_loss = 0.0;         // the k3 term alone (coefficient included)
  std::vector<float> dlogp;     // [S, R] dloss/dlogp_new
  std::vector<float> ratio;     // [S, R] the ratio the algorithm clips (r, s_i or γ·r)
  std::vector<float> weight;    // [S, R] correction weight (tis/mis/icepop) or γ (rspo), else 1
  std::vector<float> term;      // [S, R] per-token loss before aggregation
  double clipped_tokens = 0.0;  // masked tokens where the clipped branch was taken
  double masked_tokens = 0.0;   // masked tokens whose correction weight is 0 (mis / icepop)
  double tokens = 0.0;          // masked tokens in the mini-batch
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual const char* name() const = 0;
  virtual void loss(LossOutput* out, const LossBatch& b) const = 0;
};

// Creates the named algorithm; throws std::invalid_argument naming the key and the known names.
std::unique_ptr<Algorithm> algorithm_create(const LossConfig& cfg);
std::string algorithm_names();  // "grpo, gspo, icepop, r3, rspo"

}  // namespace moerl
