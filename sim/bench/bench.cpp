// bench.cpp — see bench.h. bench_run reads as its phases: check the options against the batch,
// describe the machine and the model, build the session (model, optimizer, prompts, the
// workloads and the steps to time), warm every step up once (its memory measured there), time the
// rounds (ceilings, then every step), keep each step's best, then the targets.
#include "sim/bench/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#if MOERL_HAVE_CUDA
#include "kernels/cuda/gemm.h"
#endif
#include "kernels/linear.h"
#include "kernels/rng.h"
#include "kernels/simd.h"
#include "models/model.h"
#include "models/sites.h"
#include "sim/process/backend_select.h"
#include "sim/process/preempt.h"
#include "sim/bench/bench_backend.h"
#include "sim/bench/flops.h"
#include "sim/cli/cli.h"
#include "sim/step/optimizer.h"
#include "sim/rl/rollout.h"
#include "sim/rl/routing_record.h"

namespace moerl {

namespace {

using Clock = std::chrono::steady_clock;

// "model name" of /proc/cpuinfo (Linux), else "unknown CPU".
std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

// The resident set now (VmRSS of /proc/self/status), MiB; 0 where there is no such file.
double rss_now_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  return 0.0;
}

void read_loadavg(double* out) {
  std::ifstream f("/proc/loadavg");
  for (int i = 0; i < 3; ++i)
    if (!(f >> out[i])) out[i] = -1.0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double best(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

size_t argmin(const std::vector<double>& v) {
  return static_cast<size_t>(std::min_element(v.begin(), v.end()) - v.begin());
}

// Every rank reaches this point before any leaves it (the groups' collectives; no-op on one rank).
void barrier(const ModelParallel& par) {
  if (par.ep_size() > 1) {
    int64_t one = 1;
    par.ep->allreduce_sum(&one, 1);
  }
}

double sum_over_ranks(const ModelParallel& par, double v) {
  if (par.ep_size() > 1) par.ep->allreduce_sum(&v, 1);
  return v;
}

// A stop signal (sim/process/preempt.h) ends the bench at the next of these points, on every rank
// at once (they agree: one rank signalled is enough): between the ceilings' slices and before
// every step. Nothing is written; cmd_bench exits with kExitPreempted.
void stop_point(const ModelParallel& par, const std::string& where) {
  if (sum_over_ranks(par, preempt_requested() ? 1.0 : 0.0) > 0)
    throw Preempted(std::string("preempted by ") + (preempt_signal_name()[0] ? preempt_signal_name() : "another rank's signal") +
                    " " + where);
}

// The ceilings are measured in slices of at most this long, so that a stop signal is taken within
// a slice whatever --gemm-seconds says (each slice's fastest call counts, as one long measurement's).
constexpr double kGemmSliceSeconds = 0.2;

// gemm_measure_gflops for min_seconds in slices; a stop signal on this rank ends it after the slice
// (the caller's stop_point then stops every rank).
double gemm_measure_sliced(int n, double min_seconds, bool use_blas) {
  double best = 0.0;
  for (double left = min_seconds; left > 0 && !preempt_requested(); left -= kGemmSliceSeconds)
    best = std::max(best, gemm_measure_gflops(n, std::min(left, kGemmSliceSeconds), use_blas));
  return best;
}

// gemm_shapes_measure for min_seconds per shape, in passes of kGemmSliceSeconds over all the shapes.
void gemm_shapes_measure_sliced(std::vector<GemmShape>* shapes, double min_seconds) {
  if (shapes->empty()) return;
  const double slice = std::min(min_seconds, kGemmSliceSeconds / static_cast<double>(shapes->size()));
  for (double left = min_seconds; left > 0 && !preempt_requested(); left -= slice)
    gemm_shapes_measure(shapes, std::min(left, slice));
}

// b − a, element by element.
std::vector<double> minus(const std::vector<double>& b, const std::vector<double>& a) {
  std::vector<double> d(b.size());
  for (size_t i = 0; i < b.size(); ++i) d[i] = b[i] - a[i];
  return d;
}

// The GPU's GEMM rate in GFLOP/s, timed with CUDA events (0 without the CUDA backend, which
// backend_select then refused).
double gpu_gemm_gflops(int n, Format f, double seconds) {
#if MOERL_HAVE_CUDA
  return 1000.0 * cuda::gemm_measure_tflops(n, f, seconds);
#else
  (void)n; (void)f; (void)seconds;
  return 0.0;
#endif
}

// The GPU's FP32 FMA peak in GFLOP/s (kernels/cuda/peak.h), 0 without the CUDA backend.
double gpu_fp32_peak_gflops() {
#if MOERL_HAVE_CUDA
  return 1000.0 * cuda::device_fp32_peak_tflops();
#else
  return 0.0;
#endif
}

// One workload's batch: the lengths it must have (the schedule; short: all R), the rollout
// (every round's is the same batch) and the loss gradient over its responses' own tokens.
struct BenchRun {
  BenchWorkload w;
  std::vector<int32_t> expect;   // [B] response lengths, EOS included
  bool force = false;            // BenchBackend makes EOS the token at expect[s] − 1
  RolloutBatch rb;
  std::vector<float> dlogp;      // [Bl, T − 1], after the first rollout
  std::vector<int32_t> lengths;  // [Bl] P + ℓ_s of this rank's sequences (the packed train forward)
};

// One timed RL step configuration: a workload under a rollout and a train profile, and what
// every round measured of it.
struct StepItem {
  int run = 0;  // index of its workload
  std::string rollout, train;
  NumericsProfile rp, tp;
  std::vector<double> total, rollout_s, train_s, opt_s, att_rollout_s, att_train_s, prefill_s;
  std::vector<double> decode_step_s, decode_attention_s;  // best so far, step by step
  std::vector<std::vector<double>> ops_rollout, ops_train;  // [round][kOpCount]
  std::vector<int64_t> transfer_bytes;                      // the warm-up step's (BenchStep)
};

// The train phase's seconds: forward + backward (and the attention and per-op seconds inside it),
// and AdamW, each summed over the mini-batches.
struct TrainTimes {
  double fwd_bwd_s = 0, opt_s = 0, attention_s = 0;
  std::vector<double> ops = std::vector<double>(kOpCount, 0.0);
};

// Marks of the watch (time, attention seconds, per-op seconds) at a phase boundary.
struct Mark {
  Clock::time_point t;
  double attention = 0;
  std::vector<double> ops;
};

// §1 The options against the batch and the ranks: every message names the option and the value.
void bench_validate(const Scenario& s, const BenchShape& sh, const BenchOptions& o, const ModelParallel& par) {
  if (o.rounds < 1) throw std::invalid_argument("bench: rounds must be >= 1");
  if (o.phase != "step" && o.phase != "rollout" && o.phase != "train")
    throw std::invalid_argument("bench: phase '" + o.phase + "': must be step, rollout or train");
  bool want_long = false;
  for (size_t i = 0; i < o.workloads.size(); ++i) {
    const std::string& w = o.workloads[i];
    if (!bench_workload_known(w) || std::find(o.workloads.begin(), o.workloads.begin() + i, w) != o.workloads.begin() + i)
      throw std::invalid_argument("bench: workloads '" + cli_join(o.workloads, ",") + "': each of " +
                                  kBenchWorkloads + " at most once");
    want_long = want_long || w != "short";  // long-fixed needs the long options too
  }
  if (o.workloads.empty()) throw std::invalid_argument(std::string("bench: workloads: none given (") + kBenchWorkloads + ")");
  if (want_long) {
    if (o.long_mean < 1 || 2 * o.long_mean - 1 > o.long_max)
      throw std::invalid_argument("bench: long-answer mean " + std::to_string(o.long_mean) + ", limit " +
                                  std::to_string(o.long_max) + ": needs 1 <= mean and 2 * mean - 1 <= limit");
    if (s.model.vocab_size < 2) throw std::invalid_argument("bench: the long-answer workload needs model.vocab_size >= 2");
  }
  const int ranks = par.dp_size();
  if (sh.B < ranks)
    throw std::invalid_argument("bench: " + std::to_string(sh.B) + " sequences (" + sh.from + "): fewer than the " +
                                std::to_string(ranks) + " ranks");
  if (sh.B / ranks < sh.minibatches)
    throw std::invalid_argument("bench: " + std::to_string(sh.minibatches) + " mini-batches (" + sh.from +
                                "): more than the " + std::to_string(sh.B / ranks) + " sequences of a rank");
  par.validate(s.model);
}

std::string model_line(const ModelConfig& cfg) {
  std::ostringstream m;
  m << "vocab " << cfg.vocab_size << ", d_model " << cfg.d_model << ", " << cfg.n_layers << " layers, "
    << cfg.n_heads << " heads, "
    << (cfg.is_moe() ? std::to_string(cfg.n_experts) + " experts top-" + std::to_string(cfg.top_k)
                     : std::string("dense"))
    << ", d_ff " << cfg.d_ff;
  return m.str();
}

// §2 What the report says before anything is timed: the batch, the machine, the model's
// analytic work. rollout_generate runs a decode step for every generated token of an MoE model
// (the last one records the final position's routing), R − 1 when dense.
BenchReport bench_report_begin(const Scenario& s, const BenchShape& sh, const std::string& workload,
                               const BenchOptions& o, int ranks) {
  const ModelConfig& cfg = s.model;
  BenchReport rep;
  rep.workload = workload;
  rep.model = model_line(cfg);
  rep.B = sh.B; rep.T = sh.T; rep.P = sh.P; rep.R = sh.R;
  rep.minibatches = sh.minibatches;
  rep.shape_derived = sh.derived;
  rep.shape_from = sh.from;
  rep.threads = static_cast<int>(std::min<size_t>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
      static_cast<size_t>(tbb::this_task_arena::max_concurrency())));
  rep.ranks = ranks;
  rep.blas = blas_kernel_name();
  rep.simd = simd_target();
  rep.cpu = cpu_model_name();
  read_loadavg(rep.load_begin);
  rep.rss_start_mib = rss_now_mib();
  rep.peer_rollout_s = o.peer_rollout_s;
  rep.peer_train_s = o.peer_train_s;
  rep.peer_name = o.peer_name;
  const int decode_steps = cfg.is_moe() ? sh.R : sh.R - 1;
  double fr = flops_prefill(cfg, sh.P);
  for (int r = 0; r < decode_steps; ++r) fr += flops_decode_step(cfg, sh.P + r);
  rep.flops_rollout = sh.B * fr;
  rep.flops_train = sh.B * flops_train_sequence(cfg, sh.T);
  return rep;
}

// §3–6 The model and its optimizer on the watched backend, the prompts, the workloads' batches
// and the steps to time; then the warm-up, the rounds and the best of them.
class BenchSession {
 public:
  BenchSession(const Scenario& s, const BenchShape& sh, const BenchOptions& o, const ModelParallel& par,
               const Backend& backend);
  void warm_up(BenchReport* rep);  // every step once; the R3 record, the memory of a step
  void time_round(int round);      // the ceilings, then every step
  void finish(BenchReport* rep) const;

 private:
  void plan_workloads();
  void plan_items();
  void add_item(int run, const std::string& r, const std::string& t);
  int run_of(const std::string& name) const;
  void run_step(StepItem& it, bool record);
  void rollout_phase(StepItem& it, BenchRun& run);
  void record_rollout(StepItem& it, const Mark& m0, const Mark& m1);
  TrainTimes train_phase(StepItem& it, BenchRun& run);
  void check_rollout(BenchRun& run);
  void record_routing(BenchReport* rep) const;
  void record_memory(BenchReport* rep);
  void measure_ceilings();
  Mark mark() const { return Mark{Clock::now(), watch_.attention_seconds(), watch_.op_seconds()}; }

  const Scenario& s_;
  const ModelConfig& cfg_;
  const BenchShape sh_;
  const BenchOptions& o_;
  const ModelParallel& par_;
  const bool on_gpu_;
  BenchBackend watch_;
  Model model_;
  OptimConfig oc_;
  AdamW adamw_;
  std::vector<float> params0_, m0_, v0_;
  SeqBlock blk_;
  int Bl_ = 0;
  std::vector<int32_t> prompts_;
  SamplingConfig sampling_;  // temperature 1, top-p 1: plain multinomial sampling, as the peer
  std::vector<BenchRun> runs_;
  std::vector<StepItem> items_;
  std::vector<double> c_blas_, c_own_, c_bf16_;  // c_bf16_: the GPU's only
  std::vector<GemmShape> shapes_rollout_, shapes_train_;
};

bool wants_long(const BenchOptions& o) {
  return std::any_of(o.workloads.begin(), o.workloads.end(), [](const std::string& w) { return w != "short"; });
}

// model.max_seq_len only bounds the lengths a model accepts (the KV cache is sized per
// generation, RoPE computed per position, no parameter depends on it): raised to fit the long
// workload, the model and its parameters are the bench model's.
ModelConfig bench_model_config(const ModelConfig& cfg, const BenchShape& sh, const BenchOptions& o) {
  ModelConfig m = cfg;
  if (wants_long(o)) m.max_seq_len = std::max(cfg.max_seq_len, sh.P + o.long_max);
  return m;
}

ParamStore& initialised_params(Model& model, uint64_t seed) {
  params_init(&model.params(), model.config(), seed);
  return model.params();
}

BenchSession::BenchSession(const Scenario& s, const BenchShape& sh, const BenchOptions& o, const ModelParallel& par,
                           const Backend& backend)
    : s_(s), cfg_(s.model), sh_(sh), o_(o), par_(par), on_gpu_(backend.kind() == BackendKind::cuda),
      watch_(backend), model_(bench_model_config(s.model, sh, o)),
      adamw_(oc_, initialised_params(model_, s.run.seed)) {
  model_.set_backend(watch_);
  if (par.dp_size() > 1) model_.set_parallel(par);
  model_.invalidate_packed_weights();
  adamw_.set_backend(model_.backend());
  adamw_.set_parallel(cfg_.n_experts, model_.expert_range(), par.ep, par.canonical());
  params0_ = model_.params().data();
  m0_ = adamw_.m();
  v0_ = adamw_.v();
  blk_ = dp_block(sh.B, par.dp_size(), par.dp_rank());
  Bl_ = static_cast<int>(blk_.size());
  prompts_.resize(static_cast<size_t>(sh.B) * sh.P);
  Rng rng(rng_derive(s.run.seed, static_cast<uint64_t>(Stream::data), {0xBE7C4}));
  for (int32_t& t : prompts_) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg_.vocab_size)));
  plan_workloads();
  plan_items();
  const int mb_rows = std::max(1, Bl_ / sh.minibatches);
  shapes_rollout_ = gemm_shapes_rollout(cfg_, Bl_, sh.P, cfg_.is_moe() ? sh.R : sh.R - 1);
  shapes_train_ = gemm_shapes_train(cfg_, mb_rows * sh.T, sh.minibatches);
}

