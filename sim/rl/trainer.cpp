// trainer.cpp — see trainer.h. RlTrainer::step runs the phases below in the order they are
// defined; each reads and fills the step's StepState (sim/rl/step_state.h). Response positions
// are sliced by ResponseSlice (sim/rl/positions.h).
#include "sim/rl/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/rng.h"
#include "models/router.h"
#include "sim/jobs/audit.h"
#include "sim/comm/gather.h"
#include "sim/rl/diagnostics.h"
#include "sim/rl/loss.h"
#include "sim/rl/ppo_terms.h"
#include "sim/rl/precursors.h"
#include "sim/rl/response_metrics.h"
#include "sim/rl/rollout.h"
#include "sim/rl/router_drift.h"

namespace moerl {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A profile whose noise streams are keyed by the run seed, the engine and the step.
NumericsProfile keyed(const NumericsProfile& p, uint64_t seed, uint64_t engine, int64_t step) {
  NumericsProfile q = p;
  q.seed = rng_derive(p.seed ^ seed, 0x51E9ull, {engine, static_cast<uint64_t>(step)});
  return q;
}
}  // namespace

RlTrainer::RlTrainer(const RlSetup& setup, Model* model) : s_(setup), model_(model) {
  s_.rl.resolve();
  s_.rl.validate();
  task_ = task_create(s_.task);
  const ModelConfig& cfg = model_->config();
  if (task_->vocab_size() > cfg.vocab_size)
    throw std::invalid_argument("task." + std::string(task_->name()) + " needs vocab_size >= " +
                                std::to_string(task_->vocab_size()) + " but model.vocab_size = " +
                                std::to_string(cfg.vocab_size));
  response_limit_ = rl_response_limit(s_.rl, *task_);
  if (static_cast<int64_t>(task_->prompt_len()) + response_limit_ > cfg.max_seq_len)
    throw std::invalid_argument("task needs sequences of " +
                                std::to_string(static_cast<int64_t>(task_->prompt_len()) + response_limit_) +
                                " tokens but model.max_seq_len = " + std::to_string(cfg.max_seq_len));
  if (s_.rl.routing_replay != RoutingReplay::none && !cfg.is_moe())
    throw std::invalid_argument("rl.routing_replay = " + std::string(routing_replay_name(s_.rl.routing_replay)) +
                                ": needs an MoE model (model.n_experts > 0)");
  algo_ = algorithm_create(s_.rl.loss);
  hooks_ = step_hooks_create(s_.rl, cfg);
  s_.optim.validate("optim");
  adamw_ = std::make_unique<AdamW>(s_.optim, model_->params());
  adamw_->set_backend(model_->backend());
  if (s_.rl.freeze_router) adamw_->freeze(".moe.router");
  model_->router_control().load_balance = s_.rl.aux_loss;
  // expert parallelism: this rank updates its own experts; the norm covers every rank's
  const ModelParallel& par = model_->parallel();
  adamw_->set_parallel(cfg.n_experts, model_->expert_range(), par.ep, par.canonical());
  for (const auto& h : hooks_.active) h->init(*model_);
  if (s_.rl.rollout_staleness > 0) {
    rollout_model_ = std::make_unique<Model>(cfg);
    rollout_model_->router_control() = model_->router_control();
    rollout_model_->set_parallel(par);
    rollout_model_->set_backend(model_->backend());
    snapshots_.push_back({model_->params().data(), model_->expert_bias()});
  }
  if (s_.rl.loss.kl_coef > 0.0f) {
    ref_model_ = std::make_unique<Model>(cfg);
    ref_model_->set_parallel(par);
    ref_model_->set_backend(model_->backend());
    ref_model_->params().data() = model_->params().data();
    ref_model_->expert_bias() = model_->expert_bias();
  }
  // The router-drift probe's base routing: model_ holds the base policy here, on a resumed run
  // too (sim/jobs/run.cpp loads the base, builds the trainer, then loads the checkpoint).
  if (s_.rl.drift_probes > 0 && cfg.is_moe()) {
    probe_ = std::make_unique<RouterProbe>(router_probe_make(*task_, s_.seed, s_.rl.drift_probes, par));
    if (probe_->T > cfg.max_seq_len)
      throw std::invalid_argument("rl.drift_probes: the probe's sequences have " + std::to_string(probe_->T) +
                                  " tokens but model.max_seq_len = " + std::to_string(cfg.max_seq_len));
    TransferPhaseScope ph(model_->backend(), TransferPhase::eval);
    probe_->base_ids = router_probe_route(*model_, *probe_, s_.eval);
  }
}

RlTrainer::~RlTrainer() = default;

void RlTrainer::save_state(CheckpointExtras* ex) const {
  ex->arrays.push_back({"optim/m", adamw_->m()});
  ex->arrays.push_back({"optim/v", adamw_->v()});
  if (model_->config().expert_bias) ex->arrays.push_back({"router/expert_bias", model_->expert_bias()});
  if (!model_->router_control().temperature.empty())
    ex->arrays.push_back({"router/temperature", model_->router_control().temperature});
  ex->scalars.push_back({"optimizer_steps", opt_step_});
  ex->scalars.push_back({"stale_snapshots", static_cast<int64_t>(snapshots_.size())});
  for (size_t i = 0; i < snapshots_.size(); ++i) {
    ex->arrays.push_back({"stale/params_" + std::to_string(i), snapshots_[i].params});
    ex->arrays.push_back({"stale/bias_" + std::to_string(i), snapshots_[i].bias});
  }
}

void RlTrainer::load_state(const CheckpointExtras& ex) {
  int64_t n_snap = 0;
  for (const auto& [name, v] : ex.scalars) {
    if (name == "optimizer_steps") opt_step_ = v;
    if (name == "stale_snapshots") n_snap = v;
  }
  if (n_snap > 0) snapshots_.assign(static_cast<size_t>(n_snap), Snapshot{});
  for (const auto& [name, v] : ex.arrays) {
    if (name == "optim/m") adamw_->set_m(v);
    else if (name == "optim/v") adamw_->set_v(v);
    else if (name == "router/expert_bias") model_->expert_bias() = v;
    else if (name == "router/temperature") {
      model_->router_control().temperature = v;
      if (rollout_model_) rollout_model_->router_control().temperature = v;
    }
    else if (name.rfind("stale/params_", 0) == 0) snapshots_.at(std::stoul(name.substr(13))).params = v;
    else if (name.rfind("stale/bias_", 0) == 0) snapshots_.at(std::stoul(name.substr(11))).bias = v;
  }
  model_->invalidate_packed_weights();
}

