// rollout.cpp — see rollout.h.
#include "sim/rl/rollout.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/rng.h"
#include "models/sites.h"
#include "sim/tasks/task.h"

namespace moerl {


namespace {

// The batch's buffers at R_max positions, the prompts in place, every response at its limit.
void rollout_alloc(RolloutBatch* out, const ModelConfig& cfg, const int32_t* prompts, int S, int P, int R, int eos) {
  const int L = cfg.n_layers, K = cfg.top_k, T = P + R;
  const bool moe = cfg.is_moe();
  out->S = S; out->P = P; out->R = R; out->T = T;
  out->len.assign(S, R);
  out->truncated.assign(S, eos >= 0 ? 1 : 0);
  out->tokens.assign(static_cast<size_t>(S) * T, 0);
  out->logp.assign(static_cast<size_t>(S) * R, 0.0f);
  out->logp_all.clear();  // filled at the end when wanted on the host
  out->entropy.assign(static_cast<size_t>(S) * R, 0.0f);
  out->topk_ids.assign(moe ? static_cast<size_t>(L) * S * T * K : 0, 0);
  out->router_logp.assign(out->topk_ids.size(), 0.0f);
  for (int s = 0; s < S; ++s)
    std::memcpy(&out->tokens[static_cast<size_t>(s) * T], prompts + static_cast<size_t>(s) * P, sizeof(int32_t) * P);
}

// Shared prefixes: the routing of each group's prompt, computed once (a prefill of the distinct
// prompts) and repeated for every sample of the group: [L, S·P, K], or empty when not shared.
std::vector<int32_t> rollout_shared_prefix_ids(Model& model, const NumericsProfile& profile, const int32_t* prompts,
                                               int S, int P, int shared_group) {
  const ModelConfig& cfg = model.config();
  const int V = cfg.vocab_size, L = cfg.n_layers, K = cfg.top_k;
  if (!cfg.is_moe() || shared_group <= 1 || S % shared_group != 0) return {};
  const int U = S / shared_group;
  std::vector<int32_t> unique(static_cast<size_t>(U) * P), uids(static_cast<size_t>(L) * U * P * K);
  for (int u = 0; u < U; ++u)
    std::memcpy(&unique[static_cast<size_t>(u) * P], prompts + static_cast<size_t>(u) * shared_group * P, sizeof(int32_t) * P);
  std::vector<float> ulogits(static_cast<size_t>(U) * V);
  GenerationState* ust = nullptr;
  model.generation_begin(&ust, U, P, &profile);
  model.generation_prefill(ust, ulogits.data(), uids.data(), nullptr, unique.data(), P);
  model.generation_end(ust);
  std::vector<int32_t> prefix_ids(static_cast<size_t>(L) * S * P * K);
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < S; ++s)
      std::memcpy(&prefix_ids[((static_cast<size_t>(l) * S + s) * P) * K],
                  &uids[((static_cast<size_t>(l) * U + s / shared_group) * P) * K], sizeof(int32_t) * P * K);
  return prefix_ids;
}

// [L, n_rows·n, K] routing of n positions per row of a call → rows seq[i]·T + t0 .. of the batch's
// [L, S·T, K] (seq[i]: the sequence of the call's row i; null: row i is sequence i, n_rows = S).
void rollout_place_routing(RolloutBatch* out, const std::vector<int32_t>& ids, const std::vector<float>& rlp, int L,
                           int K, int t0, int n, const int32_t* seq = nullptr, int n_rows = -1) {
  const int S = out->S, T = out->T, rows = n_rows < 0 ? S : n_rows;
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < rows; ++i) {
      const size_t s = seq ? static_cast<size_t>(seq[i]) : static_cast<size_t>(i);
      for (int t = 0; t < n; ++t) {
        const size_t src = ((static_cast<size_t>(l) * rows + i) * n + t) * K;
        const size_t dst = ((static_cast<size_t>(l) * S + s) * T + t0 + t) * K;
        std::memcpy(&out->topk_ids[dst], &ids[src], sizeof(int32_t) * K);
        std::memcpy(&out->router_logp[dst], &rlp[src], sizeof(float) * K);
      }
    }
}