void BenchSession::plan_workloads() {
  for (const std::string& name : o_.workloads) {
    BenchRun run;
    run.w.name = name;
    run.w.B = sh_.B;
    run.w.P = sh_.P;
    if (name == "short") {
      run.w.R_max = sh_.R;
      run.expect.assign(sh_.B, sh_.R);
    } else if (name == "long-fixed") {
      run.w.R_max = o_.long_mean;
      run.expect.assign(sh_.B, o_.long_mean);
    } else {
      run.w.R_max = o_.long_max;
      run.w.eos = cfg_.vocab_size - 1;
      run.w.mean_len = o_.long_mean;
      run.expect = bench_length_schedule(s_.run.seed, sh_.B, o_.long_mean);
      run.force = true;
    }
    runs_.push_back(std::move(run));
  }
}

int BenchSession::run_of(const std::string& name) const {
  for (size_t i = 0; i < runs_.size(); ++i)
    if (runs_[i].w.name == name) return static_cast<int>(i);
  return -1;
}

void BenchSession::add_item(int run, const std::string& r, const std::string& t) {
  for (const StepItem& it : items_)
    if (it.run == run && it.rollout == r && it.train == t) return;
  StepItem it;
  it.run = run;
  it.rollout = r; it.train = t;
  it.rp = s_.profile(r);
  it.tp = s_.profile(t);
  items_.push_back(std::move(it));
}