EvalResult RlTrainer::evaluate() const {
  TransferPhaseScope ph(model_->backend(), TransferPhase::eval);
  return rollout_eval(*model_, *task_, s_.seed, s_.rl.eval_prompts, s_.eval);
}

namespace {
// eval_accuracy and its companions (docs/metrics.md); suffix "_base" for the base policy's.
void record_eval(RunResults* res, const EvalResult& e, const std::string& suffix) {
  res->set("eval_accuracy" + suffix, e.exact);
  res->set("eval_partial" + suffix, e.partial);
  res->set("eval_final" + suffix, e.final_correct);
  res->set("eval_working" + suffix, e.working_correct);
  res->set("eval_stop_early" + suffix, e.stop_early);
  res->set("eval_stop_late" + suffix, e.stop_late);
  res->set("eval_truncated" + suffix, e.truncated);
  res->set("eval_malformed" + suffix, e.malformed);
}
}  // namespace

void RlTrainer::step(int64_t step, RunResults* res) {
  const auto t_step = Clock::now();
  res->begin_step(step);
  // The base policy's held-out accuracy, before the first update: what "RL improved (or ended
  // below) the base" is read against, in every run. Greedy and from its own split, so it draws
  // from no stream the run uses.
  // Each phase's host↔device crossings are counted under its name where the backend has a device
  // (kernels/transfers.h); the mismatch measure is counted with π_old, the metrics under "other".
  const Backend& be = model_->backend();
  if (step == 0) record_eval(res, evaluate(), "_base");  // the eval phase
  StepState st = step_begin(step);
  sample_prompts(&st);                // §1
  {
    TransferPhaseScope ph(be, TransferPhase::rollout);
    rollout(&st);                     // §2
  }
  compute_advantages(&st);            // §3
  {
    TransferPhaseScope ph(be, TransferPhase::old_logprobs);
    recompute_old_logprobs(&st, res);  // §4
    measure_mismatch(&st, res);
  }
  train_minibatches(&st, res);        // §5, §6 (train and optimizer phases inside)
  record_metrics(&st, res);
  res->set("time_step", seconds_since(t_step));
}

StepState RlTrainer::step_begin(int64_t step) const {
  const ModelConfig& cfg = model_->config();
  const RlConfig& rl = s_.rl;
  StepState st;
  st.index = step;
  StepShape& shape = st.shape;
  shape.G = rl.group_size;
  shape.S = rl.prompts_per_step * shape.G;
  shape.P = task_->prompt_len();
  shape.R = shape.R_max = response_limit_;
  shape.A = task_->max_answer_len();
  shape.T = shape.P + shape.R;
  shape.L = cfg.n_layers;
  shape.K = cfg.top_k;
  shape.E = cfg.n_experts;
  shape.V = cfg.vocab_size;
  shape.moe = cfg.is_moe();
  shape.tau = rl.sampling.temperature > 0.0f ? rl.sampling.temperature : 1.0f;
  st.rollout_profile = keyed(s_.rollout, s_.seed, 1, step);
  st.train_profile = keyed(s_.train, s_.seed, 2, step);
  const ModelParallel& par = model_->parallel();
  st.block = dp_block(shape.S, par.dp_size(), par.dp_rank());
  st.block_seqs.resize(static_cast<size_t>(st.block.size()));
  std::iota(st.block_seqs.begin(), st.block_seqs.end(), static_cast<int>(st.block.begin));
  return st;
}

// §1 prompts_per_step prompts of the task's train split, each repeated group_size times.
void RlTrainer::sample_prompts(StepState* st) const {
  const int G = st->shape.G, P = st->shape.P, A = st->shape.A;
  const int n_prompts = s_.rl.prompts_per_step;
  st->prompts.resize(static_cast<size_t>(st->shape.S) * P);
  st->answers.assign(static_cast<size_t>(st->shape.S) * A, 0);
  st->answer_len.resize(static_cast<size_t>(st->shape.S));
  for (int p = 0; p < n_prompts; ++p) {
    int32_t* prompt = &st->prompts[static_cast<size_t>(p) * G * P];
    int32_t* answer = &st->answers[static_cast<size_t>(p) * G * A];
    const int len = task_->example(prompt, answer, s_.seed, 0, static_cast<uint64_t>(st->index) * n_prompts + p);
    for (int g = 0; g < G; ++g) {
      st->answer_len[static_cast<size_t>(p) * G + g] = len;
      if (g == 0) continue;
      std::memcpy(prompt + static_cast<size_t>(g) * P, prompt, sizeof(int32_t) * P);
      std::memcpy(answer + static_cast<size_t>(g) * A, answer, sizeof(int32_t) * A);
    }
  }
}

// §2 the rollout engine generates this rank's block of the sequences (until EOS or R_max); the
// batch is gathered, and the step's shape takes the batch's longest response.
void RlTrainer::rollout(StepState* st) {
  const auto t0 = Clock::now();
  const RlConfig& rl = s_.rl;
  const StepShape& shape = st->shape;
  Model* engine = model_;
  if (rollout_model_) {  // the weights of rollout_staleness optimizer steps ago
    rollout_model_->params().data() = snapshots_.front().params;
    rollout_model_->expert_bias() = snapshots_.front().bias;
    rollout_model_->invalidate_packed_weights();
    engine = rollout_model_.get();
  }
  const ModelParallel& par = model_->parallel();
  if (par.dp_size() > 1 && (rl.router_kl_coef > 0.0f || rl.calib_coef > 0.0f))
    throw std::invalid_argument("rl.router_kl_coef / rl.calib_coef: the router KL regularisers run on one "
                                "data-parallel rank only (got " + std::to_string(par.dp_size()) + " ranks)");
  rollout_generate(&st->rollout, *engine, st->rollout_profile, st->prompts.data() + st->block.begin * shape.P,
                   static_cast<int>(st->block.size()), shape.P, shape.R_max, rl.sampling, s_.seed,
                   static_cast<uint64_t>(st->index), static_cast<uint64_t>(st->block.begin),
                   rl.shared_prefix_routing ? shape.G : 1, task_->eos(), /*logp_all_to_host=*/false);
  if (par.dp) gather_rollout(&st->rollout, *par.dp, shape.L, shape.moe);
  st->shape.R = st->rollout.R;
  st->shape.T = st->rollout.T;
  st->time_rollout = seconds_since(t0);
}

