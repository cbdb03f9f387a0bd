// rollout.cpp — see rollout.h.
#include "sim/rl/rollout.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/rng.h"
#include "sim/tasks/task.h"

namespace moerl {


void rollout_generate(RolloutBatch* out, Model& model, const NumericsProfile& profile,
                      const int32_t* prompts, int S, int P, int R, const SamplingConfig& sampling,
                      uint64_t seed, uint64_t step, uint64_t first_index, int shared_group) {
  const ModelConfig& cfg = model.config();
  const int V = cfg.vocab_size, L = cfg.n_layers, K = cfg.top_k, T = P + R;
  const bool moe = cfg.is_moe();
  out->S = S; out->P = P; out->R = R; out->T = T;
  out->tokens.assign(static_cast<size_t>(S) * T, 0);
  out->logp.assign(static_cast<size_t>(S) * R, 0.0f);
  out->logp_all.assign(static_cast<size_t>(S) * R * V, 0.0f);
  out->entropy.assign(static_cast<size_t>(S) * R, 0.0f);
  out->topk_ids.assign(moe ? static_cast<size_t>(L) * S * T * K : 0, 0);
  out->router_logp.assign(out->topk_ids.size(), 0.0f);
  for (int s = 0; s < S; ++s)
    std::memcpy(&out->tokens[static_cast<size_t>(s) * T], prompts + static_cast<size_t>(s) * P, sizeof(int32_t) * P);

  std::vector<int32_t> prefix_ids;  // [L, S·P, K] replayed in the prefill when shared
  if (moe && shared_group > 1 && S % shared_group == 0) {
    const int U = S / shared_group;
    std::vector<int32_t> unique(static_cast<size_t>(U) * P), uids(static_cast<size_t>(L) * U * P * K);
    for (int u = 0; u < U; ++u)
      std::memcpy(&unique[static_cast<size_t>(u) * P], prompts + static_cast<size_t>(u) * shared_group * P, sizeof(int32_t) * P);
    std::vector<float> ulogits(static_cast<size_t>(U) * V);
    GenerationState* ust = nullptr;
    model.generation_begin(&ust, U, P, &profile);
    model.generation_prefill(ust, ulogits.data(), uids.data(), nullptr, unique.data(), P);
    model.generation_end(ust);
    prefix_ids.resize(static_cast<size_t>(L) * S * P * K);
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < S; ++s)
        std::memcpy(&prefix_ids[((static_cast<size_t>(l) * S + s) * P) * K],
                    &uids[((static_cast<size_t>(l) * U + s / shared_group) * P) * K], sizeof(int32_t) * P * K);
  }

  GenerationState* st = nullptr;
  model.generation_begin(&st, S, T, &profile);
  std::vector<float> logits(static_cast<size_t>(S) * V), lp(static_cast<size_t>(S) * V);
  std::vector<int32_t> ids(moe ? static_cast<size_t>(L) * S * P * K : 0);
  std::vector<float> rlp(ids.size());
  model.generation_prefill(st, logits.data(), moe ? ids.data() : nullptr, moe ? rlp.data() : nullptr,
                           prompts, P, prefix_ids.empty() ? nullptr : prefix_ids.data());
  // [L, S·P, K] → rows s·T + t of [L, S·T, K]
  auto place = [&](int t0, int n_pos) {
    for (int l = 0; l < L; ++l)
      for (int s = 0; s < S; ++s)
        for (int t = 0; t < n_pos; ++t) {
          const size_t src = ((static_cast<size_t>(l) * S + s) * n_pos + t) * K;
          const size_t dst = ((static_cast<size_t>(l) * S + s) * T + t0 + t) * K;
          std::memcpy(&out->topk_ids[dst], &ids[src], sizeof(int32_t) * K);
          std::memcpy(&out->router_logp[dst], &rlp[src], sizeof(float) * K);
        }
  };
  if (moe) place(0, P);

  const float tau = sampling.temperature > 0.0f ? sampling.temperature : 1.0f;
  std::vector<int32_t> next(S);
  for (int r = 0; r < R; ++r) {
    std::vector<float> scaled(logits);
    for (float& z : scaled) z /= tau;
    model.backend().log_softmax_forward(lp.data(), scaled.data(), S, V);
    for (int s = 0; s < S; ++s) {
      const float* row = &lp[static_cast<size_t>(s) * V];
      Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::sampling), {step, first_index + s, static_cast<uint64_t>(r)}));
      const int32_t tok = sampling_draw(&logits[static_cast<size_t>(s) * V], V, sampling, &rng);
      next[s] = tok;
      out->tokens[static_cast<size_t>(s) * T + P + r] = tok;
      out->logp[static_cast<size_t>(s) * R + r] = row[tok];
      std::memcpy(&out->logp_all[(static_cast<size_t>(s) * R + r) * V], row, sizeof(float) * V);
      double h = 0.0;
      for (int v = 0; v < V; ++v) h -= std::exp(static_cast<double>(row[v])) * row[v];
      out->entropy[static_cast<size_t>(s) * R + r] = static_cast<float>(h);
    }
    // Feed the sampled token: this computes the routing of position P + r (kept for replay —
    // the last position's routing included, so R3 has a record for every position).
    ids.resize(moe ? static_cast<size_t>(L) * S * K : 0);
    rlp.resize(ids.size());
    if (r + 1 < R || moe) {
      model.generation_step(st, logits.data(), moe ? ids.data() : nullptr, moe ? rlp.data() : nullptr,
                            next.data());
      if (moe) place(P + r, 1);
    }
  }
  model.generation_end(st);
}

double rollout_eval_accuracy(Model& model, const Task& task, uint64_t seed, int n,
                         const NumericsProfile& profile) {
  const int P = task.prompt_len(), R = task.answer_len();
  std::vector<int32_t> prompts(static_cast<size_t>(n) * P), answers(static_cast<size_t>(n) * R);
  for (int i = 0; i < n; ++i)
    task.example(&prompts[static_cast<size_t>(i) * P], &answers[static_cast<size_t>(i) * R], seed, 1, i);
  RolloutBatch rb;
  SamplingConfig greedy;
  greedy.temperature = 0.0f;
  // data parallel: this rank's block of the prompts; the exact-match count is summed over ranks
  const ModelParallel& par = model.parallel();
  const SeqBlock blk = dp_block(n, par.dp_size(), par.dp_rank());
  rollout_generate(&rb, model, profile, prompts.data() + blk.begin * P, static_cast<int>(blk.size()),
                   P, R, greedy, seed, 0, static_cast<uint64_t>(blk.begin));
  double correct = 0.0;
  for (int i = 0; i < blk.size(); ++i)
    correct += task.reward(&answers[static_cast<size_t>(blk.begin + i) * R], &rb.tokens[static_cast<size_t>(i) * rb.T + P], false);
  if (par.dp_size() > 1) par.dp->allreduce_sum(&correct, 1);  // counts: exact in any order
  return correct / n;
}

}  // namespace moerl