// The short workload under every profile (and the recipe); the long ones under long_profiles.
void BenchSession::plan_items() {
  if (const int sr = run_of("short"); sr >= 0) {
    for (const std::string& p : o_.profiles) add_item(sr, p, p);
    if (o_.recipe) add_item(sr, s_.engines.rollout, s_.engines.train);
  }
  for (const char* name : {"long", "long-fixed"})
    if (run_of(name) >= 0)
      for (const std::string& p : o_.long_profiles) add_item(run_of(name), p, p);
}

// After a rollout: the batch must have the lengths of its schedule; the first one fills the
// workload's numbers and the loss gradient (over each mini-batch's share of the tokens).
void BenchSession::check_rollout(BenchRun& run) {
  const RolloutBatch& rb = run.rb;
  int64_t trunc = 0;
  for (int i = 0; i < Bl_; ++i) {
    if (rb.len[i] != run.expect[static_cast<size_t>(blk_.begin) + i])
      throw std::logic_error("bench: " + run.w.name + " workload: sequence " + std::to_string(blk_.begin + i) +
                             " has " + std::to_string(rb.len[i]) + " response tokens, its schedule " +
                             std::to_string(run.expect[static_cast<size_t>(blk_.begin) + i]));
    trunc += rb.truncated[i];
  }
  if (!run.dlogp.empty()) {
    if (rb.R != run.w.R) throw std::logic_error("bench: " + run.w.name + " workload: the rollouts differ in length");
    return;
  }
  bench_workload_measure(&run.w, cfg_, run.expect.data(), rb.R);
  run.w.truncated = static_cast<int>(sum_over_ranks(par_, static_cast<double>(trunc)));
  int64_t response_tokens = 0;
  for (int32_t l : run.expect) response_tokens += l;
  run.dlogp = bench_loss_dlogp(rb.len.data(), Bl_, sh_.P, rb.T, std::max<int64_t>(1, response_tokens / sh_.minibatches));
  run.lengths.resize(static_cast<size_t>(Bl_));
  for (int i = 0; i < Bl_; ++i) run.lengths[static_cast<size_t>(i)] = sh_.P + rb.len[i];
}