// Response position r of every sequence still going: row i of the decode batch is sequence
// seq[i] (its own stream, its own rows of *out). The sampler runs where the logits are
// (Model::generation_sample): the host draws each row's uniform from the sequence's stream and
// reads back the token, log μ at it and the entropy; μ's row is stored where it is computed, into
// the batch's resident record. A finished sequence still in the batch (masked layout) is fed EOS
// (padding, left at 0). next[n] receives the tokens to feed; returns how many sequences are still
// going.
int64_t rollout_sample_position(RolloutBatch* out, Model& model, GenerationState* st, std::vector<int32_t>* next,
                                std::vector<uint8_t>* done, const std::vector<int32_t>& seq, int n, int r,
                                const SamplingConfig& sampling, uint64_t seed, uint64_t step, uint64_t first_index,
                                int eos) {
  const int P = out->P, R = out->R, T = out->T;
  std::vector<double> uniform(static_cast<size_t>(n), 0.0);
  std::vector<int32_t> tok(static_cast<size_t>(n)), dst(static_cast<size_t>(n), -1);
  std::vector<float> lp(static_cast<size_t>(n)), h(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int s = seq[i];
    if ((*done)[s]) continue;
    dst[i] = s * R + r;
    if (sampling.temperature == 0.0f) continue;  // greedy: no draw
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::sampling), {step, first_index + s, static_cast<uint64_t>(r)}));
    uniform[i] = rng.uniform_double();
  }
  if (model.generation_routes_resident(st)) {  // one unit: a step's graph where the backend records them
    model.generation_draw(st, tok.data(), lp.data(), h.data(), uniform.data(), sampling.temperature, sampling.top_p,
                          out->logp_all_resident.data(), dst.data());
  } else {
    model.generation_sample(st, tok.data(), lp.data(), h.data(), uniform.data(), sampling.temperature, sampling.top_p);
    model.generation_store_logprobs(st, out->logp_all_resident.data(), dst.data());
  }
  int64_t active = 0;
  for (int i = 0; i < n; ++i) {
    const int s = seq[i];
    if ((*done)[s]) {
      (*next)[i] = eos;
      out->tokens[static_cast<size_t>(s) * T + P + r] = eos;
      continue;
    }
    (*next)[i] = tok[i];
    out->tokens[static_cast<size_t>(s) * T + P + r] = tok[i];
    out->logp[static_cast<size_t>(s) * R + r] = lp[i];
    out->entropy[static_cast<size_t>(s) * R + r] = h[i];
    if (eos >= 0 && tok[i] == eos) {
      (*done)[s] = 1;
      out->len[s] = r + 1;
      out->truncated[s] = 0;
    } else {
      ++active;
    }
  }
  return active;
}

// Decode compaction (rollout_compact_plan): the rows whose sequence has ended leave the batch
// (their KV cache, logits and log-probs too, moved where they are); seq[n] follows; returns the
// new n.
int rollout_compact(Model& model, GenerationState* st, std::vector<int32_t>* seq, const std::vector<uint8_t>& done) {
  const int n = static_cast<int>(seq->size());
  const std::vector<int32_t> from = rollout_compact_plan(seq, done);
  const int keep = static_cast<int>(from.size());
  if (keep != n) model.generation_keep(st, from.data(), keep);
  return keep;
}

}  // namespace

std::vector<int32_t> rollout_compact_plan(std::vector<int32_t>* seq, const std::vector<uint8_t>& done) {
  const int n = static_cast<int>(seq->size());
  int keep = 0;
  for (int i = 0; i < n; ++i) keep += done[(*seq)[i]] ? 0 : 1;
  std::vector<int32_t> from(static_cast<size_t>(keep));
  int tail = n - 1;
  for (int i = 0; i < keep; ++i) {
    if (!done[(*seq)[i]]) {
      from[i] = i;
      continue;
    }
    while (done[(*seq)[tail]]) --tail;  // the last row still going: it lies at or past keep
    from[i] = tail--;
  }
  for (int i = 0; i < keep; ++i) (*seq)[i] = (*seq)[from[i]];  // sources at or past keep: not yet overwritten
  seq->resize(static_cast<size_t>(keep));
  return from;
}