// §3 rewards (a truncated response's is rl.truncated_reward; DAPO's overlong penalty on top),
// group-normalised advantages (unbiased std; Dr.GRPO: no division), and the loss mask: each
// response's own tokens, less truncated responses (rl.mask_truncated) and groups whose rewards are
// all equal (rl.filter_groups; their advantages are 0 anyway, so what changes is the normaliser).
void RlTrainer::compute_advantages(StepState* st) const {
  const RlConfig& rl = s_.rl;
  const int G = st->shape.G, S = st->shape.S, P = st->shape.P, R = st->shape.R, T = st->shape.T, A = st->shape.A;
  const RolloutBatch& ro = st->rollout;
  st->reward.resize(S);
  st->advantages.resize(S);
  for (int s = 0; s < S; ++s) {
    float reward = ro.truncated[s] ? rl.truncated_reward
                                   : task_->reward(&st->answers[static_cast<size_t>(s) * A], st->answer_len[s],
                                                   &ro.tokens[static_cast<size_t>(s) * T + P], ro.len[s],
                                                   s_.task.partial_credit, s_.task.reward_on);
    if (rl.overlong_buffer > 0) reward += overlong_penalty(ro.len[s]);
    st->reward[s] = reward;
  }
  st->mask.assign(static_cast<size_t>(S) * R, 0.0f);
  for (int s = 0; s < S; ++s)
    if (!(rl.mask_truncated && ro.truncated[s])) std::fill_n(&st->mask[static_cast<size_t>(s) * R], ro.len[s], 1.0f);
  st->groups_dropped = 0;
  for (int p = 0; p < rl.prompts_per_step; ++p) {
    const float* reward = &st->reward[static_cast<size_t>(p) * G];
    double mean = 0.0, var = 0.0;
    for (int g = 0; g < G; ++g) mean += reward[g];
    mean /= G;
    for (int g = 0; g < G; ++g) var += (reward[g] - mean) * (reward[g] - mean);
    const double stdev = G > 1 ? std::sqrt(var / (G - 1)) : 1.0;
    if (G == 1) mean = 0.0;
    for (int g = 0; g < G; ++g) {
      const double centred = reward[g] - mean;
      st->advantages[static_cast<size_t>(p) * G + g] =
          static_cast<float>(rl.adv_std_norm ? centred / (stdev + rl.adv_eps) : centred);
    }
    if (rl.filter_groups && std::all_of(reward, reward + G, [&](float r) { return r == reward[0]; })) {
      ++st->groups_dropped;
      std::fill_n(&st->mask[static_cast<size_t>(p) * G * R], static_cast<size_t>(G) * R, 0.0f);
    }
  }
}

// DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13) with L_max = the length limit and
// L_cache = rl.overlong_buffer: 0 up to L_max − L_cache tokens, then falling linearly to
// −rl.overlong_penalty at L_max.
double RlTrainer::overlong_penalty(int len) const {
  const int start = response_limit_ - s_.rl.overlong_buffer;
  if (len <= start) return 0.0;
  return -static_cast<double>(s_.rl.overlong_penalty) * (len - start) / s_.rl.overlong_buffer;
}

// §4 the train engine recomputes π_old over the batch (always: the mismatch metrics need it even
// in bypass mode), the reference policy's log-probs when the loss has a KL term, and the
// stabilisers take their targets of the step.
void RlTrainer::recompute_old_logprobs(StepState* st, RunResults* res) {
  const auto t0 = Clock::now();
  const RlConfig& rl = s_.rl;
  const StepShape& shape = st->shape;
  const ResponseSlice slice = shape.slice();
  const ModelParallel& par = model_->parallel();
  ForwardRequest& req = st->old_request;
  req.tokens = st->rollout.tokens.data() + st->block.begin * shape.T;
  req.B = static_cast<int>(st->block.size());
  req.B_total = shape.S;
  req.T = shape.T;
  // packed: each sequence over its prompt and its own response (EOS included), no padding
  st->old_lengths.resize(st->block.size());
  for (size_t i = 0; i < st->old_lengths.size(); ++i)
    st->old_lengths[i] = shape.P + st->rollout.len[static_cast<size_t>(st->block.begin) + i];
  req.lengths = st->old_lengths.data();
  req.profile = &st->train_profile;
  req.temperature = shape.tau;
  // the logit margins and the full-vocabulary KL (measure_mismatch), reduced where they are
  req.keep_logits = true;
  req.keep_logprobs_all = true;
  req.want_own_topk = shape.moe;
  req.want_router_top = shape.moe;  // the router margins (measure_mismatch)
  for (const auto& h : hooks_.active) h->request_old(&req);
  if (rl.routing_replay == RoutingReplay::rollout) {
    req.router_mode = RouterMode::replay;
    req.replay_ids = st->rollout.topk_ids.data();
    if (st->block.size() < shape.S) {
      st->old_replay = gather_sequence_rows(st->rollout.topk_ids, st->block_seqs, shape.L, shape.S, shape.T, shape.K);
      req.replay_ids = st->old_replay.data();
    }
  }
  model_->forward(&st->old, req);
  if (par.dp)
    gather_forward(&st->old, *par.dp, shape.L, shape.moe, req.want_own_topk, req.want_router_logits, req.want_router_top);
  st->logp_train = slice.response_logprobs(st->old.logprobs, shape.S);
  st->logp_old = rl.old_logprobs == OldLogprobs::rollout ? &st->rollout.logp : &st->logp_train;
  if (ref_model_) {
    ForwardRequest rq = req;
    rq.router_mode = RouterMode::normal;
    rq.replay_ids = nullptr;
    rq.want_logits = rq.want_logprobs_all = rq.want_own_topk = rq.keep_logits = rq.keep_logprobs_all = false;
    ForwardResult ref;
    ref_model_->forward(&ref, rq);
    if (par.dp) gather_forward(&ref, *par.dp, shape.L, shape.moe, false);
    st->logp_ref = slice.response_logprobs(ref.logprobs, shape.S);
  }
  HookContext c = hook_context(st);
  for (const auto& h : hooks_.active) h->after_old_logprobs(c, res);
  st->time_old_logprobs = seconds_since(t0);
}

