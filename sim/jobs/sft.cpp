// sft.cpp — see sft.h.
#include "sim/jobs/sft.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "models/router.h"
#include "sim/rl/positions.h"
#include "sim/rl/rollout.h"

namespace moerl {

void SftConfig::validate() const {
  if (steps < 0) throw std::invalid_argument("sft.steps = " + std::to_string(steps) + ": must be >= 0");
  // one forward and backward hold the whole batch: an absurd one is refused here, not by std::bad_alloc
  if (batch < 1 || batch > (1 << 16))
    throw std::invalid_argument("sft.batch = " + std::to_string(batch) + ": must be in [1, 65536] (one step holds it whole)");
  optim.validate("sft");
}

SftReport sft_train(Model* model, const SftConfig& cfg, const Task& task, uint64_t seed,
                    int eval_prompts, const std::function<void(int, double)>& progress) {
  cfg.validate();
  const int B = cfg.batch, P = task.prompt_len(), A = task.max_answer_len(), T = P + A;
  const ResponseSlice answer{P, A, T};  // the answer is scored like an RL response
  const int32_t pad = task.ends_at_eos() ? task.eos() : 0;  // past an answer's end: scored nowhere
  AdamW adamw(cfg.optim, model->params());
  adamw.set_backend(model->backend());
  SftReport rep;
  std::vector<int32_t> tok(static_cast<size_t>(B) * T);
  std::vector<int> len(B);
  std::vector<float> dlogp(static_cast<size_t>(B) * (T - 1));
  const ModelConfig& mc = model->config();
  const bool balancing = mc.is_moe() && (mc.load_balance != LoadBalance::none || mc.expert_bias);
  for (int step = 0; step < cfg.steps; ++step) {
    int tokens = 0;  // answer tokens of the batch, EOS included
    for (int b = 0; b < B; ++b) {
      int32_t* row = &tok[static_cast<size_t>(b) * T];
      std::fill(row + P, row + T, pad);
      len[b] = task.example(row, row + P, seed, 2, static_cast<uint64_t>(step) * B + b);
      tokens += len[b];
    }
    // d(−mean answer log-prob)/dlogp: −1/tokens at the positions predicting answer tokens
    std::fill(dlogp.begin(), dlogp.end(), 0.0f);
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < len[b]; ++r) dlogp[answer.logprob_at(b, r)] = -1.0f / tokens;
    ForwardRequest req;
    req.tokens = tok.data(); req.B = B; req.T = T; req.save_for_backward = true;
    // A balancing router balances the examples' own tokens: the forward runs packed, so the
    // padding past each answer enters no load, aux loss or bias update. Without balancing the
    // forward is unpacked, as it always was (the same bases, bit for bit).
    std::vector<int32_t> own(B);
    if (balancing) {
      for (int b = 0; b < B; ++b) own[b] = P + len[b];
      req.lengths = own.data();
    }
    ForwardResult res;
    model->forward(&res, req);
    double loss = res.aux_loss;
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < len[b]; ++r) loss -= res.logprobs[answer.logprob_at(b, r)] / tokens;
    model->zero_grads();
    model->backward(dlogp.data());
    adamw_step(adamw, *model, optim_lr_at(cfg.optim, step, cfg.steps), step);
    model->invalidate_packed_weights();
    if (mc.expert_bias)
      router_bias_update(model->expert_bias().data(), res.expert_load.data(), mc.n_layers, mc.n_experts,
                         mc.bias_update_rate);
    rep.final_loss = loss;
    rep.steps = step + 1;
    if (progress) progress(step, loss);
  }
  NumericsProfile ref;
  profile_builtin("fp32-ref", &ref);
  rep.eval_accuracy = rollout_eval_accuracy(*model, task, seed, eval_prompts, ref);
  if (model->config().is_moe()) sft_heldout_load(&rep, model, task, seed, eval_prompts, ref);
  return rep;
}

void sft_heldout_load(SftReport* rep, Model* model, const Task& task, uint64_t seed, int n, const NumericsProfile& ref) {
  const ModelConfig& mc = model->config();
  const int P = task.prompt_len(), A = task.max_answer_len(), T = P + A;
  const int32_t pad = task.ends_at_eos() ? task.eos() : 0;
  std::vector<int64_t> load(static_cast<size_t>(mc.n_layers) * mc.n_experts, 0);
  constexpr int kBatch = 64;
  for (int n0 = 0; n0 < n; n0 += kBatch) {
    const int B = std::min(kBatch, n - n0);
    std::vector<int32_t> tok(static_cast<size_t>(B) * T, pad), len(B);
    for (int b = 0; b < B; ++b) {
      int32_t* row = &tok[static_cast<size_t>(b) * T];
      len[b] = P + task.example(row, row + P, seed, 1, static_cast<uint64_t>(n0 + b));  // split 1: held out
    }
    ForwardRequest req;
    req.tokens = tok.data(); req.B = B; req.T = T; req.lengths = len.data(); req.profile = &ref;
    req.call = static_cast<uint64_t>(n0);
    ForwardResult res;
    model->forward(&res, req);
    for (size_t i = 0; i < load.size(); ++i) load[i] += res.expert_load[i];
  }
  const ExpertLoadStats st = expert_load_stats(load.data(), mc.n_layers, mc.n_experts);
  rep->has_load = true;
  rep->load_cv = st.cv;
  rep->load_max_over_mean = st.max_over_mean;
  rep->dead_experts = st.dead;
}

}  // namespace moerl
