// trainer.h — one RL run: per step, sample prompts → rollout engine → rewards and group
// advantages → train engine (π_old, mini-batches with the algorithm's loss, AdamW) → metrics.
// Steps are pure functions of (state, step index): every stream is keyed by the step, so a run
// resumed from a checkpoint continues bit-identically.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "kernels/numerics.h"
#include "store/checkpoint.h"
#include "models/model.h"
#include "sim/optimizer.h"
#include "sim/io/results.h"
#include "sim/rl/rl_config.h"
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

// The positions whose outputs score the response: response token r (at position P+r) gets its
// log-prob, and its routing-flip count, from position P−1+r. [S·T] mask, 1 at P−1..T−2.
std::vector<uint8_t> rl_scored_positions_mask(int S, int P, int T);

// Status of a run as stored in results (attribute `status`).
enum class RunStatus : uint8_t { running = 0, complete, collapsed, failed };
inline constexpr EnumNames<RunStatus, 4> kRunStatusNames{{"running", "complete", "collapsed", "failed"}};
static_assert(static_cast<int>(RunStatus::failed) + 1 == kRunStatusNames.size());
inline const char* run_status_name(RunStatus v) { return kRunStatusNames.name(v); }

class RlTrainer {
 public:
  // model holds the base policy (its parameters are trained in place).
  RlTrainer(const RlSetup& setup, Model* model);
  ~RlTrainer();

  // Runs step `step` (must be the next one) and records its metrics into results.
  void step(int64_t step, RunResults* results);
  // Greedy exact-match accuracy on the held-out set under the eval profile.
  double evaluate() const;

  // Collapse bookkeeping after a step: NaN/inf anywhere, or reward below collapse_frac × running
  // peak for collapse_patience steps. Returns true when the run is collapsed at this step.
  bool check_collapse(const RunResults& results) const;

  // Everything besides the model's parameters that a bit-identical resume needs: optimizer
  // moments and step count, the expert bias, the stale-rollout weight snapshots.
  void save_state(CheckpointExtras* ex) const;
  void load_state(const CheckpointExtras& ex);

 private:
  RlSetup s_;
  Model* model_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<class Algorithm> algo_;
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
};

}  // namespace moerl