void BenchSession::rollout_phase(StepItem& it, BenchRun& run) {
  TransferPhaseScope ph(model_.backend(), TransferPhase::rollout);
  watch_.rollout_begin(sh_.P, run.w.eos, run.force ? run.expect.data() + blk_.begin : nullptr, Bl_);
  rollout_generate(&run.rb, model_, it.rp, prompts_.data() + blk_.begin * sh_.P, Bl_, sh_.P, run.w.R_max, sampling_,
                   s_.run.seed, 0, static_cast<uint64_t>(blk_.begin), 1, run.w.eos, /*logp_all_to_host=*/false);
  watch_.rollout_end();
}

void BenchSession::record_rollout(StepItem& it, const Mark& m0, const Mark& m1) {
  it.att_rollout_s.push_back(m1.attention - m0.attention);
  it.prefill_s.push_back(watch_.prefill_seconds());
  const std::vector<double>& st = watch_.step_seconds();
  const std::vector<double>& sa = watch_.step_attention_seconds();
  if (it.decode_step_s.empty()) {
    it.decode_step_s = st;
    it.decode_attention_s = sa;
    return;
  }
  for (size_t k = 0; k < st.size() && k < it.decode_step_s.size(); ++k) {
    it.decode_step_s[k] = std::min(it.decode_step_s[k], st[k]);
    it.decode_attention_s[k] = std::min(it.decode_attention_s[k], sa[k]);
  }
}