// Stale rollouts: the two parts of μ vs π_old apart — staleness (stale vs current weights, both
// under the rollout profile, teacher-forced on the sampled tokens) and numerics (current
// weights, rollout vs train profile).
void RlTrainer::split_staleness_and_numerics(StepState* st, RunResults* res) {
  const auto t0 = Clock::now();
  const StepShape& shape = st->shape;
  const ResponseSlice slice = shape.slice();
  const int S = shape.S, R = shape.R;
  ForwardRequest q = st->old_request;
  q.profile = &st->rollout_profile;
  q.router_mode = RouterMode::normal;
  q.replay_ids = nullptr;
  q.want_logits = q.want_logprobs_all = q.want_own_topk = q.keep_logits = q.keep_logprobs_all = false;
  ForwardResult current;
  model_->forward(&current, q);
  if (model_->parallel().dp) gather_forward(&current, *model_->parallel().dp, shape.L, shape.moe, false);
  double k_stale = 0.0, k_num = 0.0, n = 0.0;
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < st->rollout.len[s]; ++r) {
      const double lc = current.logprobs[slice.logprob_at(s, r)];
      const double a = lc - st->rollout.logp[static_cast<size_t>(s) * R + r];  // log μ_cur/μ_stale
      const double b = st->logp_train[static_cast<size_t>(s) * R + r] - lc;    // log π_old/μ_cur
      k_stale += std::exp(a) - 1.0 - a;
      k_num += std::exp(b) - 1.0 - b;
      n += 1.0;
    }
  res->set("kl_staleness", k_stale / n);
  res->set("kl_numerics", k_num / n);
  st->time_old_logprobs += seconds_since(t0);
}

// Per response token of the batch, in order (s, then r): KL(μ‖π_old) over the vocabulary and
// log π_old/μ at the sampled token, from the rollout's resident μ rows and π_old's resident
// distribution (kl_rows); π_old's logits' spread and top-two margin at the temperature
// (logit_stats_rows). This rank's block on its backend, then gathered over the data-parallel ranks.
RlTrainer::PositionStats RlTrainer::mismatch_position_stats(const StepState& st) const {
  const StepShape& shape = st.shape;
  const RolloutBatch& ro = st.rollout;
  const int V = shape.V, P = shape.P, T = shape.T;
  const int b0 = static_cast<int>(st.block.begin), nb = static_cast<int>(st.block.size());
  std::vector<int32_t> a_row, b_row, target;
  for (int i = 0; i < nb; ++i)
    for (int r = 0; r < ro.len[static_cast<size_t>(b0) + i]; ++r) {
      a_row.push_back(i * ro.logp_all_rows + r);
      b_row.push_back(st.old.row_begin[static_cast<size_t>(i)] + P - 1 + r);
      target.push_back(ro.tokens[(static_cast<size_t>(b0) + i) * T + P + r]);
    }
  const int n = static_cast<int>(a_row.size());
  PositionStats ps;
  ps.kl.resize(n);
  ps.log_ratio.resize(n);
  ps.logit_std.resize(n);
  ps.logit_margin.resize(n);
  const Backend& be = model_->backend();
  be.kl_rows(ps.kl.data(), ps.log_ratio.data(), ro.logp_all_resident.data(), st.old.resident_logprobs_all.data(),
             a_row.data(), b_row.data(), target.data(), n, V);
  be.logit_stats_rows(ps.logit_std.data(), ps.logit_margin.data(), st.old.resident_logits.data(), b_row.data(), n, V,
                      shape.tau);
  if (Collectives* dp = model_->parallel().dp; dp && dp->size() > 1)
    for (std::vector<double>* v : {&ps.kl, &ps.log_ratio, &ps.logit_std, &ps.logit_margin})
      *v = collectives_allgather(*dp, *v);
  return ps;
}

// The mismatch between the engines on the response tokens (rollout = A, train = B; each
// response's own tokens, padding left out): the staleness / numerics split (stale rollouts),
// routing flips, KL, IS ratios, what every correction would do to this batch (on the recomputed
// π_old, so bypass runs see it too), and the mismatch along the response.
void RlTrainer::measure_mismatch(StepState* st, RunResults* res) {
  const StepShape& shape = st->shape;
  const RolloutBatch& sampled = st->rollout;
  const std::vector<float>& logp_train = st->logp_train;
  const int S = shape.S, R = shape.R, L = shape.L;
  if (rollout_model_) split_staleness_and_numerics(st, res);

  AuditAccum acc;
  audit_init(&acc, L);
  if (shape.moe) {
    const std::vector<uint8_t> mask = rl_scored_positions_mask(S, shape.P, shape.T, sampled.len.data());
    audit_add_routing(&acc, sampled.topk_ids.data(), st->old.own_topk_ids.data(), mask.data(), L, S * shape.T, shape.K);
  }
  // the response tokens, in order (s, then r): n of the S·R positions; this rank reduces its own
  // block's where the rows are (the rollout's μ and π_old's distribution and logits: kl_rows,
  // logit_stats_rows), and the per-token results are gathered in rank order, i.e. the same order
  const PositionStats ps = mismatch_position_stats(*st);
  std::vector<double> rho;
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < sampled.len[s]; ++r) {
      const size_t sr = static_cast<size_t>(s) * R + r;
      rho.push_back(std::exp(static_cast<double>(logp_train[sr]) - sampled.logp[sr]));
    }
  for (size_t j = 0; j < ps.kl.size(); ++j) audit_add_row(&acc, ps.kl[j], ps.log_ratio[j]);
  const AuditMetrics am = audit_finish(acc);
  res->set("kl_rollout_train", am.k3);
  res->set("kl_rollout_train_full", am.kl);
  res->set("extreme_token_frac", am.extreme_share);
  res->set("any_flip_frac", shape.moe ? am.any_flip_share : 0.0);
  res->set("flip_rate_mean", shape.moe ? am.mean_flipped_layers / L : 0.0);
  if (shape.moe) res->set_row("flip_rate", {L}, am.flip_rate);
  double rho_min = std::numeric_limits<double>::infinity(), rho_max = 0.0, rho_sum = 0.0;
  for (const double x : rho) {
    rho_min = std::min(rho_min, x);
    rho_max = std::max(rho_max, x);
    rho_sum += x;
  }
  res->set("is_ratio_mean", rho_sum / rho.size());
  res->set("is_ratio_min", rho_min);
  res->set("is_ratio_max", rho_max);
  correction_diagnostics_record(
      res, correction_diagnostics(s_.rl.loss, logp_train.data(), sampled.logp.data(), st->mask.data(), S, R));
  response_metrics_record(res, response_metrics(sampled.len.data(), sampled.truncated.data(), st->answer_len.data(),
                                                logp_train.data(),
                                                sampled.logp.data(), sampled.entropy.data(), S, R, shape.R_max,
                                                s_.rl.prompts_per_step, st->groups_dropped));
  res->int_attrs["position_bucket_width"] = position_bucket_width(shape.R_max);
  response_margins_record(res, response_margins(st->old.router_top, ps.logit_std, ps.logit_margin,
                                                sampled.len.data(), S, shape.P, shape.T, L));
}

