// trainer.cpp — see trainer.h. Positions: a sequence is prompt (P) + response (R) tokens, T = P+R.
// Response token r sits at position P+r; its log-prob is computed at position P+r−1. Routing
// metrics compare the positions that compute the scored log-probs, P−1..T−2 (the last prompt
// position, whose routing decides the first response token, included; the last position, whose
// output scores nothing, left out); RSPO's router shift is read at the same positions.
#include "sim/rl/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/rng.h"
#include "sim/audit.h"
#include "sim/comm/gather.h"
#include "sim/rl/diagnostics.h"
#include "sim/rl/loss.h"
#include "sim/rl/precursors.h"
#include "sim/rl/rollout.h"
#include "sim/rl/router_stabilisers.h"

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

// Rows [L, S·T, K] of the given sequences, in order → [L, n·T, K].
std::vector<int32_t> gather_ids(const std::vector<int32_t>& ids, const std::vector<int>& seqs, int L,
                                int S, int T, int K) {
  const int n = static_cast<int>(seqs.size());
  std::vector<int32_t> out(static_cast<size_t>(L) * n * T * K);
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < n; ++i)
      std::memcpy(&out[((static_cast<size_t>(l) * n + i) * T) * K],
                  &ids[((static_cast<size_t>(l) * S + seqs[i]) * T) * K], sizeof(int32_t) * T * K);
  return out;
}
// Rows [L, S·T, E] of the given sequences, in order → [L, n·T, E].
std::vector<float> gather_rows(const std::vector<float>& x, const std::vector<int>& seqs, int L, int S,
                               int T, int E) {
  const int n = static_cast<int>(seqs.size());
  std::vector<float> out(static_cast<size_t>(L) * n * T * E);
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < n; ++i)
      std::memcpy(&out[((static_cast<size_t>(l) * n + i) * T) * E],
                  &x[((static_cast<size_t>(l) * S + seqs[i]) * T) * E], sizeof(float) * T * E);
  return out;
}
}  // namespace

std::vector<uint8_t> rl_scored_positions_mask(int S, int P, int T) {
  std::vector<uint8_t> mask(static_cast<size_t>(S) * T, 0);
  for (int s = 0; s < S; ++s)
    for (int t = P - 1; t < T - 1; ++t) mask[static_cast<size_t>(s) * T + t] = 1;
  return mask;
}

