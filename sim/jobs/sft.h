// sft.h — supervised warm-up with teacher forcing: the base policy RL starts from, and its cache.
// Loss: −mean log p(answer tokens | prompt, previous answer tokens) over a batch of task examples
// (split 2 of the task's stream: never the RL prompts nor the held-out set). AdamW, warm-up then
// cosine schedule. Stopping early on purpose (moderate accuracy) leaves RL room to improve and
// to degrade.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/model.h"
#include "sim/step/optimizer.h"
#include "sim/tasks/task.h"

namespace moerl {

struct SftConfig {
  SftConfig() { optim.lr = 1e-3f; optim.warmup_steps = 10; }
  int steps = 0;          // 0 = the freshly initialised model is the base
  int batch = 64;         // examples per step
  OptimConfig optim;      // lr, betas, clip, warm-up of the warm-up
  void validate() const;
};

struct SftReport {
  double final_loss = 0.0;
  double eval_accuracy = 0.0;  // greedy exact match on the held-out set (fp32-ref)
  int steps = 0;
  // The trained router's balance on held-out tokens (MoE models; has_load false for the dense
  // twin): the expert load of the held-out set's prompts and answers, teacher-forced under
  // fp32-ref (expert_load_stats, models/router.h).
  bool has_load = false;
  double load_cv = 0.0, load_max_over_mean = 0.0;
  int dead_experts = 0;
};

// The expert bias (model.expert_bias) follows its update rule (router_bias_update) after every
// step, from the step's own load, as in RL. Trains model in place. progress(step, loss) is called after each step (may be empty).
SftReport sft_train(Model* model, const SftConfig& cfg, const Task& task, uint64_t seed,
                    int eval_prompts, const std::function<void(int, double)>& progress);

// The held-out balance fields of *rep: n held-out examples (split 1), teacher-forced under `ref`.
void sft_heldout_load(SftReport* rep, Model* model, const Task& task, uint64_t seed, int n, const NumericsProfile& ref);

}  // namespace moerl