namespace {
// Where the backend records the decode steps as op graphs (CUDA Graphs) and could not, the
// rollouts decode eagerly — the same bits, slower: said once per process, with the backend's why.
void warn_graph_failure(const GenerationGraphs& g) {
  static std::atomic<bool> said{false};
  if (!g.failure.empty() && !said.exchange(true))
    std::fprintf(stderr, "moerl: decode steps run without op graphs (%s)\n", g.failure.c_str());
}

// Each decode step's routing (MoE models): the host places what each step reads back
// (rollout_place_routing), or, with resident routing (Model::generation_routes_resident), the step's
// routing goes into a record where it is computed, [L, S·T, K] ids and log-probs, which comes down
// once at the end.
class DecodeRouting {
 public:
  DecodeRouting(Model& model, GenerationState* st, const RolloutBatch& out)
      : model_(model), st_(st), cfg_(model.config()),
        resident_(cfg_.is_moe() && model.generation_routes_resident(st)) {
    if (!resident_) return;
    const Backend& be = model.backend();
    rec_ids_.resize(be, out.topk_ids.size());
    rec_logp_.resize(be, out.router_logp.size());
    be.mem_zero(rec_ids_.data(), rec_ids_.bytes());  // positions no step reaches stay 0, as on the host
    be.mem_zero(rec_logp_.data(), rec_logp_.bytes());
  }
  // Feeds next[n] (row i: sequence seq[i]) and keeps the routing of position P + r; then, when
  // temperature > 0, the new rows' log μ (generation_logprobs). Resident routing: one unit
  // (Model::generation_feed), recorded and replayed where the backend records op graphs.
  void step(RolloutBatch* out, const int32_t* next, const int32_t* seq, int n, int r, float temperature) {
    const int L = cfg_.n_layers, K = cfg_.top_k, P = out->P;
    if (resident_) {
      rows_.resize(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) rows_[i] = seq[i] * out->T + P + r;
      model_.generation_feed(st_, next, rec_ids_.data(), rec_logp_.data(), static_cast<int64_t>(out->S) * out->T,
                             rows_.data(), temperature);
      return;
    }
    const bool moe = cfg_.is_moe();
    ids_.resize(moe ? static_cast<size_t>(L) * n * K : 0);
    rlp_.resize(ids_.size());
    model_.generation_step(st_, nullptr, moe ? ids_.data() : nullptr, moe ? rlp_.data() : nullptr, next);
    if (moe) rollout_place_routing(out, ids_, rlp_, L, K, P + r, 1, seq, n);
    if (temperature > 0.0f) model_.generation_logprobs(st_, nullptr, temperature);
  }
  // The resident record's decode positions (P..) into *out: one read each of ids and log-probs.
  void finish(RolloutBatch* out) const {
    if (!resident_) return;
    const Backend& be = model_.backend();
    std::vector<int32_t> ids(rec_ids_.size());
    std::vector<float> logp(rec_logp_.size());
    be.mem_copy(ids.data(), rec_ids_.data(), rec_ids_.bytes(), CopyDir::to_host, CrossKind::per_token);
    be.mem_copy(logp.data(), rec_logp_.data(), rec_logp_.bytes(), CopyDir::to_host, CrossKind::per_token);
    const size_t K = static_cast<size_t>(cfg_.top_k), row = static_cast<size_t>(out->T) * K,
                 prompt = static_cast<size_t>(out->P) * K;
    for (size_t b = 0; b < static_cast<size_t>(cfg_.n_layers) * out->S; ++b) {  // the prefill's are placed
      std::copy(ids.begin() + b * row + prompt, ids.begin() + (b + 1) * row, out->topk_ids.begin() + b * row + prompt);
      std::copy(logp.begin() + b * row + prompt, logp.begin() + (b + 1) * row, out->router_logp.begin() + b * row + prompt);
    }
  }

 private:
  Model& model_;
  GenerationState* st_;
  const ModelConfig& cfg_;
  const bool resident_;
  ActBuffer<int32_t> rec_ids_;
  ActBuffer<float> rec_logp_;
  std::vector<int32_t> rows_, ids_;
  std::vector<float> rlp_;
};
}  // namespace

