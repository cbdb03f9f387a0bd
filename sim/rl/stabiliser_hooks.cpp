// stabiliser_hooks.cpp — the router-side stabilisers as step hooks (step_hooks.h), and their table.
// Formulas: sim/rl/router_stabilisers.h and docs/stabilisers.md.
#include <string>

#include "models/router.h"
#include "sim/io/results.h"
#include "sim/rl/router_stabilisers.h"
#include "sim/rl/step_hooks.h"

namespace moerl {

namespace {

// Router KL replay buffer: KL(router ‖ π_old's detached router) on every mini-batch's rows.
class RouterKl final : public StepHook {
 public:
  explicit RouterKl(const RlConfig& rl) : coef_(rl.router_kl_coef) {}
  void request_old(ForwardRequest* req) const override { req->want_router_logits = true; }
  void before_forward(HookContext& c, Minibatch& mb) override {
    const StepShape& s = c.step.shape;
    target_ = gather_sequence_rows(c.step.old.router_logits, mb.mine, s.L, s.S, s.T, s.E);
    c.model.router_control().kl_full_target = target_.data();
    c.model.router_control().kl_full_weight = coef_;
  }
  void after_optimizer_step(HookContext& c, Minibatch&) override { c.model.router_control().kl_full_target = nullptr; }

 private:
  float coef_;
  std::vector<float> target_;  // [L, |mine|·T, E]
};

// Routing calibration: KL(train router ‖ inference router) over the top-k, the target being the
// inference engine's router logits on the same tokens (current weights, rollout profile,
// teacher-forced), with weight λ on every calib_every-th step.
class RoutingCalibration final : public StepHook {
 public:
  explicit RoutingCalibration(const RlConfig& rl) : rl_(rl) {}
  void after_old_logprobs(HookContext& c, RunResults* res) override {
    const int64_t step = c.step.index;
    lambda_ = step % rl_.calib_every == 0 ? ramp_weight(rl_.calib_schedule, rl_.calib_coef, step, rl_.steps) : 0.0;
    if (lambda_ > 0.0) {
      ForwardRequest q = c.step.old_request;
      q.profile = &c.step.rollout_profile;
      q.router_mode = RouterMode::normal;
      q.replay_ids = nullptr;
      q.want_logits = q.want_logprobs_all = q.want_own_topk = q.keep_logits = q.keep_logprobs_all = false;
      q.want_router_logits = true;
      ForwardResult inference;
      c.model.forward(&inference, q);
      target_ = std::move(inference.router_logits);
    }
    res->set("calib_lambda", lambda_);
  }
  void before_forward(HookContext& c, Minibatch& mb) override {
    if (lambda_ <= 0.0) return;
    const StepShape& s = c.step.shape;
    rows_ = gather_sequence_rows(target_, mb.mine, s.L, s.S, s.T, s.E);
    RouterControl& rc = c.model.router_control();
    rc.kl_topk_target = rows_.data();
    rc.kl_topk_weight = static_cast<float>(lambda_);
    rc.kl_topk_temperature = rl_.calib_temperature;
  }
  void after_optimizer_step(HookContext& c, Minibatch&) override { c.model.router_control().kl_topk_target = nullptr; }

 private:
  RlConfig rl_;
  double lambda_ = 0.0;
  std::vector<float> target_;  // [L, S·T, E] the inference router's logits
  std::vector<float> rows_;    // [L, |mine|·T, E] of the current mini-batch
};

// Gradient surgery: the backward runs the policy gradient alone; then the regularisers' gradient
// is taken apart, and in each router tensor loses its component against the policy's when they
// conflict (PCGrad).
class GradSurgery final : public StepHook {
 public:
  void before_backward(HookContext& c, Minibatch&) override { c.model.router_control().regularisers_in_backward = false; }
  void after_backward(HookContext& c, Minibatch& mb) override {
    const std::vector<float> g_policy = c.model.grads().data();
    c.model.router_control().regularisers_in_backward = true;
    c.model.grads().zero();
    if (mb.request.keep_logprobs) {  // the loss ran where the model is: its gradient's layout
      const std::vector<float> no_policy(static_cast<size_t>(mb.result.row_begin.back()), 0.0f);
      c.model.backward_rows(no_policy.data());
    } else {
      const std::vector<float> no_policy(mb.dlogp_positions.size(), 0.0f);
      c.model.backward(no_policy.data());
    }
    ParamStore& grads = c.model.grads();  // on the host (downloaded where they live on a device)
    std::vector<float>& g = grads.data();
    for (int l = 0; l < c.step.shape.L; ++l) {
      const ParamInfo& router = grads.info("layers." + std::to_string(l) + ".moe.router");
      fired_ += surgery_project(g.data() + router.offset, g_policy.data() + router.offset, router.size) ? 1 : 0;
      checked_ += 1;
    }
    for (size_t j = 0; j < g.size(); ++j) g[j] += g_policy[j];
  }
  void end_of_step(HookContext&, RunResults* res) override {
    res->set("surgery_frac", checked_ > 0 ? fired_ / checked_ : 0.0);
    fired_ = checked_ = 0.0;
  }

