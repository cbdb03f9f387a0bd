// rl_config.cpp — names, alias resolution and validation of the [rl] section.
#include "sim/rl/rl_config.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "sim/rl/registry.h"
#include "sim/tasks/task.h"

namespace moerl {

void RlConfig::resolve() {
  const AlgorithmInfo* a = algorithm_find(loss.algorithm);
  if (!a) return;  // validate() names the bad value
  if (loss.clip_low < 0.0f) loss.clip_low = a->clip_low;
  if (loss.clip_high < 0.0f) loss.clip_high = a->clip_high;
  if (a->routing_replay) routing_replay = *a->routing_replay;
  if (a->correction) loss.correction = *a->correction;
  for (const AlgorithmParam& p : algorithm_loss_row(*a).params) loss.params.emplace(p.key, p.value);  // unset ones
}

void RlConfig::validate() const {
  auto bad = [](const std::string& key, const std::string& v, const std::string& allowed) {
    throw std::invalid_argument("rl." + key + " = " + v + ": " + allowed);
  };
  const AlgorithmInfo* algo = algorithm_find(loss.algorithm);
  if (!algo) bad("algorithm", loss.algorithm, algorithm_must_be());
  if (steps < 1) bad("steps", std::to_string(steps), "must be >= 1");
  if (prompts_per_step < 1) bad("prompts_per_step", std::to_string(prompts_per_step), "must be >= 1");
  if (group_size < 1) bad("group_size", std::to_string(group_size), "must be >= 1");
  // A step's rollout holds every sequence of the step at once: an absurd count is refused by name,
  // before any work, instead of failing with std::bad_alloc (or an int overflow) inside the run.
  constexpr int64_t kMaxSequencesPerStep = int64_t{1} << 20;
  if (int64_t{prompts_per_step} * group_size > kMaxSequencesPerStep) {
    // named by the larger factor first, so that the message blames where that value came from
    const bool prompts = prompts_per_step >= group_size;
    bad(prompts ? "prompts_per_step" : "group_size", std::to_string(prompts ? prompts_per_step : group_size),
        std::string("with rl.") + (prompts ? "group_size = " + std::to_string(group_size)
                                           : "prompts_per_step = " + std::to_string(prompts_per_step)) +
            ", " + std::to_string(int64_t{prompts_per_step} * group_size) +
            " sequences per step: rl.prompts_per_step × rl.group_size must be at most " +
            std::to_string(kMaxSequencesPerStep) + " (one step's rollout holds them all)");
  }
  if (minibatches < 1 || (prompts_per_step * group_size) % minibatches != 0)
    bad("minibatches", std::to_string(minibatches),
        "must divide the sequences per step (prompts_per_step × group_size = " +
            std::to_string(prompts_per_step * group_size) + ")");
  if (max_response_len < 0) bad("max_response_len", std::to_string(max_response_len), "must be >= 0 (0 = the task's longest answer)");
  if (!std::isfinite(truncated_reward)) bad("truncated_reward", std::to_string(truncated_reward), "must be finite");
  if (overlong_buffer < 0) bad("overlong_buffer", std::to_string(overlong_buffer), "must be >= 0 (0 = off)");
  if (!(overlong_penalty >= 0.0f && std::isfinite(overlong_penalty)))
    bad("overlong_penalty", std::to_string(overlong_penalty), "must be finite and >= 0");
  if (!(adv_eps > 0.0f))
    bad("adv_eps", std::to_string(adv_eps), "must be > 0 (it keeps the advantages of a group whose rewards are all equal finite)");
  if (!(sampling.temperature >= 0.0f)) bad("temperature", std::to_string(sampling.temperature), "must be >= 0");
  if (!(sampling.top_p > 0.0f && sampling.top_p <= 1.0f)) bad("top_p", std::to_string(sampling.top_p), "must be in (0, 1]");
  if (!(loss.clip_low >= 0.0f && loss.clip_low <= 1.0f))
    bad("clip_low", std::to_string(loss.clip_low), "must be in [0, 1] (1: no lower bound, 1 - clip_low = 0)");
  if (!(loss.clip_high >= 0.0f)) bad("clip_high", std::to_string(loss.clip_high), "must be >= 0");
  if (loss.dual_clip != 0.0f && !(loss.dual_clip > 1.0f)) bad("dual_clip", std::to_string(loss.dual_clip), "must be 0 (off) or > 1");
  if (!(loss.correction_cap > 0.0f)) bad("correction_cap", std::to_string(loss.correction_cap), "must be > 0");
  if (!(loss.correction_cap_low >= 0.0f && loss.correction_cap_low <= loss.correction_cap))
    bad("correction_cap_low", std::to_string(loss.correction_cap_low), "must be in [0, rl.correction_cap]");
  if (!(loss.seq_mask_low >= 0.0f && loss.seq_mask_low <= loss.seq_mask_high))
    bad("seq_mask_low", std::to_string(loss.seq_mask_low), "must be in [0, rl.seq_mask_high]");
  if (!(loss.seq_k3_max >= 0.0f)) bad("seq_k3_max", std::to_string(loss.seq_k3_max), "must be >= 0");
  if (!(loss.icepop_low >= 0.0f && loss.icepop_low < loss.icepop_high))
    bad("icepop_low", std::to_string(loss.icepop_low), "must be in [0, rl.icepop_high)");
  if (!(loss.rspo_floor >= 0.0f && loss.rspo_floor <= 1.0f)) bad("rspo_floor", std::to_string(loss.rspo_floor), "must be in [0, 1]");
  if (!(loss.kl_coef >= 0.0f)) bad("kl_coef", std::to_string(loss.kl_coef), "must be >= 0");
  if (!(router_kl_coef >= 0.0f)) bad("router_kl_coef", std::to_string(router_kl_coef), "must be >= 0");
  if (!(calib_coef >= 0.0f)) bad("calib_coef", std::to_string(calib_coef), "must be >= 0");
  if (calib_every < 1) bad("calib_every", std::to_string(calib_every), "must be >= 1");
  if (!(calib_temperature > 0.0f)) bad("calib_temperature", std::to_string(calib_temperature), "must be > 0");
  if (router_temp_every < 0) bad("router_temp_every", std::to_string(router_temp_every), "must be >= 0");
  if (!(router_temp.down > 0.0f)) bad("router_temp_down", std::to_string(router_temp.down), "must be > 0");
  if (!(router_temp.up > 0.0f)) bad("router_temp_up", std::to_string(router_temp.up), "must be > 0");
  if (!(router_temp.min_utilisation >= 0.0 && router_temp.min_utilisation <= 1.0))
    bad("router_temp_min_util", std::to_string(router_temp.min_utilisation), "must be in [0, 1]");
  if (!(router_temp.monopoly > 0.0 && router_temp.monopoly <= 1.0))
    bad("router_temp_monopoly", std::to_string(router_temp.monopoly), "must be in (0, 1]");
  if (rollout_staleness < 0) bad("rollout_staleness", std::to_string(rollout_staleness), "must be >= 0");
  // One forward holds every held-out sequence of an evaluation (and of the drift probe): a count
  // beyond this is refused by name here, not met by std::bad_alloc in the middle of a run.
  constexpr int kMaxEvalSequences = 1 << 16;
  const std::string at_most = " (one forward holds them all)";
  if (eval_prompts < 1 || eval_prompts > kMaxEvalSequences)
    bad("eval_prompts", std::to_string(eval_prompts), "must be in [1, " + std::to_string(kMaxEvalSequences) + "]" + at_most);
  if (drift_probes < 0 || drift_probes > kMaxEvalSequences)
    bad("drift_probes", std::to_string(drift_probes),
        "must be in [0, " + std::to_string(kMaxEvalSequences) + "] (0 = off)" + at_most);
  if (eval_every < 0) bad("eval_every", std::to_string(eval_every), "must be >= 0");
  if (checkpoint_every < 0) bad("checkpoint_every", std::to_string(checkpoint_every), "must be >= 0");
  if (!(collapse_frac >= 0.0f && collapse_frac <= 1.0f)) bad("collapse_frac", std::to_string(collapse_frac), "must be in [0, 1]");
  if (collapse_window < 1) bad("collapse_window", std::to_string(collapse_window), "must be >= 1");
  if (collapse_patience < 1) bad("collapse_patience", std::to_string(collapse_patience), "must be >= 1");
  precursors.validate();
  // the algorithm's own keys: only its own, each in its range
  for (const auto& [key, v] : loss.params) {
    const AlgorithmParam* p = algorithm_param_find(key);
    const std::string value = p && p->boolean ? (v != 0.0f ? "true" : "false") : std::to_string(v);
    if (!p) bad(key, value, "no rl.algorithm reads this key");
    if (!algorithm_reads_param(loss.algorithm, key))
      bad(key, value, "read only by rl.algorithm = " + algorithm_param_readers(key) + " (rl.algorithm is " + loss.algorithm + ")");
    const bool above = p->lo_open ? v > p->lo : v >= p->lo;
    if (!(above && v <= p->hi && std::isfinite(v))) {
      const auto num = [](float x) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
        return std::string(buf);
      };
      std::string allowed = "must be ";
      if (std::isinf(p->hi)) allowed += std::string(p->lo_open ? "> " : ">= ") + num(p->lo);
      else allowed += std::string("in ") + (p->lo_open ? "(" : "[") + num(p->lo) + ", " + num(p->hi) + "]";
      bad(key, value, allowed);
    }
  }
  if (algo->routing_replay && routing_replay != *algo->routing_replay)
    bad("routing_replay", routing_replay_name(routing_replay),
        std::string(algo->name) + " means routing_replay = " + routing_replay_name(*algo->routing_replay));
}

int rl_response_limit(const RlConfig& rl, const Task& task) {
  const int A = task.max_answer_len();
  if (!task.ends_at_eos() && rl.max_response_len != 0 && rl.max_response_len != A)
    throw std::invalid_argument("rl.max_response_len = " + std::to_string(rl.max_response_len) + ": task." +
                                task.name() + " has fixed-length answers of " + std::to_string(A) +
                                " tokens, so it must be 0 or " + std::to_string(A) +
                                " (task.eos = true makes the answers end at EOS)");
  const int limit = rl.max_response_len > 0 ? rl.max_response_len : A;
  if (rl.overlong_buffer >= limit)
    throw std::invalid_argument("rl.overlong_buffer = " + std::to_string(rl.overlong_buffer) +
                                ": must be below the response length limit (" + std::to_string(limit) + ")");
  return limit;
}

}  // namespace moerl