// Forward + backward, then AdamW, once per mini-batch: mini-batch m holds B / minibatches of the
// batch's sequences (dp_block), each rank its block of them, taken from its own rollout's rows in
// order (the trainer draws them in a seeded order, which costs the same); packed — each sequence
// over its own positions.
TrainTimes BenchSession::train_phase(StepItem& it, BenchRun& run) {
  const int m_count = sh_.minibatches, T = run.rb.T;
  TrainTimes tt;
  int next_row = 0;
  for (int m = 0; m < m_count; ++m) {
    const int Bm = static_cast<int>(dp_block(sh_.B, m_count, m).size());  // the mini-batch, all ranks
    const int rows = static_cast<int>(dp_block(Bm, par_.dp_size(), par_.dp_rank()).size());
    const int row0 = std::min(next_row, Bl_ - rows);
    next_row += rows;
    const Mark m0 = mark();
    model_.zero_grads();
    ForwardResult res;
    ForwardRequest req;
    req.tokens = run.rb.tokens.data() + static_cast<size_t>(row0) * T;
    req.B = rows;
    req.T = T;
    req.B_total = Bm;
    req.lengths = run.lengths.data() + row0;
    req.profile = &it.tp;
    req.save_for_backward = true;
    {
      TransferPhaseScope ph(model_.backend(), TransferPhase::train);
      model_.forward(&res, req);
      model_.backward(run.dlogp.data() + static_cast<size_t>(row0) * (T - 1));
    }
    barrier(par_);
    const Mark m1 = mark();
    {
      TransferPhaseScope ph(model_.backend(), TransferPhase::optimizer);
      adamw_step(adamw_, model_, oc_.lr, m);  // where the parameters live
    }
    model_.invalidate_packed_weights();
    barrier(par_);
    tt.fwd_bwd_s += seconds_between(m0.t, m1.t);
    tt.opt_s += seconds_between(m1.t, Clock::now());
    tt.attention_s += m1.attention - m0.attention;
    for (int k = 0; k < kOpCount; ++k) tt.ops[k] += m1.ops[k] - m0.ops[k];
  }
  return tt;
}