namespace {
// Policy staleness at a mini-batch: the mean over its response tokens of k3 = x − 1 − log x,
// x = π_old/π_θ at the sampled tokens (an estimate of KL(π_θ‖π_old)); NaN where the log-probs
// stayed in the backend's memory (the resident loss).
double staleness_kl(const Minibatch& mb) {
  if (mb.logp_new.empty() || mb.logp_new.size() != mb.logp_old.size()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0.0, n = 0.0;
  for (size_t j = 0; j < mb.logp_new.size(); ++j) {
    if (mb.mask[j] == 0.0f) continue;
    const double d = static_cast<double>(mb.logp_old[j]) - mb.logp_new[j];
    sum += std::expm1(d) - d;
    n += 1.0;
  }
  return n > 0.0 ? sum / n : 0.0;
}
}  // namespace

// §5–6 a seeded permutation of the sequences in rl.minibatches mini-batches, one forward,
// backward and AdamW step each (so later ones are off-policy); stabilisers at the hook points.
void RlTrainer::train_minibatches(StepState* st, RunResults* res) {
  const auto t0 = Clock::now();
  const int S = st->shape.S;
  std::vector<int> order(S);
  std::iota(order.begin(), order.end(), 0);
  Rng perm(rng_derive(s_.seed, static_cast<uint64_t>(Stream::data), {2, static_cast<uint64_t>(st->index)}));
  perm.shuffle(order.data(), S);
  HookContext c = hook_context(st);
  if (loss_on_device()) {
    TransferPhaseScope ph(model_->backend(), TransferPhase::train);
    upload_loss_inputs(st);
  }
  for (int m = 0; m < s_.rl.minibatches; ++m) {
    Minibatch mb = minibatch_rows(*st, order, m);
    {
      TransferPhaseScope ph(model_->backend(), TransferPhase::train);
      for (const auto& h : hooks_.active) h->before_forward(c, mb);
      minibatch_forward(*st, &mb);
      minibatch_loss(*st, &mb);
      minibatch_backward(st, &mb);
    }
    {
      TransferPhaseScope ph(model_->backend(), TransferPhase::optimizer);
      optimizer_step(&mb);
    }
    for (const auto& h : hooks_.active) h->after_optimizer_step(c, mb);
    minibatch_totals(st, mb);
    if (m + 1 == s_.rl.minibatches) st->totals.staleness_kl = staleness_kl(mb);
    if (m == 0 && s_.dump_tensors) minibatch_dump(*st, mb, res);
  }
  st->time_train = seconds_since(t0);
}

bool RlTrainer::loss_on_device() const {
  PolicyLossParams p;
  Aggregation agg;
  return model_->resident() && model_->parallel().dp_size() == 1 && !s_.dump_tensors && algo_->device_form(&p, &agg);
}

// The step's [S, R] inputs of the loss and its advantages, up once (per-token values of the
// sampled responses: what the host computed from the rewards and lengths, and the two policies'
// log-probs of the sampled tokens).
void RlTrainer::upload_loss_inputs(StepState* st) const {
  const Backend& be = model_->backend();
  const size_t SR = static_cast<size_t>(st->shape.S) * st->shape.R;
  const bool ref = s_.rl.loss.kl_coef > 0.0f && ref_model_;
  const std::vector<const std::vector<float>*> rows = {st->logp_old, &st->rollout.logp, &st->mask, &st->logp_ref};
  st->loss_rows.resize(be, (ref ? 4 : 3) * SR);
  for (size_t k = 0; k < (ref ? 4u : 3u); ++k) {
    if (rows[k]->size() != SR) throw std::logic_error("upload_loss_inputs: an input of the wrong size");
    be.mem_copy(st->loss_rows.data() + k * SR, rows[k]->data(), SR * sizeof(float), CopyDir::to_device,
                CrossKind::per_token);
  }
  st->loss_advantages.resize(be, st->advantages.size());
  be.mem_copy(st->loss_advantages.data(), st->advantages.data(), st->advantages.size() * sizeof(float),
              CopyDir::to_device, CrossKind::per_token);
}

// Mini-batch m's rows of the step's batch, and this rank's block of them.
Minibatch RlTrainer::minibatch_rows(const StepState& st, const std::vector<int>& order, int m) const {
  const int n = st.shape.S / s_.rl.minibatches, T = st.shape.T, R = st.shape.R;
  Minibatch mb;
  mb.index = m;
  mb.seqs.assign(order.begin() + m * n, order.begin() + (m + 1) * n);
  mb.tokens.resize(static_cast<size_t>(n) * T);
  mb.logp_old.resize(static_cast<size_t>(n) * R);
  mb.logp_rollout.resize(mb.logp_old.size());
  mb.logp_ref.resize(mb.logp_old.size());
  mb.mask.resize(mb.logp_old.size());
  mb.advantages.resize(n);
  for (int i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(mb.seqs[i]);
    std::memcpy(&mb.tokens[static_cast<size_t>(i) * T], &st.rollout.tokens[s * T], sizeof(int32_t) * T);
    std::memcpy(&mb.logp_old[static_cast<size_t>(i) * R], &(*st.logp_old)[s * R], sizeof(float) * R);
    std::memcpy(&mb.logp_rollout[static_cast<size_t>(i) * R], &st.rollout.logp[s * R], sizeof(float) * R);
    std::memcpy(&mb.mask[static_cast<size_t>(i) * R], &st.mask[s * R], sizeof(float) * R);
    if (ref_model_) std::memcpy(&mb.logp_ref[static_cast<size_t>(i) * R], &st.logp_ref[s * R], sizeof(float) * R);
    mb.advantages[i] = st.advantages[s];
  }
  const ModelParallel& par = model_->parallel();
  mb.block = dp_block(n, par.dp_size(), par.dp_rank());
  mb.mine.assign(mb.seqs.begin() + mb.block.begin, mb.seqs.begin() + mb.block.end);
  return mb;
}

// This rank's block runs forward (replaying R2/R3 routing, probing π_old's experts when the
// algorithm asks for the router shift); the loss sees the whole mini-batch's log-probs.
void RlTrainer::minibatch_forward(const StepState& st, Minibatch* mb) {
  const StepShape& shape = st.shape;
  const RlConfig& rl = s_.rl;
  ForwardRequest& req = mb->request;
  req.tokens = mb->tokens.data() + mb->block.begin * shape.T;
  req.B = static_cast<int>(mb->block.size());
  req.B_total = mb->size();
  req.T = shape.T;
  mb->lengths.resize(mb->mine.size());
  for (size_t i = 0; i < mb->mine.size(); ++i) mb->lengths[i] = shape.P + st.rollout.len[static_cast<size_t>(mb->mine[i])];
  req.lengths = mb->lengths.data();
  req.profile = &st.train_profile;
  req.temperature = shape.tau;
  req.save_for_backward = true;
  req.call = 1 + static_cast<uint64_t>(mb->index);
  req.keep_logprobs = loss_on_device();
  const std::vector<int32_t>* replay = rl.routing_replay == RoutingReplay::rollout ? &st.rollout.topk_ids
                                       : rl.routing_replay == RoutingReplay::old  ? &st.old.topk_ids
                                                                                  : nullptr;
  if (replay) {
    mb->replay = gather_sequence_rows(*replay, mb->mine, shape.L, shape.S, shape.T, shape.K);
    req.router_mode = RouterMode::replay;
    req.replay_ids = mb->replay.data();
  }
  if (algo_->needs().router_shift && shape.moe) {
    mb->probe = gather_sequence_rows(st.old.topk_ids, mb->mine, shape.L, shape.S, shape.T, shape.K);
    req.probe_ids = mb->probe.data();
  }
  model_->forward(&mb->result, req);
  if (req.keep_logprobs) return;  // they stay where they are (minibatch_loss_on_device)
  const std::vector<float> mine = shape.slice().response_logprobs(mb->result.logprobs, req.B);
  const ModelParallel& par = model_->parallel();
  mb->logp_new = par.dp ? collectives_allgather(*par.dp, mine) : mine;
}

// The mini-batch's LossBatch (mb->batch; logp_new is the caller's: on the host, or where the model
// is) and the view the algorithm prepares from (its gather is the caller's).
MinibatchView RlTrainer::minibatch_loss_batch(const StepState& st, Minibatch* mb) const {
  const StepShape& shape = st.shape;
  LossBatch& b = mb->batch;
  b.S = mb->size();
  b.R = shape.R;
  b.logp_new = mb->logp_new.empty() ? nullptr : mb->logp_new.data();
  b.logp_old = mb->logp_old.data();
  b.logp_rollout = mb->logp_rollout.data();
  b.mask = mb->mask.data();
  b.advantages = mb->advantages.data();
  b.norm_len = shape.R_max;
  b.logp_ref = ref_model_ ? mb->logp_ref.data() : nullptr;
  MinibatchView view;
  view.slice = shape.slice();
  view.L = shape.L;
  view.K = shape.K;
  view.S_step = shape.S;
  view.n_mine = static_cast<int>(mb->mine.size());
  view.mine = mb->mine.data();
  if (!mb->probe.empty()) {
    view.router_logp_new = mb->result.router_logp.data();
    view.router_logp_old = st.old.router_logp.data();
  }
  return view;
}

// The algorithm prepares what it owns of the batch (RSPO: γ), then the loss and its gradient.
void RlTrainer::minibatch_loss(const StepState& st, Minibatch* mb) {
  if (mb->request.keep_logprobs) {
    minibatch_loss_on_device(st, mb);
    return;
  }
  MinibatchView view = minibatch_loss_batch(st, mb);
  LossBatch& b = mb->batch;
  Collectives* dp = model_->parallel().dp;
  view.gather = [dp](const std::vector<double>& x) { return dp ? collectives_allgather(*dp, x) : x; };
  algo_->prepare(&b, view);
  algo_->loss(&mb->loss, b);
  algo_->observe(mb->loss);
  mb->dlogp_positions = view.slice.per_position_grad(mb->loss.dlogp, static_cast<int>(mb->block.begin), view.n_mine);
}

// The same loss where the log-probs are (one data-parallel rank: this rank's block is the whole
// mini-batch): the algorithm prepares what it owns on the host (RSPO's γ, from the router's
// log-probs), the aggregation's per-sequence factors come from the host's mask, and the op writes
// the gradient into the forward's packed rows and returns the mini-batch's totals (48 bytes down).
// The bits are the host loss's (policy_loss_rows on the CPU; tests/rl/test_loss_device.cpp).
void RlTrainer::minibatch_loss_on_device(const StepState& st, Minibatch* mb) {
  const StepShape& shape = st.shape;
  const Backend& be = model_->backend();
  const int n = mb->size(), R = shape.R;
  MinibatchView view = minibatch_loss_batch(st, mb);  // logp_new: where the model is (left null)
  LossBatch& b = mb->batch;
  view.gather = [](const std::vector<double>& x) { return x; };
  algo_->prepare(&b, view);
  PolicyLossParams p;
  Aggregation agg = Aggregation::token_mean;
  algo_->device_form(&p, &agg);
  if (!ref_model_) p.kl_coef = 0.0f;
  std::vector<double> scale(n);
  rl::aggregation_scales(scale.data(), agg, b);
  const std::vector<int>& row_begin = mb->result.row_begin;
  std::vector<int32_t> new_row(n);
  for (int i = 0; i < n; ++i) new_row[i] = row_begin[i] + shape.P - 1;
  const size_t SR = static_cast<size_t>(shape.S) * R;
  const float* rows = st.loss_rows.data();
  mb->dlogp_rows.resize(be, static_cast<size_t>(row_begin[n]));
  be.mem_zero(mb->dlogp_rows.data(), mb->dlogp_rows.bytes());
  double totals[kLossTotals];
  be.policy_loss_rows(mb->dlogp_rows.data(), totals, nullptr, nullptr, nullptr, mb->result.resident_logprobs.data(),
                      new_row.data(), rows, rows + SR, rows + 2 * SR, p.kl_coef > 0.0f ? rows + 3 * SR : nullptr,
                      mb->seqs.data(), st.loss_advantages.data(), b.gamma, scale.data(), n, R, p);
  LossOutput& out = mb->loss;
  out = LossOutput{};
  out.loss = totals[kLossSum];
  out.kl_loss = totals[kLossKl];
  out.tokens = totals[kLossTokens];
  out.clipped_tokens = totals[kLossClipped];
  out.masked_tokens = totals[kLossMasked];
  out.ratio_max_neg_adv = totals[kLossRatioMaxNegAdv];
  algo_->observe(out);
}

void RlTrainer::minibatch_backward(StepState* st, Minibatch* mb) {
  HookContext c = hook_context(st);
  for (const auto& h : hooks_.active) h->before_backward(c, *mb);
  model_->zero_grads();
  if (mb->request.keep_logprobs)
    model_->backward_rows(mb->dlogp_rows.data());
  else
    model_->backward(mb->dlogp_positions.data());
  for (const auto& h : hooks_.active) h->after_backward(c, *mb);
}

// AdamW with the scheduled learning rate; the stale-rollout pipeline keeps the new weights.
void RlTrainer::optimizer_step(Minibatch* mb) {
  const float lr = optim_lr_at(s_.optim, opt_step_, static_cast<int64_t>(s_.rl.steps) * s_.rl.minibatches);
  mb->grad_norm = adamw_step(*adamw_, *model_, lr, opt_step_);  // where the parameters live
  ++opt_step_;
  model_->invalidate_packed_weights();
  if (rollout_model_) {  // a read of the parameters (a download where they live on a device)
    const Model& updated = *model_;
    snapshots_.push_back({updated.params().data(), model_->expert_bias()});
    while (static_cast<int>(snapshots_.size()) > s_.rl.rollout_staleness + 1) snapshots_.pop_front();
  }
}

void RlTrainer::minibatch_totals(StepState* st, const Minibatch& mb) const {
  TrainTotals& t = st->totals;
  const LossOutput& loss = mb.loss;
  t.finite = t.finite && std::isfinite(loss.loss) && std::isfinite(mb.grad_norm);
  t.loss += loss.loss;
  t.grad_norm += mb.grad_norm;
  t.aux_loss += mb.result.aux_loss;
  t.grad_norm_max = std::max(t.grad_norm_max, mb.grad_norm);
  // PPO's unclipped branch for A < 0 and r > 1+ε, unless the dual clip caps it
  t.ratio_max_neg_adv = std::max(t.ratio_max_neg_adv, loss.ratio_max_neg_adv);
  t.clipped += loss.clipped_tokens;
  t.masked += loss.masked_tokens;
  t.tokens += loss.tokens;
}

// --dump-tensors: the per-token tensors of the step's first mini-batch.
void RlTrainer::minibatch_dump(const StepState& st, const Minibatch& mb, RunResults* res) const {
  const int n = mb.size(), R = st.shape.R;
  const int64_t step = st.index;
  const std::vector<int64_t> shape{n, R};
  std::vector<float> advs(static_cast<size_t>(n) * R);
  for (int i = 0; i < n; ++i) std::fill_n(&advs[static_cast<size_t>(i) * R], R, mb.advantages[i]);
  res->dump(step, "logp_rollout", shape, mb.logp_rollout);
  res->dump(step, "logp_old", shape, mb.logp_old);
  res->dump(step, "logp_new", shape, mb.logp_new);
  res->dump(step, "advantages", shape, advs);
  res->dump(step, "mask", shape, mb.mask);
  res->dump(step, "ratio", shape, mb.loss.ratio);
  res->dump(step, "weights", shape, mb.loss.weight);
  res->dump(step, "loss_terms", shape, mb.loss.term);
  res->dump(step, "loss", {}, {static_cast<float>(mb.loss.loss)});
  res->dump(step, "sequence_index", {n}, std::vector<float>(mb.seqs.begin(), mb.seqs.end()));
  std::vector<float> len(n), truncated(n), reward(n);
  for (int i = 0; i < n; ++i) {
    len[i] = static_cast<float>(st.rollout.len[mb.seqs[i]]);
    truncated[i] = static_cast<float>(st.rollout.truncated[mb.seqs[i]]);
    reward[i] = st.reward[mb.seqs[i]];
  }
  res->dump(step, "response_length", {n}, len);
  res->dump(step, "truncated", {n}, truncated);
  res->dump(step, "reward", {n}, reward);
}

// The step's row of metrics (docs/metrics.md): rewards, losses, the algorithm's and the
// stabilisers' own (the inactive ones' at their off values), the π_old forward's expert load
// and traffic, timings, the evaluation when due, and the collapse precursors last (they read the
// row).
void RlTrainer::record_metrics(StepState* st, RunResults* res) {
  const RlConfig& rl = s_.rl;
  const StepShape& shape = st->shape;
  const TrainTotals& t = st->totals;
  const int S = shape.S, M = rl.minibatches;
  double rmean = 0.0, rvar = 0.0, ent = 0.0, tokens = 0.0;
  for (float r : st->reward) rmean += r;
  rmean /= S;
  for (float r : st->reward) rvar += (r - rmean) * (r - rmean);
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < st->rollout.len[s]; ++r, tokens += 1.0) ent += st->rollout.entropy[static_cast<size_t>(s) * shape.R + r];
  res->set("reward_mean", rmean);
  res->set("reward_std", std::sqrt(rvar / std::max(S - 1, 1)));
  res->set("entropy", ent / tokens);
  record_answers(*st, res);
  res->set("loss", t.loss / M);
  res->set("grad_norm", t.grad_norm / M);
  res->set("grad_norm_max", t.grad_norm_max);
  res->set("ratio_max_neg_adv", t.ratio_max_neg_adv);
  res->set("aux_loss", t.aux_loss / M);
  res->set("clip_frac", t.tokens > 0 ? t.clipped / t.tokens : 0.0);
  res->set("staleness_kl", t.staleness_kl);
  res->set("masked_frac", t.tokens > 0 ? t.masked / t.tokens : 0.0);
  algo_->record(res);
  algorithm_record_others_off(res, rl.loss.algorithm);
  for (const ExtraMetric& x : hooks_.off_metrics) res->set(x.name, x.off);
  HookContext c = hook_context(st);
  for (const auto& h : hooks_.active) h->end_of_step(c, res);
  res->set("lr", optim_lr_at(s_.optim, opt_step_ - 1, static_cast<int64_t>(rl.steps) * M));
  res->set("finite", t.finite ? 1.0 : 0.0);
  if (shape.moe) record_expert_load(*st, res);
  res->set("time_rollout", st->time_rollout);
  res->set("time_old_logprobs", st->time_old_logprobs);
  res->set("time_train", st->time_train);
  if ((rl.eval_every > 0 && (st->index + 1) % rl.eval_every == 0) || st->index + 1 == rl.steps) {
    const auto te = Clock::now();
    record_eval(res, evaluate(), "");
    if (probe_) record_router_drift(res);
    res->set("time_eval", seconds_since(te));
  }
  precursors_record(res, rl.precursors);
}

