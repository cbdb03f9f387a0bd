// trainer.h — one RL run. A step is a sequence of named phases (docs/algorithms.md §1–6): sample
// prompts → rollout → rewards and group advantages → recompute π_old → measure the engines'
// mismatch → train mini-batches (the algorithm's loss, backward, AdamW) → record metrics.
// Stabilisers act at the step's named hook points (sim/rl/step_hooks.h). Steps are pure
// functions of (state, step index): every stream is keyed by the step, so a run resumed from a
// checkpoint continues bit-identically.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kernels/numerics.h"
#include "store/checkpoint.h"
#include "models/model.h"
#include "sim/step/optimizer.h"
#include "sim/io/results.h"
#include "sim/rl/positions.h"
#include "sim/rl/router_drift.h"
#include "sim/rl/rl_config.h"
#include "sim/rl/step_hooks.h"
#include "sim/rl/step_state.h"
#include "sim/tasks/task.h"

namespace moerl {

struct RlSetup {
  RlConfig rl;
  TaskConfig task;
  OptimConfig optim;
  NumericsProfile rollout, train, eval;  // profiles of the two engines and of evaluation
  uint64_t seed = 0;
  bool dump_tensors = false;  // per-token tensors of each step's first mini-batch
};

// Status of a run as stored in results (attribute `status`). `preempted`: stopped cleanly by a
// signal at a step boundary (sim/process/preempt.h), its checkpoint written; --resume continues it.
enum class RunStatus : uint8_t { running = 0, complete, collapsed, failed, preempted };
inline constexpr EnumNames<RunStatus, 5> kRunStatusNames{{"running", "complete", "collapsed", "failed", "preempted"}};
static_assert(static_cast<int>(RunStatus::preempted) + 1 == kRunStatusNames.size());
inline const char* run_status_name(RunStatus v) { return kRunStatusNames.name(v); }

class RlTrainer {
 public:
  // model holds the base policy (its parameters are trained in place).
  RlTrainer(const RlSetup& setup, Model* model);
  ~RlTrainer();

  // Runs step `step` (must be the next one) and records its metrics into results.
  void step(int64_t step, RunResults* results);
  // The greedy held-out evaluation under the eval profile (exact match and what the answers get
  // right: rollout_eval).
  EvalResult evaluate() const;

  // Collapse bookkeeping after a step: NaN/inf anywhere, or reward below collapse_frac × running
  // peak for collapse_patience steps. Returns true when the run is collapsed at this step.
  bool check_collapse(const RunResults& results) const;

  // Everything besides the model's parameters that a bit-identical resume needs: optimizer
  // moments and step count, the expert bias, the stale-rollout weight snapshots.
  void save_state(CheckpointExtras* ex) const;
  void load_state(const CheckpointExtras& ex);

 private:
  // The phases of step(), in order.
  StepState step_begin(int64_t step) const;
  void sample_prompts(StepState* st) const;
  void rollout(StepState* st);
  void compute_advantages(StepState* st) const;
  double overlong_penalty(int len) const;
  void recompute_old_logprobs(StepState* st, RunResults* res);
  void measure_mismatch(StepState* st, RunResults* res);
  struct PositionStats {  // per response token of the batch, in order
    std::vector<double> kl, log_ratio, logit_std, logit_margin;
  };
  PositionStats mismatch_position_stats(const StepState& st) const;
  void split_staleness_and_numerics(StepState* st, RunResults* res);
  void train_minibatches(StepState* st, RunResults* res);
  void record_answers(const StepState& st, RunResults* res) const;
  void record_metrics(StepState* st, RunResults* res);
  void record_expert_load(const StepState& st, RunResults* res) const;
  void record_router_drift(RunResults* res) const;
  // True when the policy loss runs where the model is (the backend's policy_loss_rows op on the
  // resident log-probs): parameters on a device, one data-parallel rank, no --dump-tensors (which
  // reads the per-token loss), and an algorithm with a device form (Algorithm::device_form).
  bool loss_on_device() const;
  void upload_loss_inputs(StepState* st) const;
  void minibatch_loss_on_device(const StepState& st, Minibatch* mb);
  // The parts of train_minibatches, per mini-batch.
  Minibatch minibatch_rows(const StepState& st, const std::vector<int>& order, int m) const;
  void minibatch_forward(const StepState& st, Minibatch* mb);
  MinibatchView minibatch_loss_batch(const StepState& st, Minibatch* mb) const;
  void minibatch_loss(const StepState& st, Minibatch* mb);
  void minibatch_backward(StepState* st, Minibatch* mb);
  void optimizer_step(Minibatch* mb);
  void minibatch_totals(StepState* st, const Minibatch& mb) const;
  void minibatch_dump(const StepState& st, const Minibatch& mb, RunResults* res) const;
  HookContext hook_context(StepState* st);

  RlSetup s_;
  Model* model_;
  std::unique_ptr<Task> task_;
  int response_limit_ = 0;  // R_max: rl.max_response_len, or the task's longest answer
  std::unique_ptr<Algorithm> algo_;
  StepHooks hooks_;  // the active stabilisers, and the metrics the inactive ones report
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<Model> ref_model_;  // frozen base policy for the k3 KL (kl_coef > 0)
  int64_t opt_step_ = 0;
  // Stale rollouts: weights (and expert bias) of the current and the last rollout_staleness
  // optimizer steps, oldest first; the rollout engine runs the oldest.
  struct Snapshot {
    std::vector<float> params, bias;
  };
  std::deque<Snapshot> snapshots_;
  std::unique_ptr<Model> rollout_model_;
  std::unique_ptr<RouterProbe> probe_;  // rl.drift_probes: the probe set and the base's routing
};

}  // namespace moerl