// One RL step of an item from the same parameters and moments; with record, its times go to the
// item's rounds (under --phase rollout the train phase is not run; under train, not the rollout,
// which the warm-up ran).
void BenchSession::run_step(StepItem& it, bool record) {
  BenchRun& run = runs_[static_cast<size_t>(it.run)];
  model_.params().data() = params0_;
  model_.weights();  // on a device: the restored parameters uploaded now, outside the timed step
  adamw_.set_m(m0_);
  adamw_.set_v(v0_);
  model_.invalidate_packed_weights();
  barrier(par_);
  const Mark m0 = mark();
  const bool rollout = !record || o_.phase != "train";
  if (rollout) rollout_phase(it, run);
  barrier(par_);
  const Mark m1 = mark();
  if (rollout) check_rollout(run);
  if (record) it.ops_rollout.push_back(minus(m1.ops, m0.ops));
  if (record && rollout) record_rollout(it, m0, m1);
  const bool train = !record || o_.phase != "rollout";
  const TrainTimes tt = train ? train_phase(it, run) : TrainTimes{};
  const Mark m2 = mark();
  if (!record) return;
  it.total.push_back(seconds_between(m0.t, m2.t));
  it.rollout_s.push_back(seconds_between(m0.t, m1.t));
  it.train_s.push_back(tt.fwd_bwd_s);
  it.opt_s.push_back(tt.opt_s);
  it.att_train_s.push_back(tt.attention_s);
  it.ops_train.push_back(tt.ops);
}

// The R3 record of this rank's short rollout: packed, unpacked (it must round-trip), its size.
void BenchSession::record_routing(BenchReport* rep) const {
  const int sr = run_of("short");
  if (sr < 0 || !cfg_.is_moe()) return;
  const RolloutBatch& rb = runs_[static_cast<size_t>(sr)].rb;
  const RoutingRecordShape local{cfg_.n_layers, Bl_ * sh_.T, cfg_.top_k, cfg_.n_experts};
  const std::vector<uint8_t> packed = routing_record_pack(rb.topk_ids.data(), local);
  std::vector<int32_t> back;
  RoutingRecordShape got;
  routing_record_unpack(&back, &got, packed.data(), static_cast<int64_t>(packed.size()));
  if (back != rb.topk_ids) throw std::logic_error("bench: routing record does not round-trip");
  const RoutingRecordShape whole{cfg_.n_layers, sh_.B * sh_.T, cfg_.top_k, cfg_.n_experts};
  rep->routing_bits = routing_record_bits(cfg_.n_experts, cfg_.top_k);
  rep->routing_bytes = routing_record_bytes(whole);
  rep->routing_bytes_int32 = static_cast<int64_t>(cfg_.n_layers) * sh_.B * sh_.T * cfg_.top_k * 4;
}

// What a run holds (this rank): parameters, gradients, AdamW's moments, the rollout's KV cache
// (K and V per layer, [rows, P + R_max, D] fp32, the largest workload), and the peak resident set
// after every step ran once — before the ceilings' matrices.
void BenchSession::record_memory(BenchReport* rep) {
  rep->params_bytes = 4 * model_.params().size();
  rep->grads_bytes = 4 * model_.grads().size();
  rep->optimizer_bytes = 4 * static_cast<int64_t>(m0_.size() + v0_.size());
  for (const BenchRun& run : runs_)
    rep->kv_bytes = std::max<int64_t>(rep->kv_bytes, int64_t{2} * 4 * cfg_.n_layers * Bl_ *
                                                         (sh_.P + run.w.R_max) * cfg_.d_model);
  rep->peak_rss_step_mib = peak_rss_mib();
}