// What the step's sampled responses get right (docs/metrics.md, "What the answers get right"):
// shares of the S responses graded by Task::grade (a truncated response counts as not well formed
// and wrong), and the Pearson correlation over the S responses between the reward they were paid
// and their exact match (NaN when either is constant): how far the reward pays for the answer.
void RlTrainer::record_answers(const StepState& st, RunResults* res) const {
  const StepShape& shape = st.shape;
  const int S = shape.S, T = shape.T, P = shape.P, A = shape.A;
  const RolloutBatch& ro = st.rollout;
  double exact = 0.0, fin = 0.0, working = 0.0, early = 0.0, late = 0.0, malformed = 0.0;
  double sx = 0.0, sy = 0.0, sxx = 0.0, syy = 0.0, sxy = 0.0;
  for (int s = 0; s < S; ++s) {
    AnswerGrade g;
    if (!ro.truncated[s])
      g = task_->grade(&st.answers[static_cast<size_t>(s) * A], st.answer_len[s],
                       &ro.tokens[static_cast<size_t>(s) * T + P], ro.len[s]);
    exact += g.exact;
    fin += g.final_correct;
    working += g.working_correct;
    early += g.well_formed && g.stop < 0;
    late += g.well_formed && g.stop > 0;
    malformed += !g.well_formed;
    const double x = st.reward[s], y = g.exact ? 1.0 : 0.0;
    sx += x; sy += y; sxx += x * x; syy += y * y; sxy += x * y;
  }
  res->set("rollout_exact", exact / S);
  res->set("rollout_final", fin / S);
  res->set("rollout_working", working / S);
  res->set("rollout_stop_early", early / S);
  res->set("rollout_stop_late", late / S);
  res->set("rollout_malformed", malformed / S);
  const double cxx = sxx - sx * sx / S, cyy = syy - sy * sy / S, cxy = sxy - sx * sy / S;
  res->set("reward_exact_corr", cxx > 0.0 && cyy > 0.0 ? cxy / std::sqrt(cxx * cyy)
                                                       : std::numeric_limits<double>::quiet_NaN());
}