 private:
  double fired_ = 0.0, checked_ = 0.0;  // router tensors projected / examined this step
};

// Aux-loss-free expert bias (DeepSeek-V3): the update rule (router_bias_update) from the
// mini-batch's own load, after every optimizer step; sft_train applies the same rule.
class ExpertBias final : public StepHook {
 public:
  explicit ExpertBias(const ModelConfig& m) : rate_(m.bias_update_rate) {}
  void after_optimizer_step(HookContext& c, Minibatch& mb) override {
    router_bias_update(c.model.expert_bias().data(), mb.result.expert_load.data(), c.step.shape.L, c.step.shape.E,
                       rate_);
  }

 private:
  float rate_;
};

// Router temperature control every router_temp_every steps, from the π_old load.
class RouterTemperature final : public StepHook {
 public:
  explicit RouterTemperature(const RlConfig& rl) : every_(rl.router_temp_every), rule_(rl.router_temp) {}
  void init(Model& model) override { model.router_control().temperature.assign(model.config().n_layers, 1.0f); }
  void end_of_step(HookContext& c, RunResults* res) override {
    const StepShape& s = c.step.shape;
    std::vector<float>& tau = c.model.router_control().temperature;
    if ((c.step.index + 1) % every_ == 0) {
      for (int l = 0; l < s.L; ++l)
        tau[l] = router_temperature_update(tau[l], &c.step.old.expert_load[static_cast<size_t>(l) * s.E], s.E, rule_);
      c.model.invalidate_packed_weights();
      if (c.rollout_model) c.rollout_model->router_control().temperature = tau;
    }
    double mean = 0.0;
    for (float t : tau) mean += t;
    res->set("router_temperature_mean", mean / s.L);
  }

 private:
  int every_;
  RouterTemperatureRule rule_;
};

}  // namespace

const std::vector<StabiliserInfo>& stabiliser_registry() {
  static const std::vector<StabiliserInfo> table = {
      {"router-kl", "rl.router_kl_coef > 0: KL(router || pi_old's detached router) on every mini-batch",
       [](const RlConfig& rl, const ModelConfig& m) { return m.is_moe() && rl.router_kl_coef > 0.0f; },
       [](const RlConfig& rl, const ModelConfig&) -> std::unique_ptr<StepHook> { return std::make_unique<RouterKl>(rl); },
       {}},
      {"calibration", "rl.calib_coef > 0: KL(train router || inference router) over the top-k",
       [](const RlConfig& rl, const ModelConfig& m) { return m.is_moe() && rl.calib_coef > 0.0f; },
       [](const RlConfig& rl, const ModelConfig&) -> std::unique_ptr<StepHook> {
         return std::make_unique<RoutingCalibration>(rl);
       },
       {{"calib_lambda", 0.0, "weight of the routing-calibration loss this step"}}},
      {"grad-surgery", "rl.grad_surgery: regulariser gradients projected off the policy gradient's",
       [](const RlConfig& rl, const ModelConfig& m) { return m.is_moe() && rl.grad_surgery; },
       [](const RlConfig&, const ModelConfig&) -> std::unique_ptr<StepHook> { return std::make_unique<GradSurgery>(); },
       {{"surgery_frac", 0.0, "share of router tensors whose regulariser gradient was projected"}}},
      {"expert-bias", "model.expert_bias with rl.bias_update: aux-loss-free load balancing by a per-expert routing bias",
       [](const RlConfig& rl, const ModelConfig& m) { return m.expert_bias && rl.bias_update; },
       [](const RlConfig&, const ModelConfig& m) -> std::unique_ptr<StepHook> { return std::make_unique<ExpertBias>(m); },
       {}},
      {"router-temperature", "rl.router_temp_every > 0: router temperature control from the expert load",
       [](const RlConfig& rl, const ModelConfig& m) { return m.is_moe() && rl.router_temp_every > 0; },
       [](const RlConfig& rl, const ModelConfig&) -> std::unique_ptr<StepHook> {
         return std::make_unique<RouterTemperature>(rl);
       },
       {}},
  };
  return table;
}

StepHooks step_hooks_create(const RlConfig& rl, const ModelConfig& model) {
  StepHooks hooks;
  for (const StabiliserInfo& s : stabiliser_registry()) {
    if (s.active(rl, model)) hooks.active.push_back(s.create(rl, model));
    else hooks.off_metrics.insert(hooks.off_metrics.end(), s.metrics.begin(), s.metrics.end());
  }
  return hooks;
}

}  // namespace moerl