void BenchSession::warm_up(BenchReport* rep) {
  for (StepItem& it : items_) {  // page faults, thread pools; what one step moves host↔device
    stop_point(par_, "in the warm-up step");
    TransferLog* log = model_.backend().transfers();
    if (log) log->reset();
    run_step(it, false);
    if (!log) continue;
    for (int p = 0; p < kTransferPhases; ++p)
      for (int k = 0; k < kCrossKinds; ++k)
        it.transfer_bytes.push_back(log->bytes(static_cast<TransferPhase>(p), static_cast<CrossKind>(k)));
  }
  record_memory(rep);
  record_routing(rep);
  for (const BenchRun& run : runs_) rep->workloads.push_back(run.w);
}

// Every rank measures at once: the sum is what the whole machine does. The model-size ceilings
// are the CPU kernel's (none on a GPU).
void BenchSession::measure_ceilings() {
  barrier(par_);
  if (on_gpu_) {  // SGEMM is the FP32 ceiling; the BF16 tensor-core rate is reported beside it only
    const auto sliced = [&](Format f) {
      double best = 0.0;
      for (double left = o_.gemm_seconds; left > 0 && !preempt_requested(); left -= kGemmSliceSeconds)
        best = std::max(best, gpu_gemm_gflops(o_.gpu_gemm_n, f, std::min(left, kGemmSliceSeconds)));
      stop_point(par_, "while measuring the GEMM ceiling");
      return best;
    };
    c_blas_.push_back(sum_over_ranks(par_, sliced(Format::fp32)));
    c_bf16_.push_back(sum_over_ranks(par_, sliced(Format::bf16)));
    c_own_.push_back(0.0);
    return;
  }
  const double blas = gemm_measure_sliced(o_.gemm_n, o_.gemm_seconds, true);
  stop_point(par_, "while measuring the GEMM ceiling");
  c_blas_.push_back(sum_over_ranks(par_, blas));
  const double own = gemm_measure_sliced(o_.gemm_n, o_.gemm_seconds, false);
  stop_point(par_, "while measuring the GEMM ceiling");
  c_own_.push_back(sum_over_ranks(par_, own));
  if (run_of("short") < 0) return;
  gemm_shapes_measure_sliced(&shapes_rollout_, o_.gemm_seconds / 10);
  gemm_shapes_measure_sliced(&shapes_train_, o_.gemm_seconds / 10);
  stop_point(par_, "while measuring the model's GEMM shapes");
}

void BenchSession::time_round(int round) {
  if (o_.progress && par_.ep_rank() == 0) std::fprintf(stderr, "bench: round %d/%d\n", round + 1, o_.rounds);
  measure_ceilings();
  for (StepItem& it : items_) {
    stop_point(par_, "in round " + std::to_string(round + 1) + " of " + std::to_string(o_.rounds));
    run_step(it, true);
  }
}

// Each number the best (minimum) of the rounds; the per-op split of the round whose phase was best.
void BenchSession::finish(BenchReport* rep) const {
  rep->ceiling_blas = *std::max_element(c_blas_.begin(), c_blas_.end());
  rep->ceiling_own = *std::max_element(c_own_.begin(), c_own_.end());
  rep->ceiling = std::max(rep->ceiling_blas, rep->ceiling_own);
  if (on_gpu_) {
    rep->gpu_n = o_.gpu_gemm_n;
    rep->ceiling_bf16 = *std::max_element(c_bf16_.begin(), c_bf16_.end());
    rep->fp32_peak = sum_over_ranks(par_, gpu_fp32_peak_gflops());
  }
  rep->shapes_rollout = shapes_rollout_;
  rep->shapes_train = shapes_train_;
  for (std::vector<GemmShape>* v : {&rep->shapes_rollout, &rep->shapes_train})
    for (GemmShape& g : *v) g.gflops = sum_over_ranks(par_, g.gflops);
  rep->ceiling_model_rollout = gemm_shapes_ceiling(rep->shapes_rollout);
  rep->ceiling_model_train = gemm_shapes_ceiling(rep->shapes_train);
  for (const StepItem& it : items_) {
    BenchStep st;
    const BenchWorkload& w = runs_[static_cast<size_t>(it.run)].w;
    st.workload = w.name;
    st.rollout_profile = it.rollout;
    st.train_profile = it.train;
    st.compacted = w.eos >= 0 && profile_rows_independent(it.rp);
    st.total_s = best(it.total);
    st.rollout_s = best(it.rollout_s);
    st.train_s = best(it.train_s);
    st.optimizer_s = best(it.opt_s);
    st.total_median_s = median(it.total);
    st.attention_rollout_s = best(it.att_rollout_s);
    st.attention_train_s = best(it.att_train_s);
    st.decode_step_s = it.decode_step_s;
    st.decode_attention_s = it.decode_attention_s;
    st.prefill_s = best(it.prefill_s);
    st.ops_rollout_s = it.ops_rollout[argmin(it.rollout_s)];
    st.ops_train_s = it.ops_train[argmin(it.train_s)];
    st.transfer_bytes = it.transfer_bytes;
    rep->steps.push_back(st);
  }
}

