// rl_config.h — the [rl] section: one RL run's algorithm, data flow and schedule.
#pragma once

#include <string>

#include "sim/rl/loss.h"
#include "sim/rl/precursors.h"
#include "sim/rl/rollout.h"
#include "sim/rl/router_stabilisers.h"

namespace moerl {

// Where π_old comes from (verl's rollout correction, docs/algorithms.md): recomputed by the train engine (verl's default
// flow) or taken from the rollout's log-probs (bypass mode).
enum class OldLogprobs : uint8_t { recompute = 0, rollout };
// Routing of the train engine: own top-k, π_old's recorded routing (R2), or the rollout's (R3).
enum class RoutingReplay : uint8_t { none = 0, old, rollout };
inline constexpr EnumNames<OldLogprobs, 2> kOldLogprobsNames{{"recompute", "rollout"}};
static_assert(static_cast<int>(OldLogprobs::rollout) + 1 == kOldLogprobsNames.size());
inline const char* old_logprobs_name(OldLogprobs v) { return kOldLogprobsNames.name(v); }
inline bool old_logprobs_parse(std::string_view s, OldLogprobs* out) { return kOldLogprobsNames.parse(s, out); }
inline constexpr EnumNames<RoutingReplay, 3> kRoutingReplayNames{{"none", "old", "rollout"}};
static_assert(static_cast<int>(RoutingReplay::rollout) + 1 == kRoutingReplayNames.size());
inline const char* routing_replay_name(RoutingReplay v) { return kRoutingReplayNames.name(v); }
inline bool routing_replay_parse(std::string_view s, RoutingReplay* out) { return kRoutingReplayNames.parse(s, out); }

struct RlConfig {
  RlConfig() { loss.clip_low = loss.clip_high = -1.0f; }  // negative: the algorithm's default
  LossConfig loss;                 // algorithm, clip range, aggregation, corrections, kl
  OldLogprobs old_logprobs = OldLogprobs::recompute;
  RoutingReplay routing_replay = RoutingReplay::none;  // `r3` forces rollout
  int steps = 100;                 // RL steps (one rollout batch each)
  int prompts_per_step = 32;
  int group_size = 8;
  int minibatches = 1;             // optimizer steps per rollout batch (later ones are off-policy)
  SamplingConfig sampling;
  // Responses of their own length (EOS tasks; docs/algorithms.md, "Lengths"):
  int max_response_len = 0;        // the length limit (0 = the task's longest answer); a response
                                   // that reaches it without EOS is truncated
  float truncated_reward = 0.0f;   // the reward of a truncated response
  int overlong_buffer = 0;         // DAPO's soft overlong penalty over the last this many tokens
                                   // before the limit (0 = off) ...
  float overlong_penalty = 1.0f;   // ... falling linearly from 0 to −this at the limit
  bool mask_truncated = false;     // truncated responses are left out of the loss
  bool filter_groups = false;      // DAPO's dynamic sampling: groups whose rewards are all equal
                                   // are left out of the loss (the batch shrinks; no refill)
  bool adv_std_norm = true;        // false: Dr.GRPO (no division by the group std)
  float adv_eps = 1e-6f;
  bool freeze_router = false;
  // Load balancing during RL (docs/stabilisers.md, "Balancing during RL"); the base's own scheme
  // (model.load_balance, model.expert_bias) is the model's and is not changed by these:
  bool aux_loss = true;            // the model's load-balancing loss stays on during RL (false: off,
                                   // as verl's Qwen3-MoE recipe turns it off)
  bool bias_update = true;         // the expert bias keeps its update rule during RL (false: frozen
                                   // at the base's values, as frameworks freeze it late in training)
  int rollout_staleness = 0;       // rollouts use the weights of this many optimizer steps ago
                                   // (an overlapped, asynchronous rollout/training pipeline)
  bool shared_prefix_routing = false;  // a prompt's routing is computed once per group and
                                       // reused by its samples (prefix KV-cache reuse)
  // Router-side stabilisers (docs/stabilisers.md), all off by default:
  float router_kl_coef = 0.0f;     // KL(router ‖ π_old's detached router) on every mini-batch
  float calib_coef = 0.0f;         // λ of the routing-calibration loss KL(train ‖ inference router)
  int calib_every = 1;             // calibration on every N-th step
  RampSchedule calib_schedule = RampSchedule::constant;
  float calib_temperature = 1.0f;  // T of the top-k renormalised distributions
  bool grad_surgery = false;       // project conflicting regulariser gradients off the routers'
  int router_temp_every = 0;       // router temperature control every N steps (0 = off)
  RouterTemperatureRule router_temp;
  int eval_every = 10;             // steps between greedy evaluations (0 = only at the end)
  int eval_prompts = 256;
  int drift_probes = 0;            // held-out sequences whose routing is compared with the base
                                   // policy's at each evaluation (router_drift; 0 = off, MoE only)
  std::string eval_profile = "fp32-ref";
  int checkpoint_every = 0;        // steps between checkpoints (0 = only at the end)
  float collapse_frac = 0.5f;      // collapse: the reward's moving average below this share of
  int collapse_window = 10;        // its running peak (average over this many steps) ...
  int collapse_patience = 10;      // ... for this many consecutive steps; or any NaN/inf
  bool continue_after_collapse = false;
  PrecursorConfig precursors;      // the [precursors] section: collapse precursor flags

  // Resolves aliases (r3 → grpo + rollout replay; icepop's correction) and algorithm defaults.
  void resolve();
  void validate() const;
};

class Task;
// The run's response length limit: rl.max_response_len, or the task's longest answer when 0; a
// fixed-length task's answers have exactly their length, so it takes no other. Throws
// std::invalid_argument naming the key, the value and what is allowed.
int rl_response_limit(const RlConfig& rl, const Task& task);

}  // namespace moerl