// The load of the train engine's π_old forward over all positions, its all-to-all traffic per
// layer and EP rank (ForwardResult::a2a_bytes), and the balance statistics of the load.
void RlTrainer::record_expert_load(const StepState& st, RunResults* res) const {
  const int L = st.shape.L, E = st.shape.E;
  const ForwardResult& old = st.old;
  std::vector<double> load(old.expert_load.begin(), old.expert_load.end());
  res->set_row("expert_load", {L, E}, load);
  const int64_t ranks = static_cast<int64_t>(old.a2a_bytes.size()) / L;
  res->set_row("a2a_bytes", {L, ranks}, std::vector<double>(old.a2a_bytes.begin(), old.a2a_bytes.end()));
  res->set_row("tokens_received", {L, ranks},
               std::vector<double>(old.tokens_received.begin(), old.tokens_received.end()));
  const ExpertLoadStats bal = expert_load_stats(load.data(), L, E);
  res->set("load_cv", bal.cv);
  res->set("load_max_over_mean", bal.max_over_mean);
  res->set("dead_experts", bal.dead);
}

// How far the router's choices have moved from the base policy's on the fixed probe set
// (sim/rl/router_drift.h): the mean over layers and the largest layer's share.
void RlTrainer::record_router_drift(RunResults* res) const {
  TransferPhaseScope ph(model_->backend(), TransferPhase::eval);
  const ModelConfig& cfg = model_->config();
  const std::vector<int32_t> ids = router_probe_route(*model_, *probe_, s_.eval);
  const std::vector<double> drift = router_probe_drift(*probe_, ids, cfg.n_layers, cfg.top_k, model_->parallel());
  double mean = 0.0, mx = 0.0;
  for (double d : drift) {
    mean += d;
    mx = std::max(mx, d);
  }
  res->set("router_drift", mean / cfg.n_layers);
  res->set("router_drift_layer_max", mx);
}

