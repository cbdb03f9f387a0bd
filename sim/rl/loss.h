// loss.h — policy losses of the RL algorithms (formulas and sources: docs/algorithms.md), per
// token, with their exact gradient with respect to the current log-probs.
//
// The model's backward takes dLoss/dlogp_new, so every algorithm here is a function
//   (logp_new, logp_old, logp_rollout, mask, advantages, [γ], [logp_ref]) → (loss, dloss/dlogp_new)
// evaluated on one mini-batch of S sequences × R response tokens. Stop-gradient quantities (π_old,
// π_rollout, advantages, importance weights, RSPO's γ) enter as constants.
//
// Variants register by name, each in its own file (sim/rl/registry.h: name, factory, defaults,
// forced choices, keys, doc, extra metrics); `r3` is grpo with rollout routing replay (a routing
// choice, not a loss).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/enum_names.h"
#include "kernels/policy_loss_params.h"
#include "sim/rl/positions.h"

namespace moerl {

// How per-token losses become the mini-batch loss (docs/algorithms.md, "Losses").
// With m the mask, n_i = Σ_t m_it, N = Σ_i n_i, S' the sequences with n_i > 0, L a constant:
//  token-mean              Σ_i Σ_t m·ℓ / N                (DAPO)
//  seq-mean-token-mean     Σ_i (Σ_t m·ℓ / n_i) / S'       (the original GRPO)
//  seq-mean-token-sum      Σ_i Σ_t m·ℓ / S'
//  seq-mean-token-sum-norm Σ_i Σ_t m·ℓ / (S'·L)           (Dr. GRPO: L = rl.max_response_len)
// They agree up to constants when every response has the same length; with lengths of their own
// they weight long and short responses differently.
enum class Aggregation : uint8_t { token_mean = 0, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm };
inline constexpr EnumNames<Aggregation, 4> kAggregationNames{{"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"}};
static_assert(static_cast<int>(Aggregation::seq_mean_token_sum_norm) + 1 == kAggregationNames.size());
inline const char* aggregation_name(Aggregation v) { return kAggregationNames.name(v); }
inline bool aggregation_parse(std::string_view s, Aggregation* out) { return kAggregationNames.parse(s, out); }

// Train/inference importance correction applied to every token's policy-gradient term
// (docs/algorithms.md, "Rollout corrections"), with ρ_t = π_old/π_rollout (a constant).
// Token level: tis w = clamp(ρ, C_low, C); mis w = ρ·1[ρ ≤ C]; icepop w = ρ·1[α ≤ ρ ≤ β].
// Sequence level (one weight on every token of sequence i):
// seq-tis w = min(Π_t ρ_t, C); seq-tis-geo w = min(exp(mean_t log ρ_t), C);
// seq-mis w = 1[lo ≤ exp(mean_t log ρ_t) ≤ hi]; tis+seq-mis w = clamp(ρ_t, C_low, C)·seq-mis;
// seq-max-k3 w = 1[max_t (ρ_t − 1 − log ρ_t) ≤ k]. Masked/zeroed tokens keep counting in the
// denominators.
enum class Correction : uint8_t { none = 0, tis, mis, icepop, seq_tis, seq_tis_geo, seq_mis, tis_seq_mis, seq_max_k3 };
// A new Correction needs its name here and its row (weights, level, doc) in sim/rl/corrections.cpp;
// the count is the names'.
inline constexpr auto kCorrectionNames = enum_names<Correction>(
    {"none", "tis", "mis", "icepop", "seq-tis", "seq-tis-geo", "seq-mis", "tis+seq-mis", "seq-max-k3"});
inline constexpr int kCorrectionCount = static_cast<int>(kCorrectionNames.size());
static_assert(static_cast<int>(Correction::seq_max_k3) + 1 == kCorrectionCount);
inline const char* correction_name(Correction v) { return kCorrectionNames.name(v); }
inline bool correction_parse(std::string_view s, Correction* out) { return kCorrectionNames.parse(s, out); }

struct LossConfig {
  std::string algorithm = "grpo";  // a name of the algorithm registry (sim/rl/registry.h)
  float clip_low = 0.2f;           // ε_low  (gspo: 3e-4)
  float clip_high = 0.2f;          // ε_high (gspo: 4e-4)
  float dual_clip = 0.0f;          // c of the dual clip for A < 0 (0 = off; verl uses 3)
  Aggregation aggregation = Aggregation::token_mean;  // gspo forces seq_mean_token_mean
  Correction correction = Correction::none;  // an algorithm's row may force one (icepop)
  float correction_cap = 2.0f;     // C of tis / mis / seq-tis / seq-tis-geo / tis+seq-mis
  float correction_cap_low = 0.0f; // C_low: lower truncation of tis and tis+seq-mis (0 = none)
  float seq_mask_low = 0.99f;      // lo of seq-mis (slime/Miles: [0.99, 1.001])
  float seq_mask_high = 1.001f;    // hi of seq-mis
  float seq_k3_max = 0.01f;        // k of seq-max-k3 (verl's k3 rejection threshold)
  float icepop_low = 0.5f;         // α
  float icepop_high = 5.0f;        // β
  float rspo_floor = 0.1f;         // γ_min
  float kl_coef = 0.0f;            // β of the k3 KL to the reference policy (0 = off)
  // Keys of the algorithm's own (AlgorithmInfo::params, "sapo_tau_pos" for rl.sapo_tau_pos): set
  // by the scenario, the rest filled with their defaults by RlConfig::resolve.
  std::map<std::string, float> params = {};
  // params[key], or the key's registered default when unset; throws std::logic_error for a key no
  // algorithm registers (sim/rl/algorithm_registry.cpp).
  float param(const std::string& key) const;
};

// One mini-batch. Arrays are [S, R] unless said otherwise.
struct LossBatch {
  int S = 0, R = 0;
  const float* logp_new = nullptr;
  const float* logp_old = nullptr;
  const float* logp_rollout = nullptr;
  const float* mask = nullptr;        // 1 for response tokens that count, else 0
  const float* advantages = nullptr;  // [S]
  const float* gamma = nullptr;       // RSPO router-shift weights (set by Rspo::prepare; null = 1)
  const float* logp_ref = nullptr;    // reference policy (kl_coef > 0 only)
  // Denominators of the aggregation: the global token / sequence counts of the whole optimizer
  // batch (across mini-batch accumulation and data-parallel ranks). 0 = this mini-batch's own.
  double norm_tokens = 0.0;
  double norm_seqs = 0.0;
  // L of seq-mean-token-sum-norm: the constant length normaliser (the run's rl.max_response_len);
  // 0 = R, this batch's response positions.
  double norm_len = 0.0;
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
  double ratio_max_neg_adv = 0.0;  // largest ratio of a masked token with A < 0 (0 when none)
};

class RunResults;

// What an algorithm asks of the step beyond the log-probs, advantages and mask every loss gets.
struct AlgorithmNeeds {
  // π_θ's router log-probs at π_old's top-k experts, beside π_old's own (RSPO's router shift):
  // the mini-batch forward probes π_old's ids, and MinibatchView carries both (MoE models only).
  bool router_shift = false;
};

// What the step offers an algorithm preparing one mini-batch, after its forward and before the
// loss. This rank runs forward on `mine`, its block of the mini-batch; the loss sees all of it.
struct MinibatchView {
  ResponseSlice slice;             // P, R, T
  int L = 0, K = 0;                // layers, experts per token
  int S_step = 0;                  // sequences of the whole step (rows of router_logp_old)
  int n_mine = 0;                  // this rank's sequences of the mini-batch
  const int* mine = nullptr;       // [n_mine] their indices in the step's batch
  const float* router_logp_new = nullptr;  // [L, n_mine·T, K] π_θ at π_old's experts (router_shift)
  const float* router_logp_old = nullptr;  // [L, S_step·T, K] π_old at its own experts
  // [n_mine, R] values of this rank's sequences → [S, R] of the whole mini-batch, in order (the
  // data-parallel all-gather; the identity on one rank).
  std::function<std::vector<double>(const std::vector<double>&)> gather;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual const char* name() const = 0;
  virtual AlgorithmNeeds needs() const { return {}; }
  // Fills the inputs of `b` the algorithm owns (RSPO: gamma) for this mini-batch.
  virtual void prepare(LossBatch* b, const MinibatchView& v) { (void)b, (void)v; }
  virtual void loss(LossOutput* out, const LossBatch& b) const = 0;
  // The same loss as the backend's policy_loss_rows op runs it where the log-probs are (RlTrainer's
  // resident path): its settings and the aggregation it uses; false when the algorithm has no such
  // form (the step then brings the log-probs to the host and calls loss()).
  virtual bool device_form(PolicyLossParams* p, Aggregation* agg) const { (void)p, (void)agg; return false; }
  // The algorithm's extra metrics (its registry row's `metrics`): observed after every
  // mini-batch's loss, written (and reset) once at the end of the step.
  virtual void observe(const LossOutput& out) { (void)out; }
  virtual void record(RunResults* res) { (void)res; }
};

// The op's settings of a run's loss config, for the given ratio (the algorithm adds what it forces).
PolicyLossParams policy_loss_params(const LossConfig& c, PolicyRatio ratio);

// Creates the named algorithm; throws std::invalid_argument naming the key and the known names.
std::unique_ptr<Algorithm> algorithm_create(const LossConfig& cfg);

}  // namespace moerl