void rollout_generate(RolloutBatch* out, Model& model, const NumericsProfile& profile,
                      const int32_t* prompts, int S, int P, int R_max, const SamplingConfig& sampling,
                      uint64_t seed, uint64_t step, uint64_t first_index, int shared_group, int eos,
                      bool logp_all_to_host) {
  const ModelConfig& cfg = model.config();
  const int R = R_max, V = cfg.vocab_size, L = cfg.n_layers, K = cfg.top_k;
  const bool moe = cfg.is_moe();
  rollout_alloc(out, cfg, prompts, S, P, R, eos);
  const std::vector<int32_t> prefix_ids = rollout_shared_prefix_ids(model, profile, prompts, S, P, shared_group);

  GenerationState* st = nullptr;
  model.generation_begin(&st, S, P + R, &profile);
  // μ's rows [S, R, V], where they are computed (zero: the padding's rows)
  out->logp_all_resident.resize(model.backend(), static_cast<size_t>(S) * R * V);
  if (!out->logp_all_resident.empty()) model.backend().mem_zero(out->logp_all_resident.data(), out->logp_all_resident.bytes());
  out->logp_all_rows = R;
  std::vector<int32_t> ids(moe ? static_cast<size_t>(L) * S * P * K : 0);
  std::vector<float> rlp(ids.size());
  model.generation_prefill(st, nullptr, moe ? ids.data() : nullptr, moe ? rlp.data() : nullptr,
                           prompts, P, prefix_ids.empty() ? nullptr : prefix_ids.data());
  if (moe) rollout_place_routing(out, ids, rlp, L, K, 0, P);
  DecodeRouting routing(model, st, *out);
  // log μ of every token: log_softmax(logits / τ), where the logits are
  const float tau = sampling.temperature > 0.0f ? sampling.temperature : 1.0f;
  model.generation_logprobs(st, nullptr, tau);
  const ModelParallel& par = model.parallel();
  // Row i of the decode batch is sequence seq[i]. Under a row-independent profile a sequence that
  // has ended leaves the batch after the step that fed its EOS (compaction); otherwise it stays,
  // fed EOS, so that no row's numerics depend on when its neighbours finished.
  const bool compact = eos >= 0 && profile_rows_independent(profile);
  std::vector<int32_t> seq(S), next(S);
  for (int s = 0; s < S; ++s) seq[s] = s;
  int n = S;  // = seq.size()
  std::vector<uint8_t> done(S, 0);
  int R_run = R;
  for (int r = 0; r < R; ++r) {
    int64_t active = rollout_sample_position(out, model, st, &next, &done, seq, n, r, sampling, seed, step,
                                             first_index, eos);
    bool last = r + 1 == R;
    if (eos >= 0) {  // the batch ends when its last sequence has, on every data-parallel rank
      if (par.dp && par.dp->size() > 1) par.dp->allreduce_sum(&active, 1);
      if (active == 0) {
        last = true;
        R_run = r + 1;
      }
    }
    // Feed the sampled token: this computes the routing of position P + r (kept for replay —
    // the last position's routing included, so R3 has a record for every position).
    if (!last || moe) routing.step(out, next.data(), seq.data(), n, r, last ? 0.0f : tau);
    if (last) break;
    if (compact) n = rollout_compact(model, st, &seq, done);
  }
  warn_graph_failure(model.generation_graphs(st));
  model.generation_end(st);
  routing.finish(out);
  if (logp_all_to_host) {  // one download of μ's rows, for callers that read them on the host
    out->logp_all.resize(out->logp_all_resident.size());
    model.backend().mem_copy(out->logp_all.data(), out->logp_all_resident.data(), out->logp_all_resident.bytes(),
                             CopyDir::to_host, CrossKind::activations);
  }
  if (compact)  // the padding of the sequences that left the batch: EOS, as a masked batch feeds
    for (int s = 0; s < S; ++s)
      std::fill(out->tokens.begin() + static_cast<size_t>(s) * out->T + P + out->len[s],
                out->tokens.begin() + static_cast<size_t>(s) * out->T + P + R_run, eos);
  if (R_run < R) rollout_trim(out, R_run, L);
}