void target(BenchReport* rep, const std::string& name, double value, double limit, bool at_least,
            const std::string& unit) {
  rep->targets.push_back(BenchTarget{name, value, limit, at_least, at_least ? value >= limit : value <= limit, unit});
}

// §7 The targets of docs/performance.md, from the fp32-ref step of the short workload.
void bench_targets(BenchReport* rep, const BenchOptions& o) {
  const BenchStep* base = rep->step("fp32-ref", "fp32-ref");
  if (!base || o.phase != "step") return;
  if (rep->peer_rollout_s > 0 && rep->peer_train_s > 0)
    target(rep, "RL step fp32: peer time / moerl time", (rep->peer_rollout_s + rep->peer_train_s) / base->total_s,
           5.0, true, "x");
  target(rep, "train fwd+bwd fp32: share of the GEMM ceiling",
         100.0 * rep->flops_train / base->train_s * 1e-9 / rep->ceiling, 50.0, true, "%");
  target(rep, "rollout fp32: time / FLOP floor", base->rollout_s / (rep->flops_rollout / (rep->ceiling * 1e9)),
         3.0, false, "x");
  // A profile's cost: its whole RL step against fp32-ref's, and each phase alone (stricter).
  for (const BenchStep& st : rep->steps) {
    if (&st == base || st.workload != "short" || st.rollout_profile != st.train_profile) continue;
    target(rep, "RL step " + st.rollout_profile + " / fp32-ref", st.total_s / base->total_s, 1.5, false, "x");
    target(rep, "rollout " + st.rollout_profile + " / rollout fp32-ref", st.rollout_s / base->rollout_s, 1.5, false, "x");
    target(rep, "train fwd+bwd " + st.train_profile + " / fp32-ref", st.train_s / base->train_s, 1.5, false, "x");
  }
  // A long answer's token against a short one's: seconds per real token of the whole step.
  if (const BenchStep* lg = rep->step("fp32-ref", "fp32-ref", "long"))
    target(rep, "long-answer token cost: s per real token, long / short (fp32)",
           (lg->total_s / rep->find_workload("long")->tokens_real) /
               (base->total_s / rep->find_workload("short")->tokens_real),
           1.5, false, "x");
}

}  // namespace

const BenchStep* BenchReport::step(const std::string& rollout, const std::string& train,
                                   const std::string& workload) const {
  for (const BenchStep& s : steps)
    if (s.workload == workload && s.rollout_profile == rollout && s.train_profile == train) return &s;
  return nullptr;
}

const BenchWorkload* BenchReport::find_workload(const std::string& name) const {
  for (const BenchWorkload& w : workloads)
    if (w.name == name) return &w;
  return nullptr;
}

BenchReport bench_run(const Scenario& s, const std::string& workload, const BenchOptions& o,
                      const ModelParallel& par) {
  const BenchShape sh = o.derive_shape ? bench_shape_derive(s) : bench_shape_from_section(s);
  bench_validate(s, sh, o, par);                                              // §1
  BenchReport rep = bench_report_begin(s, sh, workload, o, par.dp_size());    // §2
  // run.backend: on cuda the whole step runs on this rank's GPU, and the ceiling is the GPU's
  // cuBLAS GEMM (FP32 pedantic as "blas", BF16 tensor cores as "own") instead of the CPU's.
  const Backend& backend = backend_select(s.run.backend, o.local_rank);
  if (backend.kind() == BackendKind::cuda) rep.blas = backend.describe();
  BenchSession session(s, sh, o, par, backend);                               // §3
  session.warm_up(&rep);                                                      // §4
  for (int round = 0; round < o.rounds; ++round) session.time_round(round);  // §5
  session.finish(&rep);                                                       // §6
  rep.peak_rss_mib = peak_rss_mib();
  read_loadavg(rep.load_end);
  bench_targets(&rep, o);                                                     // §7
  return rep;
}

}  // namespace moerl
