// sft.cpp — see sft.h.
#include "sim/jobs/sft.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

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
    ForwardResult res;
    model->forward(&res, req);
    double loss = res.aux_loss;
    for (int b = 0; b < B; ++b)
      for (int r = 0; r < len[b]; ++r) loss -= res.logprobs[answer.logprob_at(b, r)] / tokens;
    model->zero_grads();
    model->backward(dlogp.data());
    adamw_step(adamw, *model, optim_lr_at(cfg.optim, step, cfg.steps), step);
    model->invalidate_packed_weights();
    rep.final_loss = loss;
    rep.steps = step + 1;
    if (progress) progress(step, loss);
  }
  NumericsProfile ref;
  profile_builtin("fp32-ref", &ref);
  rep.eval_accuracy = rollout_eval_accuracy(*model, task, seed, eval_prompts, ref);
  return rep;
}

}  // namespace moerl
