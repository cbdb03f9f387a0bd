// step_hooks.h — the named points of one RL step where stabilisers act, the way LAMMPS fixes hook
// into post_force / end_of_step instead of `if`s inside the integrator. The trainer calls every
// active hook at each point, in registry order; a hook overrides the points it needs. The
// stabilisers themselves (router KL, routing calibration, gradient surgery, aux-loss-free expert
// bias, router temperature control) are in sim/rl/stabiliser_hooks.cpp, their formulas in
// sim/rl/router_stabilisers.h and docs/stabilisers.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "sim/rl/registry.h"
#include "sim/rl/step_state.h"

namespace moerl {

class RunResults;

// What a hook may touch: the trained model (router control, gradients, expert bias), the
// stale-rollout model when there is one, and the step's state.
struct HookContext {
  Model& model;
  Model* rollout_model;  // nullptr unless rl.rollout_staleness > 0
  StepState& step;
};

class StepHook {
 public:
  virtual ~StepHook() = default;
  // Once, when the trainer is built (before the stale-rollout model copies the router control).
  virtual void init(Model& model) { (void)model; }
  // What the π_old forward must also return.
  virtual void request_old(ForwardRequest* req) const { (void)req; }
  // π_old is known (before the mismatch metrics): targets of the whole step.
  virtual void after_old_logprobs(HookContext& c, RunResults* res) { (void)c, (void)res; }
  // Around one mini-batch's forward, backward and optimizer step.
  virtual void before_forward(HookContext& c, Minibatch& mb) { (void)c, (void)mb; }
  virtual void before_backward(HookContext& c, Minibatch& mb) { (void)c, (void)mb; }
  virtual void after_backward(HookContext& c, Minibatch& mb) { (void)c, (void)mb; }
  virtual void after_optimizer_step(HookContext& c, Minibatch& mb) { (void)c, (void)mb; }
  // After the last mini-batch, before the evaluation: the step's own metrics.
  virtual void end_of_step(HookContext& c, RunResults* res) { (void)c, (void)res; }
};

// One row per stabiliser: active for a configuration, its factory, the metrics it reports.
struct StabiliserInfo {
  const char* name;
  const char* doc;
  bool (*active)(const RlConfig& rl, const ModelConfig& model);
  std::unique_ptr<StepHook> (*create)(const RlConfig& rl, const ModelConfig& model);
  std::vector<ExtraMetric> metrics;  // recorded with `off` in runs where the stabiliser is off
};

const std::vector<StabiliserInfo>& stabiliser_registry();

// The hooks of a run, in registry order, and the off values of the inactive ones' metrics.
struct StepHooks {
  std::vector<std::unique_ptr<StepHook>> active;
  std::vector<ExtraMetric> off_metrics;
};
StepHooks step_hooks_create(const RlConfig& rl, const ModelConfig& model);

}  // namespace moerl