RlTrainer::RlTrainer(const RlSetup& setup, Model* model) : s_(setup), model_(model) {
  s_.rl.resolve();
  s_.rl.validate();
  task_ = task_create(s_.task);
  const ModelConfig& cfg = model_->config();
  if (task_->vocab_size() > cfg.vocab_size)
    throw std::invalid_argument("task." + std::string(task_->name()) + " needs vocab_size >= " +
                                std::to_string(task_->vocab_size()) + " but model.vocab_size = " +
                                std::to_string(cfg.vocab_size));
  if (task_->prompt_len() + task_->answer_len() > cfg.max_seq_len)
    throw std::invalid_argument("task needs sequences of " +
                                std::to_string(task_->prompt_len() + task_->answer_len()) +
                                " tokens but model.max_seq_len = " + std::to_string(cfg.max_seq_len));
  if (s_.rl.routing_replay != RoutingReplay::none && !cfg.is_moe())
    throw std::invalid_argument("rl.routing_replay = " + std::string(routing_replay_name(s_.rl.routing_replay)) +
                                ": needs an MoE model (model.n_experts > 0)");
  algo_ = algorithm_create(s_.rl.loss);
  s_.optim.validate("optim");
  adamw_ = std::make_unique<AdamW>(s_.optim, model_->params());
  adamw_->set_backend(model_->backend());
  if (s_.rl.freeze_router) adamw_->freeze(".moe.router");
  // expert parallelism: this rank updates its own experts; the norm covers every rank's
  const ModelParallel& par = model_->parallel();
  adamw_->set_parallel(cfg.n_experts, model_->expert_range(), par.ep, par.canonical());
  if (s_.rl.router_temp_every > 0 && cfg.is_moe())
    model_->router_control().temperature.assign(cfg.n_layers, 1.0f);
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
    if (name == "optim/m") adamw_->m() = v;
    else if (name == "optim/v") adamw_->v() = v;
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

double RlTrainer::evaluate() const {
  return rollout_eval_accuracy(*model_, *task_, s_.seed, s_.rl.eval_prompts, s_.eval);
}

void RlTrainer::step(int64_t step, RunResults* res) {
  const auto t_step = Clock::now();
  const ModelConfig& cfg = model_->config();
  const RlConfig& rl = s_.rl;
  const int G = rl.group_size, S = rl.prompts_per_step * G, P = task_->prompt_len(),
            R = task_->answer_len(), T = P + R, L = cfg.n_layers, K = cfg.top_k,
            E = cfg.n_experts, V = cfg.vocab_size;
  const bool moe = cfg.is_moe();
  const float tau = rl.sampling.temperature > 0.0f ? rl.sampling.temperature : 1.0f;
  res->begin_step(step);
  // The base policy's held-out accuracy, before the first update: what "RL improved (or ended
  // below) the base" is read against, in every run. Greedy and from its own split, so it draws
  // from no stream the run uses.
  if (step == 0) res->set("eval_accuracy_base", evaluate());

  // 1. prompts, each repeated group_size times
  std::vector<int32_t> prompts(static_cast<size_t>(S) * P), answers(static_cast<size_t>(S) * R);
  for (int p = 0; p < rl.prompts_per_step; ++p) {
    task_->example(&prompts[static_cast<size_t>(p) * G * P], &answers[static_cast<size_t>(p) * G * R],
                   s_.seed, 0, static_cast<uint64_t>(step) * rl.prompts_per_step + p);
    for (int g = 1; g < G; ++g) {
      std::memcpy(&prompts[(static_cast<size_t>(p) * G + g) * P], &prompts[static_cast<size_t>(p) * G * P], sizeof(int32_t) * P);
      std::memcpy(&answers[(static_cast<size_t>(p) * G + g) * R], &answers[static_cast<size_t>(p) * G * R], sizeof(int32_t) * R);
    }
  }

  // 2. rollout engine
  auto t0 = Clock::now();
  const NumericsProfile roll = keyed(s_.rollout, s_.seed, 1, step);
  const NumericsProfile train = keyed(s_.train, s_.seed, 2, step);
  RolloutBatch rb;
  Model* roll_model = model_;
  if (rollout_model_) {  // the weights of rollout_staleness optimizer steps ago
    rollout_model_->params().data() = snapshots_.front().params;
    rollout_model_->expert_bias() = snapshots_.front().bias;
    rollout_model_->invalidate_packed_weights();
    roll_model = rollout_model_.get();
  }
  // Data parallelism: every rank rolls out (and below runs the train engine on) its contiguous
  // block of the sequences; results are gathered, so rewards, advantages and metrics are computed
  // from the whole batch on every rank, in the serial order.
  const ModelParallel& par = model_->parallel();
  const SeqBlock blk = dp_block(S, par.dp_size(), par.dp_rank());
  if (par.dp_size() > 1 && (rl.router_kl_coef > 0.0f || rl.calib_coef > 0.0f))
    throw std::invalid_argument("rl.router_kl_coef / rl.calib_coef: the router KL regularisers run on one "
                                "data-parallel rank only (got " + std::to_string(par.dp_size()) + " ranks)");
  std::vector<int> blk_seqs(static_cast<size_t>(blk.size()));
  std::iota(blk_seqs.begin(), blk_seqs.end(), static_cast<int>(blk.begin));
  rollout_generate(&rb, *roll_model, roll, prompts.data() + blk.begin * P, static_cast<int>(blk.size()),
                   P, R, rl.sampling, s_.seed, static_cast<uint64_t>(step),
                   static_cast<uint64_t>(blk.begin), rl.shared_prefix_routing ? G : 1);
  if (par.dp) gather_rollout(&rb, *par.dp, L, moe);
  const double time_rollout = seconds_since(t0);

  // 3. rewards and group-normalised advantages (unbiased std; Dr.GRPO: no division)
  std::vector<float> reward(S), adv(S);
  for (int s = 0; s < S; ++s)
    reward[s] = task_->reward(&answers[static_cast<size_t>(s) * R], &rb.tokens[static_cast<size_t>(s) * T + P],
                              s_.task.partial_credit);
  for (int p = 0; p < rl.prompts_per_step; ++p) {
    double mean = 0.0, var = 0.0;
    for (int g = 0; g < G; ++g) mean += reward[p * G + g];
    mean /= G;
    for (int g = 0; g < G; ++g) var += (reward[p * G + g] - mean) * (reward[p * G + g] - mean);
    const double stdev = G > 1 ? std::sqrt(var / (G - 1)) : 1.0;
    if (G == 1) mean = 0.0;
    for (int g = 0; g < G; ++g) {
      const double centred = reward[p * G + g] - mean;
      adv[p * G + g] = static_cast<float>(rl.adv_std_norm ? centred / (stdev + rl.adv_eps) : centred);
    }
  }

  // 4. train engine: π_old (always recomputed: the mismatch metrics need it even in bypass mode)
  t0 = Clock::now();
  ForwardRequest req;
  req.tokens = rb.tokens.data() + blk.begin * T; req.B = static_cast<int>(blk.size()); req.B_total = S;
  req.T = T; req.profile = &train;
  req.temperature = tau; req.want_logits = true; req.want_own_topk = moe;
  req.want_router_logits = moe && rl.router_kl_coef > 0.0f;
  std::vector<int32_t> blk_replay;
  if (rl.routing_replay == RoutingReplay::rollout) {
    req.router_mode = RouterMode::replay;
    req.replay_ids = rb.topk_ids.data();
    if (blk.size() < S) {
      blk_replay = gather_ids(rb.topk_ids, blk_seqs, L, S, T, K);
      req.replay_ids = blk_replay.data();
    }
  }
  ForwardResult old;
  model_->forward(&old, req);
  if (par.dp) gather_forward(&old, *par.dp, L, moe, req.want_own_topk);
  std::vector<float> logp_train(static_cast<size_t>(S) * R);
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r)
      logp_train[static_cast<size_t>(s) * R + r] = old.logprobs[static_cast<size_t>(s) * (T - 1) + P - 1 + r];
  const std::vector<float>& logp_old = rl.old_logprobs == OldLogprobs::rollout ? rb.logp : logp_train;
  std::vector<float> logp_ref;
  if (ref_model_) {
    ForwardRequest rq = req;
    rq.router_mode = RouterMode::normal;
    rq.replay_ids = nullptr;
    rq.want_logits = rq.want_own_topk = false;
    ForwardResult ref;
    ref_model_->forward(&ref, rq);
    if (par.dp) gather_forward(&ref, *par.dp, L, moe, false);
    logp_ref.resize(logp_train.size());
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r)
        logp_ref[static_cast<size_t>(s) * R + r] = ref.logprobs[static_cast<size_t>(s) * (T - 1) + P - 1 + r];
  }
  // Routing calibration: the inference engine's router logits on the same tokens (current weights,
  // rollout profile, teacher-forced) are the target of KL(train router ‖ inference router).
  std::vector<float> calib_target;
  const double calib_lambda = moe && rl.calib_coef > 0.0f && step % rl.calib_every == 0
                                  ? ramp_weight(rl.calib_schedule, rl.calib_coef, step, rl.steps) : 0.0;
  if (calib_lambda > 0.0) {
    ForwardRequest cq = req;
    cq.profile = &roll;
    cq.router_mode = RouterMode::normal;
    cq.replay_ids = nullptr;
    cq.want_logits = cq.want_own_topk = false;
    cq.want_router_logits = true;
    ForwardResult inf;
    model_->forward(&inf, cq);
    calib_target = std::move(inf.router_logits);
  }
  res->set("calib_lambda", calib_lambda);
  if (rollout_model_) {
    // Separate the two parts of μ vs π_old: staleness (stale vs current weights, both under the
    // rollout profile, teacher-forced on the sampled tokens) and numerics (current weights,
    // rollout vs train profile).
    ForwardRequest cr = req;
    cr.profile = &roll;
    cr.router_mode = RouterMode::normal;
    cr.replay_ids = nullptr;
    cr.want_logits = cr.want_own_topk = false;
    ForwardResult cur;
    model_->forward(&cur, cr);
    if (par.dp) gather_forward(&cur, *par.dp, L, moe, false);
    double k_stale = 0.0, k_num = 0.0;
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r) {
        const double lc = cur.logprobs[static_cast<size_t>(s) * (T - 1) + P - 1 + r];
        const double a = lc - rb.logp[static_cast<size_t>(s) * R + r];          // log μ_cur/μ_stale
        const double b = logp_train[static_cast<size_t>(s) * R + r] - lc;         // log π_old/μ_cur
        k_stale += std::exp(a) - 1.0 - a;
        k_num += std::exp(b) - 1.0 - b;
      }
    res->set("kl_staleness", k_stale / (static_cast<double>(S) * R));
    res->set("kl_numerics", k_num / (static_cast<double>(S) * R));
  }
  const double time_old = seconds_since(t0);

  // mismatch between the engines on the response tokens (rollout = A, train = B)
  {
    AuditAccum acc;
    audit_init(&acc, L);
    if (moe) {
      const std::vector<uint8_t> mask = rl_scored_positions_mask(S, P, T);
      audit_add_routing(&acc, rb.topk_ids.data(), old.own_topk_ids.data(), mask.data(), L, S * T, K);
    }
    std::vector<float> train_lp(static_cast<size_t>(S) * R * V);
    std::vector<int32_t> targets(static_cast<size_t>(S) * R);
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < R; ++r) {
        const float* z = &old.logits[(static_cast<size_t>(s) * T + P - 1 + r) * V];
        float* dst = &train_lp[(static_cast<size_t>(s) * R + r) * V];
        for (int v = 0; v < V; ++v) dst[v] = z[v] / tau;
        targets[static_cast<size_t>(s) * R + r] = rb.tokens[static_cast<size_t>(s) * T + P + r];
      }
    // the same log-softmax the rollout applied, so identical engines compare identical bits
    const std::vector<float> scaled(train_lp);
    model_->backend().log_softmax_forward(train_lp.data(), scaled.data(), S * R, V);
    audit_add_logprobs(&acc, rb.logp_all.data(), train_lp.data(), targets.data(), nullptr, S * R, V);
    const AuditMetrics am = audit_finish(acc);
    res->set("kl_rollout_train", am.k3);
    res->set("kl_rollout_train_full", am.kl);
    res->set("extreme_token_frac", am.extreme_share);
    res->set("any_flip_frac", moe ? am.any_flip_share : 0.0);
    res->set("flip_rate_mean", moe ? am.mean_flipped_layers / L : 0.0);
    if (moe) res->set_row("flip_rate", {L}, am.flip_rate);
    double rmin = std::numeric_limits<double>::infinity(), rmax = 0.0, rsum = 0.0;
    for (size_t j = 0; j < logp_train.size(); ++j) {
      const double rho = std::exp(static_cast<double>(logp_train[j]) - rb.logp[j]);
      rmin = std::min(rmin, rho); rmax = std::max(rmax, rho); rsum += rho;
    }
    res->set("is_ratio_mean", rsum / logp_train.size());
    res->set("is_ratio_min", rmin);
    res->set("is_ratio_max", rmax);
  }
  // what every correction would do to this batch, and where the mismatch lives (the recomputed
  // π_old, so bypass runs see the engines' mismatch too)
  correction_diagnostics_record(res, correction_diagnostics(rl.loss, logp_train.data(), rb.logp.data(), S, R));

  // 5. mini-batches: a seeded permutation of the sequences, one optimizer step each
  t0 = Clock::now();
  std::vector<int> order(S);
  std::iota(order.begin(), order.end(), 0);
  Rng perm(rng_derive(s_.seed, static_cast<uint64_t>(Stream::data), {2, static_cast<uint64_t>(step)}));
  perm.shuffle(order.data(), S);
  const int M = rl.minibatches, Smb = S / M;
  const std::vector<int32_t>* replay_src = rl.routing_replay == RoutingReplay::rollout ? &rb.topk_ids
                                          : rl.routing_replay == RoutingReplay::old ? &old.topk_ids
                                                                                    : nullptr;
  const bool rspo = std::string(algo_->name()) == "rspo";
  double loss_sum = 0.0, gnorm_sum = 0.0, aux_sum = 0.0, clipped = 0.0, masked = 0.0, tokens = 0.0;
  // the burstiest mini-batch: its gradient norm, and the largest ratio a negative-advantage token
  // carried into the loss (PPO's unclipped branch for A < 0 and r > 1+ε unless the dual clip caps it)
  double gnorm_max = 0.0, ratio_max_neg = 0.0;
  double gamma_sum = 0.0, gamma_min = 1.0, gamma_n = 0.0;
  double surgery_fired = 0.0, surgery_checked = 0.0;
  bool finite = true;
  for (int m = 0; m < M; ++m) {
    std::vector<int> seqs(order.begin() + m * Smb, order.begin() + (m + 1) * Smb);
    std::vector<int32_t> tok(static_cast<size_t>(Smb) * T);
    std::vector<float> lnew(static_cast<size_t>(Smb) * R), lold(lnew.size()), lroll(lnew.size()),
        lref(lnew.size()), mask(lnew.size(), 1.0f), a(Smb), gamma(lnew.size(), 1.0f);
    for (int i = 0; i < Smb; ++i) {
      const int s = seqs[i];
      std::memcpy(&tok[static_cast<size_t>(i) * T], &rb.tokens[static_cast<size_t>(s) * T], sizeof(int32_t) * T);
      std::memcpy(&lold[static_cast<size_t>(i) * R], &logp_old[static_cast<size_t>(s) * R], sizeof(float) * R);
      std::memcpy(&lroll[static_cast<size_t>(i) * R], &rb.logp[static_cast<size_t>(s) * R], sizeof(float) * R);
      if (ref_model_) std::memcpy(&lref[static_cast<size_t>(i) * R], &logp_ref[static_cast<size_t>(s) * R], sizeof(float) * R);
      a[i] = adv[s];
    }
    // this rank's block of the mini-batch runs forward/backward; the loss sees the whole of it
    const SeqBlock mb = dp_block(Smb, par.dp_size(), par.dp_rank());
    const int Bm = static_cast<int>(mb.size());
    const std::vector<int> mine(seqs.begin() + mb.begin, seqs.begin() + mb.end);
    ForwardRequest mr;
    mr.tokens = tok.data() + mb.begin * T; mr.B = Bm; mr.B_total = Smb; mr.T = T; mr.profile = &train;
    mr.temperature = tau;
    mr.save_for_backward = true;
    mr.call = 1 + static_cast<uint64_t>(m);
    std::vector<int32_t> replay, probe;
    if (replay_src) {
      replay = gather_ids(*replay_src, mine, L, S, T, K);
      mr.router_mode = RouterMode::replay;
      mr.replay_ids = replay.data();
    }
    if (rspo && moe) {
      probe = gather_ids(old.topk_ids, mine, L, S, T, K);
      mr.probe_ids = probe.data();
    }
    // router regularisers: targets of this mini-batch's rows (single data-parallel rank: checked)
    RouterControl& rctl = model_->router_control();
    std::vector<float> kl_full, kl_topk;
    if (req.want_router_logits) {
      kl_full = gather_rows(old.router_logits, mine, L, S, T, E);
      rctl.kl_full_target = kl_full.data();
      rctl.kl_full_weight = rl.router_kl_coef;
    }
    if (calib_lambda > 0.0) {
      kl_topk = gather_rows(calib_target, mine, L, S, T, E);
      rctl.kl_topk_target = kl_topk.data();
      rctl.kl_topk_weight = static_cast<float>(calib_lambda);
      rctl.kl_topk_temperature = rl.calib_temperature;
    }
    ForwardResult nw;
    model_->forward(&nw, mr);
    std::vector<float> lnew_mine(static_cast<size_t>(Bm) * R);
    for (int i = 0; i < Bm; ++i)
      for (int r = 0; r < R; ++r)
        lnew_mine[static_cast<size_t>(i) * R + r] = nw.logprobs[static_cast<size_t>(i) * (T - 1) + P - 1 + r];
    lnew = par.dp ? collectives_allgather(*par.dp, lnew_mine) : lnew_mine;
    if (rspo && moe) {  // γ = max(γ_min, exp(−mean_l mean_k |Δ log p_router|)) at π_old's experts
      std::vector<double> g_mine(static_cast<size_t>(Bm) * R);
      for (int i = 0; i < Bm; ++i)
        for (int r = 0; r < R; ++r) {
          const size_t row_new = static_cast<size_t>(i) * T + P - 1 + r;
          const size_t row_old = static_cast<size_t>(mine[i]) * T + P - 1 + r;
          double d = 0.0;
          for (int l = 0; l < L; ++l)
            for (int k = 0; k < K; ++k)
              d += std::fabs(static_cast<double>(nw.router_logp[(static_cast<size_t>(l) * Bm * T + row_new) * K + k]) -
                             old.router_logp[(static_cast<size_t>(l) * S * T + row_old) * K + k]);
          d /= static_cast<double>(L) * K;
          g_mine[static_cast<size_t>(i) * R + r] = std::max(static_cast<double>(rl.loss.rspo_floor), std::exp(-d));
        }
      const std::vector<double> g_all = par.dp ? collectives_allgather(*par.dp, g_mine) : g_mine;
      for (size_t j = 0; j < g_all.size(); ++j) {
        const double g = g_all[j];
        gamma[j] = static_cast<float>(g);
        gamma_sum += g; gamma_min = std::min(gamma_min, g); gamma_n += 1.0;
      }
    }
    LossBatch lb;
    lb.S = Smb; lb.R = R;
    lb.logp_new = lnew.data(); lb.logp_old = lold.data(); lb.logp_rollout = lroll.data();
    lb.mask = mask.data(); lb.advantages = a.data(); lb.gamma = gamma.data();
    lb.logp_ref = ref_model_ ? lref.data() : nullptr;
    LossOutput lo;
    algo_->loss(&lo, lb);
    std::vector<float> dfull(static_cast<size_t>(Bm) * (T - 1), 0.0f);
    for (int i = 0; i < Bm; ++i)
      for (int r = 0; r < R; ++r)
        dfull[static_cast<size_t>(i) * (T - 1) + P - 1 + r] = lo.dlogp[(static_cast<size_t>(mb.begin) + i) * R + r];
    if (rl.grad_surgery && moe) {
      // policy and regulariser gradients apart; the regularisers' part of each router tensor
      // loses its component against the policy's when they conflict
      rctl.regularisers_in_backward = false;
      model_->grads().zero();
      model_->backward(dfull.data());
      const std::vector<float> g_pol = model_->grads().data();
      rctl.regularisers_in_backward = true;
      model_->grads().zero();
      const std::vector<float> none(dfull.size(), 0.0f);
      model_->backward(none.data());
      std::vector<float>& g = model_->grads().data();
      for (int l = 0; l < L; ++l) {
        const ParamInfo& ri = model_->params().info("layers." + std::to_string(l) + ".moe.router");
        surgery_fired += surgery_project(g.data() + ri.offset, g_pol.data() + ri.offset, ri.size) ? 1 : 0;
        surgery_checked += 1;
      }
      for (size_t j = 0; j < g.size(); ++j) g[j] += g_pol[j];
    } else {
      model_->grads().zero();
      model_->backward(dfull.data());
    }
    rctl.kl_full_target = rctl.kl_topk_target = nullptr;
    const float lr = optim_lr_at(s_.optim, opt_step_, static_cast<int64_t>(rl.steps) * M);
    const double gnorm = adamw_->step(&model_->params(), &model_->grads(), lr, opt_step_);
    ++opt_step_;
    model_->invalidate_packed_weights();
    if (rollout_model_) {
      snapshots_.push_back({model_->params().data(), model_->expert_bias()});
      while (static_cast<int>(snapshots_.size()) > rl.rollout_staleness + 1) snapshots_.pop_front();
    }
    if (cfg.expert_bias) {  // aux-loss-free bias: b_e += u·sign(mean load − load_e), per layer
      for (int l = 0; l < L; ++l) {
        double mean = 0.0;
        for (int e = 0; e < E; ++e) mean += nw.expert_load[static_cast<size_t>(l) * E + e];
        mean /= E;
        for (int e = 0; e < E; ++e) {
          const double diff = mean - nw.expert_load[static_cast<size_t>(l) * E + e];
          model_->expert_bias()[static_cast<size_t>(l) * E + e] +=
              cfg.bias_update_rate * static_cast<float>((diff > 0) - (diff < 0));
        }
      }
    }
    finite = finite && std::isfinite(lo.loss) && std::isfinite(gnorm);
    loss_sum += lo.loss; gnorm_sum += gnorm; aux_sum += nw.aux_loss;
    gnorm_max = std::max(gnorm_max, gnorm);
    for (int i = 0; i < Smb; ++i)
      if (a[i] < 0.0f)
        for (int r = 0; r < R; ++r)
          if (mask[static_cast<size_t>(i) * R + r] != 0.0f)
            ratio_max_neg = std::max(ratio_max_neg, static_cast<double>(lo.ratio[static_cast<size_t>(i) * R + r]));
    clipped += lo.clipped_tokens; masked += lo.masked_tokens; tokens += lo.tokens;
    if (m == 0 && s_.dump_tensors) {
      const std::vector<int64_t> shape{Smb, R};
      std::vector<float> advs(static_cast<size_t>(Smb) * R);
      for (int i = 0; i < Smb; ++i) std::fill_n(&advs[static_cast<size_t>(i) * R], R, a[i]);
      res->dump(step, "logp_rollout", shape, lroll);
      res->dump(step, "logp_old", shape, lold);
      res->dump(step, "logp_new", shape, lnew);
      res->dump(step, "advantages", shape, advs);
      res->dump(step, "mask", shape, mask);
      res->dump(step, "ratio", shape, lo.ratio);
      res->dump(step, "weights", shape, lo.weight);
      res->dump(step, "loss_terms", shape, lo.term);
      res->dump(step, "loss", {}, {static_cast<float>(lo.loss)});
      std::vector<float> seq_index(seqs.begin(), seqs.end());
      res->dump(step, "sequence_index", {Smb}, seq_index);
    }
  }
  const double time_train = seconds_since(t0);

  // 6. metrics of the step
  double rmean = 0.0, rvar = 0.0, ent = 0.0;
  for (float r : reward) rmean += r;
  rmean /= S;
  for (float r : reward) rvar += (r - rmean) * (r - rmean);
  for (float h : rb.entropy) ent += h;
  res->set("reward_mean", rmean);
  res->set("reward_std", std::sqrt(rvar / std::max(S - 1, 1)));
  res->set("entropy", ent / rb.entropy.size());
  res->set("loss", loss_sum / M);
  res->set("grad_norm", gnorm_sum / M);
  res->set("grad_norm_max", gnorm_max);
  res->set("ratio_max_neg_adv", ratio_max_neg);
  res->set("aux_loss", aux_sum / M);
  res->set("clip_frac", tokens > 0 ? clipped / tokens : 0.0);
  res->set("icepop_masked_frac", s_.rl.loss.algorithm == "icepop" && tokens > 0 ? masked / tokens : 0.0);
  res->set("masked_frac", tokens > 0 ? masked / tokens : 0.0);
  res->set("rspo_gamma_mean", gamma_n > 0 ? gamma_sum / gamma_n : 1.0);
  res->set("rspo_gamma_min", gamma_n > 0 ? gamma_min : 1.0);
  res->set("surgery_frac", surgery_checked > 0 ? surgery_fired / surgery_checked : 0.0);
  if (moe && rl.router_temp_every > 0) {  // router temperature control from the π_old load
    std::vector<float>& tau_r = model_->router_control().temperature;
    if ((step + 1) % rl.router_temp_every == 0) {
      for (int l = 0; l < L; ++l)
        tau_r[l] = router_temperature_update(tau_r[l], &old.expert_load[static_cast<size_t>(l) * E], E, rl.router_temp);
      model_->invalidate_packed_weights();
      if (rollout_model_) rollout_model_->router_control().temperature = tau_r;
    }
    double mean = 0.0;
    for (float t : tau_r) mean += t;
    res->set("router_temperature_mean", mean / L);
  }
  res->set("lr", optim_lr_at(s_.optim, opt_step_ - 1, static_cast<int64_t>(rl.steps) * M));
  res->set("finite", finite ? 1.0 : 0.0);
  if (moe) {  // load of the train engine's π_old forward over all positions
    std::vector<double> load(old.expert_load.begin(), old.expert_load.end());
    res->set_row("expert_load", {L, E}, load);
    // all-to-all traffic of that forward per layer and EP rank (ForwardResult::a2a_bytes)
    const int64_t ranks = static_cast<int64_t>(old.a2a_bytes.size()) / L;
    res->set_row("a2a_bytes", {L, ranks}, std::vector<double>(old.a2a_bytes.begin(), old.a2a_bytes.end()));
    res->set_row("tokens_received", {L, ranks},
                 std::vector<double>(old.tokens_received.begin(), old.tokens_received.end()));
    double cv = 0.0, max_over_mean = 0.0;
    int dead = 0;
    for (int l = 0; l < L; ++l) {
      double mean = 0.0, var = 0.0, mx = 0.0;
      for (int e = 0; e < E; ++e) mean += load[static_cast<size_t>(l) * E + e];
      mean /= E;
      for (int e = 0; e < E; ++e) {
        const double x = load[static_cast<size_t>(l) * E + e];
        var += (x - mean) * (x - mean);
        mx = std::max(mx, x);
        dead += x == 0.0;
      }
      cv += std::sqrt(var / E) / mean;
      max_over_mean = std::max(max_over_mean, mx / mean);
    }
    res->set("load_cv", cv / L);
    res->set("load_max_over_mean", max_over_mean);
    res->set("dead_experts", dead);
  }
  res->set("time_rollout", time_rollout);
  res->set("time_old_logprobs", time_old);
  res->set("time_train", time_train);
  if ((rl.eval_every > 0 && (step + 1) % rl.eval_every == 0) || step + 1 == rl.steps) {
    const auto te = Clock::now();
    res->set("eval_accuracy", evaluate());
    res->set("time_eval", seconds_since(te));
  }
  precursors_record(res, rl.precursors);
  res->set("time_step", seconds_since(t_step));
}

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