HookContext RlTrainer::hook_context(StepState* st) { return HookContext{*model_, rollout_model_.get(), *st}; }

bool RlTrainer::check_collapse(const RunResults& res) const {
  if (res.last("finite") == 0.0) return true;
  const std::vector<double>* rewards = res.series("reward_mean");
  if (!rewards || rewards->empty()) return false;
  // Recomputed from the whole series (not carried state), so a resumed run decides alike. The
  // per-step reward of a few prompts is noisy: the rule reads its moving average over
  // collapse_window steps, and the running peak of that average.
  const int w = s_.rl.collapse_window;
  double peak = 0.0, sum = 0.0;
  int below = 0;
  for (size_t i = 0; i < rewards->size(); ++i) {
    const double r = (*rewards)[i];
    if (!std::isfinite(r)) return true;
    sum += r;
    if (i >= static_cast<size_t>(w)) sum -= (*rewards)[i - w];
    if (i + 1 < static_cast<size_t>(w)) continue;
    const double avg = sum / w;
    peak = std::max(peak, avg);
    // below the peak only counts once there is a peak to fall from
    below = (peak > 0.05 && avg < s_.rl.collapse_frac * peak) ? below + 1 : 0;
  }
  return below >= s_.rl.collapse_patience;
}

}  // namespace moerl