void rollout_trim(RolloutBatch* rb, int R, int L) {
  const int S = rb->S, P = rb->P, R0 = rb->R, T0 = rb->T, T = P + R;
  if (R == R0) return;
  auto keep = [](auto* v, int64_t blocks, int64_t old_block, int64_t new_block) {
    for (int64_t b = 0; b < blocks; ++b)
      std::copy_n(v->begin() + b * old_block, new_block, v->begin() + b * new_block);
    v->resize(static_cast<size_t>(blocks * new_block));
  };
  const int64_t V = S > 0 && R0 > 0 ? static_cast<int64_t>(rb->logp_all.size()) / (static_cast<int64_t>(S) * R0) : 0;
  keep(&rb->tokens, S, T0, T);
  keep(&rb->logp, S, R0, R);
  keep(&rb->entropy, S, R0, R);
  keep(&rb->logp_all, S, R0 * V, R * V);
  if (!rb->topk_ids.empty()) {
    const int64_t K = static_cast<int64_t>(rb->topk_ids.size()) / (static_cast<int64_t>(L) * S * T0);
    keep(&rb->topk_ids, static_cast<int64_t>(L) * S, T0 * K, T * K);
    keep(&rb->router_logp, static_cast<int64_t>(L) * S, T0 * K, T * K);
  }
  rb->R = R;
  rb->T = T;
}

EvalResult rollout_eval(Model& model, const Task& task, uint64_t seed, int n, const NumericsProfile& profile) {
  const int P = task.prompt_len(), A = task.max_answer_len();
  std::vector<int32_t> prompts(static_cast<size_t>(n) * P), answers(static_cast<size_t>(n) * A);
  std::vector<int> answer_len(n);
  for (int i = 0; i < n; ++i)
    answer_len[i] = task.example(&prompts[static_cast<size_t>(i) * P], &answers[static_cast<size_t>(i) * A], seed, 1, i);
  RolloutBatch rb;
  SamplingConfig greedy;
  greedy.temperature = 0.0f;
  // data parallel: this rank's block of the prompts; counts and each answer's partial credit are
  // summed over ranks into [n] slots (each slot written by one rank, so the sum is exact), then
  // added up in prompt order: the same bits on any number of ranks
  const ModelParallel& par = model.parallel();
  const SeqBlock blk = dp_block(n, par.dp_size(), par.dp_rank());
  rollout_generate(&rb, model, profile, prompts.data() + blk.begin * P, static_cast<int>(blk.size()),
                   P, A, greedy, seed, 0, static_cast<uint64_t>(blk.begin), 1, task.eos(), false);
  enum { kExact, kFinal, kWorking, kEarly, kLate, kTrunc, kMalformed, kCounts };
  std::vector<double> partial(static_cast<size_t>(n), 0.0), counts(kCounts, 0.0);
  for (int i = 0; i < blk.size(); ++i) {
    const size_t k = static_cast<size_t>(blk.begin + i);
    const AnswerGrade g = task.grade(&answers[k * A], answer_len[k], &rb.tokens[static_cast<size_t>(i) * rb.T + P], rb.len[i]);
    partial[k] = g.partial;
    counts[kExact] += g.exact;
    counts[kFinal] += g.final_correct;
    counts[kWorking] += g.working_correct;
    counts[kEarly] += g.well_formed && g.stop < 0;
    counts[kLate] += g.well_formed && g.stop > 0;
    counts[kTrunc] += rb.truncated[i] != 0;
    counts[kMalformed] += !g.well_formed;
  }
  if (par.dp_size() > 1) {
    par.dp->allreduce_sum(partial.data(), n);
    par.dp->allreduce_sum(counts.data(), kCounts);  // counts: exact in any order
  }
  EvalResult e;
  for (double p : partial) e.partial += p;
  e.partial /= n;
  e.exact = counts[kExact] / n;
  e.final_correct = counts[kFinal] / n;
  e.working_correct = counts[kWorking] / n;
  e.stop_early = counts[kEarly] / n;
  e.stop_late = counts[kLate] / n;
  e.truncated = counts[kTrunc] / n;
  e.malformed = counts[kMalformed] / n;
  return e;
}

double rollout_eval_accuracy(Model& model, const Task& task, uint64_t seed, int n,
                             const NumericsProfile& profile) {
  return rollout_eval(model, task, seed, n, profile).exact;
}

}  // namespace moerl
