// bench.cpp — see bench.h.
#include "sim/bench/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
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
#include "sim/backend_select.h"
#include "sim/cli/cli.h"
#include "sim/bench/bench_backend.h"
#include "sim/bench/flops.h"
#include "sim/optimizer.h"
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

struct StepItem {
  int run = 0;  // index of its workload
  std::string rollout, train;
  NumericsProfile rp, tp;
  std::vector<double> total, rollout_s, train_s, opt_s, att_rollout_s, att_train_s, prefill_s;
  std::vector<double> decode_step_s, decode_attention_s;  // best so far, step by step
  std::vector<std::vector<double>> ops_rollout, ops_train;  // [round][kOpCount]
};

// b − a, element by element.
std::vector<double> minus(const std::vector<double>& b, const std::vector<double>& a) {
  std::vector<double> d(b.size());
  for (size_t i = 0; i < b.size(); ++i) d[i] = b[i] - a[i];
  return d;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
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

namespace {
// The GPU's GEMM rate in GFLOP/s (0 without the CUDA backend, which backend_select then refused).
double gpu_gemm_gflops(int n, Format f, double seconds) {
#if MOERL_HAVE_CUDA
  return 1000.0 * cuda::gemm_measure_tflops(n, f, seconds);
#else
  (void)n; (void)f; (void)seconds;
  return 0.0;
#endif
}
}  // namespace

BenchReport bench_run(const Scenario& s, const std::string& workload, const BenchOptions& o,
                      const ModelParallel& par) {
  const ModelConfig& cfg = s.model;
  const BenchConfig& bc = s.bench;
  const int B = bc.sequences, T = bc.seq_len, P = bc.prompt_len, R = bc.decode_steps;
  if (T > cfg.max_seq_len || P + R > cfg.max_seq_len)
    throw std::invalid_argument(
        "bench.seq_len = " + std::to_string(T) + ", bench.prompt_len + bench.decode_steps = " +
        std::to_string(P + R) + ": both must be <= model.max_seq_len = " + std::to_string(cfg.max_seq_len));
  if (P + R != T)
    throw std::invalid_argument("bench.prompt_len + bench.decode_steps = " + std::to_string(P + R) +
                                " must equal bench.seq_len = " + std::to_string(T) +
                                " (the train step runs over the rollout's sequences)");
  if (o.rounds < 1) throw std::invalid_argument("bench: rounds must be >= 1");
  if (o.phase != "step" && o.phase != "rollout" && o.phase != "train")
    throw std::invalid_argument("bench: phase '" + o.phase + "': must be step, rollout or train");
  bool want_short = false, want_long = false;
  for (size_t i = 0; i < o.workloads.size(); ++i) {
    const std::string& w = o.workloads[i];
    if (!bench_workload_known(w) || std::find(o.workloads.begin(), o.workloads.begin() + i, w) != o.workloads.begin() + i)
      throw std::invalid_argument("bench: workloads '" + cli_join(o.workloads, ",") + "': each of " +
                                  kBenchWorkloads + " at most once");
    (w == "short" ? want_short : want_long) = true;  // long-fixed needs the long options too
  }
  if (o.workloads.empty()) throw std::invalid_argument(std::string("bench: workloads: none given (") + kBenchWorkloads + ")");
  if (want_long) {
    if (o.long_mean < 1 || 2 * o.long_mean - 1 > o.long_max)
      throw std::invalid_argument("bench: long-answer mean " + std::to_string(o.long_mean) + ", limit " +
                                  std::to_string(o.long_max) + ": needs 1 <= mean and 2 * mean - 1 <= limit");
    if (cfg.vocab_size < 2) throw std::invalid_argument("bench: the long-answer workload needs model.vocab_size >= 2");
  }
  const int ranks = par.dp_size();
  if (B < ranks)
    throw std::invalid_argument("bench.sequences = " + std::to_string(B) + ": fewer sequences than the " +
                                std::to_string(ranks) + " ranks");
  par.validate(cfg);

  BenchReport rep;
  rep.workload = workload;
  {
    std::ostringstream m;
    m << "vocab " << cfg.vocab_size << ", d_model " << cfg.d_model << ", " << cfg.n_layers << " layers, "
      << cfg.n_heads << " heads, "
      << (cfg.is_moe() ? std::to_string(cfg.n_experts) + " experts top-" + std::to_string(cfg.top_k)
                       : std::string("dense"))
      << ", d_ff " << cfg.d_ff;
    rep.model = m.str();
  }
  rep.B = B; rep.T = T; rep.P = P; rep.R = R;
  rep.threads = static_cast<int>(std::min<size_t>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism),
      static_cast<size_t>(tbb::this_task_arena::max_concurrency())));
  rep.ranks = ranks;
  rep.blas = blas_kernel_name();
  rep.simd = simd_target();
  rep.cpu = cpu_model_name();
  read_loadavg(rep.load_begin);
  rep.peer_rollout_s = o.peer_rollout_s;
  rep.peer_train_s = o.peer_train_s;
  rep.peer_name = o.peer_name;

  // The analytic work of the whole batch: rollout_generate runs a decode step for every generated
  // token of an MoE model (the last one records the final position's routing), R − 1 when dense.
  const int decode_steps = cfg.is_moe() ? R : R - 1;
  double fr = flops_prefill(cfg, P);
  for (int r = 0; r < decode_steps; ++r) fr += flops_decode_step(cfg, P + r);
  rep.flops_rollout = B * fr;
  rep.flops_train = B * flops_train_sequence(cfg, T);

  // run.backend: on cuda the whole step runs on this rank's GPU, and the ceiling is the GPU's
  // cuBLAS GEMM (FP32 pedantic as "blas", BF16 tensor cores as "own") instead of the CPU's.
  const Backend& backend = backend_select(s.run.backend, o.local_rank);
  const bool on_gpu = backend.kind() == BackendKind::cuda;
  if (on_gpu) rep.blas = backend.describe();
  BenchBackend watch(backend);
  // model.max_seq_len only bounds the lengths a model accepts (the KV cache is sized per
  // generation, RoPE computed per position, no parameter depends on it): raised to fit the long
  // workload, the model and its parameters are the bench model's.
  ModelConfig mcfg = cfg;
  if (want_long) mcfg.max_seq_len = std::max(cfg.max_seq_len, P + o.long_max);
  Model model(mcfg);
  params_init(&model.params(), mcfg, s.run.seed);
  model.set_backend(watch);
  if (ranks > 1) model.set_parallel(par);
  model.invalidate_packed_weights();
  OptimConfig oc;
  AdamW adamw(oc, model.params());
  adamw.set_backend(model.backend());
  adamw.set_parallel(cfg.n_experts, model.expert_range(), par.ep, par.canonical());
  const std::vector<float> params0 = model.params().data(), m0 = adamw.m(), v0 = adamw.v();

  const SeqBlock blk = dp_block(B, ranks, par.dp_rank());
  const int Bl = static_cast<int>(blk.size());
  std::vector<int32_t> prompts(static_cast<size_t>(B) * P);
  Rng rng(rng_derive(s.run.seed, static_cast<uint64_t>(Stream::data), {0xBE7C4}));
  for (int32_t& t : prompts) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  SamplingConfig sampling;  // temperature 1, top-p 1: plain multinomial sampling, as the peer

  // Each workload's batch: the lengths it must have (the schedule; short: all R), the rollout
  // (every round's is the same batch) and the loss gradient over its responses' own tokens.
  struct Run {
    BenchWorkload w;
    std::vector<int32_t> expect;   // [B] response lengths, EOS included
    bool force = false;            // BenchBackend makes EOS the token at expect[s] − 1
    RolloutBatch rb;
    std::vector<float> dlogp;      // [Bl, T − 1], after the first rollout
    std::vector<int32_t> lengths;  // [Bl] P + ℓ_s of this rank's sequences (the packed train forward)
  };
  std::vector<Run> runs;
  for (const std::string& name : o.workloads) {
    Run run;
    run.w.name = name;
    run.w.B = B;
    run.w.P = P;
    if (name == "short") {
      run.w.R_max = R;
      run.expect.assign(B, R);
    } else if (name == "long-fixed") {
      run.w.R_max = o.long_mean;
      run.expect.assign(B, o.long_mean);
    } else {
      run.w.R_max = o.long_max;
      run.w.eos = cfg.vocab_size - 1;
      run.w.mean_len = o.long_mean;
      run.expect = bench_length_schedule(s.run.seed, B, o.long_mean);
      run.force = true;
    }
    runs.push_back(std::move(run));
  }
  auto run_of = [&](const std::string& name) -> int {
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].w.name == name) return static_cast<int>(i);
    return -1;
  };

  std::vector<StepItem> items;
  auto add_item = [&](int run, const std::string& r, const std::string& t) {
    for (const StepItem& it : items)
      if (it.run == run && it.rollout == r && it.train == t) return;
    StepItem it;
    it.run = run;
    it.rollout = r; it.train = t;
    it.rp = s.profile(r);
    it.tp = s.profile(t);
    items.push_back(std::move(it));
  };
  if (want_short) {
    for (const std::string& p : o.profiles) add_item(run_of("short"), p, p);
    if (o.recipe) add_item(run_of("short"), s.engines.rollout, s.engines.train);
  }
  for (const char* name : {"long", "long-fixed"})
    if (run_of(name) >= 0)
      for (const std::string& p : o.long_profiles) add_item(run_of(name), p, p);

  // After a rollout: the batch must have the lengths of its schedule; the first one fills the
  // workload's numbers and the loss gradient.
  auto check_rollout = [&](Run& run) {
    const RolloutBatch& rb = run.rb;
    int64_t trunc = 0;
    for (int i = 0; i < Bl; ++i) {
      if (rb.len[i] != run.expect[static_cast<size_t>(blk.begin) + i])
        throw std::logic_error("bench: " + run.w.name + " workload: sequence " + std::to_string(blk.begin + i) +
                               " has " + std::to_string(rb.len[i]) + " response tokens, its schedule " +
                               std::to_string(run.expect[static_cast<size_t>(blk.begin) + i]));
      trunc += rb.truncated[i];
    }
    if (!run.dlogp.empty()) {
      if (rb.R != run.w.R) throw std::logic_error("bench: " + run.w.name + " workload: the rollouts differ in length");
      return;
    }
    bench_workload_measure(&run.w, cfg, run.expect.data(), rb.R);
    run.w.truncated = static_cast<int>(sum_over_ranks(par, static_cast<double>(trunc)));
    int64_t response_tokens = 0;
    for (int32_t l : run.expect) response_tokens += l;
    run.dlogp = bench_loss_dlogp(rb.len.data(), Bl, P, rb.T, response_tokens);
    run.lengths.resize(static_cast<size_t>(Bl));
    for (int i = 0; i < Bl; ++i) run.lengths[static_cast<size_t>(i)] = P + rb.len[i];
  };

  auto run_step = [&](StepItem& it, bool record) {
    Run& run = runs[static_cast<size_t>(it.run)];
    model.params().data() = params0;
    adamw.m() = m0;
    adamw.v() = v0;
    model.invalidate_packed_weights();
    barrier(par);
    const auto t0 = Clock::now();
    const double a0 = watch.attention_seconds();
    const std::vector<double> o0 = watch.op_seconds();
    const bool rollout = !record || o.phase != "train";
    if (rollout) {
      watch.rollout_begin(P, run.w.eos, run.force ? run.expect.data() + blk.begin : nullptr, Bl);
      rollout_generate(&run.rb, model, it.rp, prompts.data() + blk.begin * P, Bl, P, run.w.R_max, sampling,
                       s.run.seed, 0, static_cast<uint64_t>(blk.begin), 1, run.w.eos);
      watch.rollout_end();
    }
    barrier(par);
    const auto t1 = Clock::now();
    const double a1 = watch.attention_seconds();
    const std::vector<double> o1 = watch.op_seconds();
    if (rollout) check_rollout(run);
    if (record) it.ops_rollout.push_back(minus(o1, o0));
    if (record && rollout) {
      it.att_rollout_s.push_back(a1 - a0);
      it.prefill_s.push_back(watch.prefill_seconds());
      const std::vector<double>& st = watch.step_seconds();
      const std::vector<double>& sa = watch.step_attention_seconds();
      if (it.decode_step_s.empty()) {
        it.decode_step_s = st;
        it.decode_attention_s = sa;
      } else {
        for (size_t k = 0; k < st.size() && k < it.decode_step_s.size(); ++k) {
          it.decode_step_s[k] = std::min(it.decode_step_s[k], st[k]);
          it.decode_attention_s[k] = std::min(it.decode_attention_s[k], sa[k]);
        }
      }
    }
    if (record && o.phase == "rollout") {
      it.total.push_back(seconds_between(t0, t1));
      it.rollout_s.push_back(seconds_between(t0, t1));
      it.train_s.push_back(0.0);
      it.opt_s.push_back(0.0);
      it.att_train_s.push_back(0.0);
      it.ops_train.push_back(std::vector<double>(kOpCount, 0.0));
      return;
    }
    model.grads().zero();
    ForwardResult res;
    ForwardRequest req;
    req.tokens = run.rb.tokens.data();
    req.B = Bl;
    req.T = run.rb.T;
    req.B_total = B;
    req.lengths = run.lengths.data();  // packed: each sequence over its own positions
    req.profile = &it.tp;
    req.save_for_backward = true;
    model.forward(&res, req);
    model.backward(run.dlogp.data());
    barrier(par);
    const auto t2 = Clock::now();
    const double a2 = watch.attention_seconds();
    const std::vector<double> o2 = watch.op_seconds();
    adamw.step(&model.params(), &model.grads(), oc.lr, 0);
    model.invalidate_packed_weights();
    barrier(par);
    const auto t3 = Clock::now();
    if (!record) return;
    it.total.push_back(seconds_between(t0, t3));
    it.rollout_s.push_back(seconds_between(t0, t1));
    it.train_s.push_back(seconds_between(t1, t2));
    it.opt_s.push_back(seconds_between(t2, t3));
    it.att_train_s.push_back(a2 - a1);
    it.ops_train.push_back(minus(o2, o1));
  };

  for (StepItem& it : items) run_step(it, false);  // warm-up: page faults, thread pools
  if (const int sr = run_of("short"); sr >= 0 && cfg.is_moe()) {  // the R3 record of this rank's rollout
    const RolloutBatch& rb = runs[static_cast<size_t>(sr)].rb;
    const RoutingRecordShape local{cfg.n_layers, Bl * T, cfg.top_k, cfg.n_experts};
    const std::vector<uint8_t> packed = routing_record_pack(rb.topk_ids.data(), local);
    std::vector<int32_t> back;
    RoutingRecordShape got;
    routing_record_unpack(&back, &got, packed.data(), static_cast<int64_t>(packed.size()));
    if (back != rb.topk_ids) throw std::logic_error("bench: routing record does not round-trip");
    const RoutingRecordShape whole{cfg.n_layers, B * T, cfg.top_k, cfg.n_experts};
    rep.routing_bits = routing_record_bits(cfg.n_experts, cfg.top_k);
    rep.routing_bytes = routing_record_bytes(whole);
    rep.routing_bytes_int32 = static_cast<int64_t>(cfg.n_layers) * B * T * cfg.top_k * 4;
  }
  for (const Run& run : runs) rep.workloads.push_back(run.w);

  std::vector<double> c_blas, c_own;
  for (int round = 0; round < o.rounds; ++round) {
    if (o.progress && par.ep_rank() == 0)
      std::fprintf(stderr, "bench: round %d/%d\n", round + 1, o.rounds);
    // Every rank measures at once: the sum is what the whole machine does.
    barrier(par);
    c_blas.push_back(sum_over_ranks(par, on_gpu ? gpu_gemm_gflops(o.gemm_n, Format::fp32, o.gemm_seconds)
                                                : gemm_measure_gflops(o.gemm_n, o.gemm_seconds, true)));
    barrier(par);
    c_own.push_back(sum_over_ranks(par, on_gpu ? gpu_gemm_gflops(o.gemm_n, Format::bf16, o.gemm_seconds)
                                               : gemm_measure_gflops(o.gemm_n, o.gemm_seconds, false)));
    for (StepItem& it : items) run_step(it, true);
  }
  rep.ceiling_blas = *std::max_element(c_blas.begin(), c_blas.end());
  rep.ceiling_own = *std::max_element(c_own.begin(), c_own.end());
  rep.ceiling = std::max(rep.ceiling_blas, rep.ceiling_own);
  auto best = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); };
  for (const StepItem& it : items) {
    BenchStep st;
    st.workload = runs[static_cast<size_t>(it.run)].w.name;
    st.rollout_profile = it.rollout;
    st.train_profile = it.train;
    st.compacted = runs[static_cast<size_t>(it.run)].w.eos >= 0 && profile_rows_independent(it.rp);
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
    auto argmin = [](const std::vector<double>& v) {
      return static_cast<size_t>(std::min_element(v.begin(), v.end()) - v.begin());
    };
    st.ops_rollout_s = it.ops_rollout[argmin(it.rollout_s)];
    st.ops_train_s = it.ops_train[argmin(it.train_s)];
    rep.steps.push_back(st);
  }
  rep.peak_rss_mib = peak_rss_mib();
  read_loadavg(rep.load_end);

  // Targets (docs/performance.md).
  auto target = [&](const std::string& name, double value, double limit, bool at_least,
                    const std::string& unit) {
    BenchTarget t{name, value, limit, at_least, at_least ? value >= limit : value <= limit, unit};
    rep.targets.push_back(t);
  };
  const BenchStep* base = rep.step("fp32-ref", "fp32-ref");
  if (base && o.phase == "step") {
    if (rep.peer_rollout_s > 0 && rep.peer_train_s > 0)
      target("RL step fp32: peer time / moerl time", (rep.peer_rollout_s + rep.peer_train_s) / base->total_s,
             5.0, true, "x");
    target("train fwd+bwd fp32: share of the GEMM ceiling",
           100.0 * rep.flops_train / base->train_s * 1e-9 / rep.ceiling, 50.0, true, "%");
    target("rollout fp32: time / FLOP floor", base->rollout_s / (rep.flops_rollout / (rep.ceiling * 1e9)),
           3.0, false, "x");
    // A profile's cost: its whole RL step against fp32-ref's, and each phase alone (stricter).
    for (const BenchStep& st : rep.steps) {
      if (&st == base || st.workload != "short" || st.rollout_profile != st.train_profile) continue;
      target("RL step " + st.rollout_profile + " / fp32-ref", st.total_s / base->total_s, 1.5, false, "x");
      target("rollout " + st.rollout_profile + " / rollout fp32-ref", st.rollout_s / base->rollout_s, 1.5,
             false, "x");
      target("train fwd+bwd " + st.train_profile + " / fp32-ref", st.train_s / base->train_s, 1.5, false, "x");
    }
    // A long answer's token against a short one's: seconds per real token of the whole step.
    if (const BenchStep* lg = rep.step("fp32-ref", "fp32-ref", "long"))
      target("long-answer token cost: s per real token, long / short (fp32)",
             (lg->total_s / rep.find_workload("long")->tokens_real) / (base->total_s / rep.find_workload("short")->tokens_real),
             1.5, false, "x");
  }
  return rep;
}

namespace {

// A step's name in the tables: its profile (rollout + train when they differ), after "long " for
// the long workload.
std::string step_label(const BenchStep& s, bool name_short = false) {
  const std::string p = s.rollout_profile == s.train_profile ? s.rollout_profile
                                                              : s.rollout_profile + " + " + s.train_profile;
  return s.workload == "short" && !name_short ? p : s.workload + " " + p;
}

// The analytic FLOPs of a step's phase (0 rollout, 1 train): its workload's padded batch.
double step_flops(const BenchReport& r, const BenchStep& s, int phase) {
  const BenchWorkload* w = r.find_workload(s.workload);
  if (!w) return phase == 0 ? r.flops_rollout : r.flops_train;
  return phase == 0 ? w->flops_rollout : w->flops_train;
}

// Query-key pairs the attention of a phase computes per layer, whole batch: the train forward
// T·(T+1)/2 per sequence; the rollout's prefill P·(P+1)/2, then a decode step at position p
// attends over p + 1 keys.
double attention_pairs(const BenchWorkload& w, int phase, bool compacted) {
  if (phase == 1) return w.pairs_train_real;  // the train forward runs packed
  if (compacted) return w.pairs_rollout_real;
  const int steps = w.B > 0 ? static_cast<int>(w.decode_computed / w.B) : 0;
  double pairs = 0.5 * w.P * (w.P + 1.0);
  for (int r = 0; r < steps; ++r) pairs += w.P + r + 1.0;
  return w.B * pairs;
}

// Long against short under one profile: per phase (0 rollout, 1 train fwd+bwd, 2 whole step) the
// seconds per real token long ÷ short, and what it is made of: the padding (computed ÷ real
// positions, long ÷ short), the non-attention seconds per computed position and the attention
// seconds per query-key pair (long ÷ short; ≈ 1 where a phase grows as its arithmetic does).
// Positions a phase computed (0 rollout: the prefill and the decode batch's rows; 1 train; 2 the
// step, as the train): the packed train forward computes the real tokens, the decode batch its
// real rows when compacted.
double computed_positions(const BenchWorkload& w, const BenchStep& s, int ph) {
  if (ph == 0) return static_cast<double>(w.B) * w.P + (s.compacted ? w.decode_real : w.decode_computed);
  return static_cast<double>(w.tokens_real);
}

struct TokenCost {
  double per_real[3] = {0, 0, 0}, padding[3] = {0, 0, 0}, rest_per_computed[3] = {0, 0, 0};
  double attention_per_pair[2] = {0, 0};
};

TokenCost token_cost(const BenchWorkload& ws, const BenchStep& ss, const BenchWorkload& wl, const BenchStep& sl) {
  TokenCost c;
  auto phase = [](const BenchWorkload& w, const BenchStep& s, int ph, double* sec, double* att, double* computed) {
    *sec = ph == 0 ? s.rollout_s : ph == 1 ? s.train_s : s.total_s;
    *att = ph == 0 ? s.attention_rollout_s : ph == 1 ? s.attention_train_s : s.attention_rollout_s + s.attention_train_s;
    *computed = computed_positions(w, s, ph);
  };
  for (int ph = 0; ph < 3; ++ph) {
    double s_sec, s_att, s_comp, l_sec, l_att, l_comp;
    phase(ws, ss, ph, &s_sec, &s_att, &s_comp);
    phase(wl, sl, ph, &l_sec, &l_att, &l_comp);
    c.per_real[ph] = (l_sec / wl.tokens_real) / (s_sec / ws.tokens_real);
    c.padding[ph] = (l_comp / wl.tokens_real) / (s_comp / ws.tokens_real);
    c.rest_per_computed[ph] = ((l_sec - l_att) / l_comp) / ((s_sec - s_att) / s_comp);
    if (ph < 2)
      c.attention_per_pair[ph] = (l_att / attention_pairs(wl, ph, sl.compacted)) / (s_att / attention_pairs(ws, ph, ss.compacted));
  }
  return c;
}

// A decode-step profile in bins of equal step counts: first and last key count, mean step and
// attention seconds.
struct DecodeBin {
  int keys_lo = 0, keys_hi = 0;
  double step_s = 0, attention_s = 0;
};

std::vector<DecodeBin> decode_bins(const BenchStep& s, int P) {
  const int n = static_cast<int>(s.decode_step_s.size());
  const int nb = std::max(1, std::min(8, n / 8));
  std::vector<DecodeBin> bins;
  for (int b = 0; b < nb && n > 0; ++b) {
    const int k0 = b * n / nb, k1 = (b + 1) * n / nb;
    DecodeBin d;
    d.keys_lo = P + k0 + 1;  // step k attends over P + k + 1 keys
    d.keys_hi = P + k1;
    for (int k = k0; k < k1; ++k) {
      d.step_s += s.decode_step_s[k];
      d.attention_s += s.decode_attention_s[k];
    }
    d.step_s /= (k1 - k0);
    d.attention_s /= (k1 - k0);
    bins.push_back(d);
  }
  return bins;
}

// A phase's seconds by kind of op (kernels/ops.def), and what ran outside any op.
struct OpGroups {
  double linear = 0, attention = 0, other = 0, outside = 0;
};

OpGroups op_groups(const std::vector<double>& ops, double phase_s) {
  OpGroups g;
  for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
    const Op op = static_cast<Op>(i);
    const bool linear = op == Op::linear_pack_weight || op == Op::linear_forward || op == Op::linear_forward_grouped ||
                        op == Op::linear_backward || op == Op::linear_backward_grouped;
    const bool attention = op == Op::attention_forward || op == Op::attention_backward || op == Op::attention_decode;
    (linear ? g.linear : attention ? g.attention : g.other) += ops[i];
  }
  g.outside = phase_s - g.linear - g.attention - g.other;
  return g;
}

std::string workload_section(const BenchReport& r) {
  std::ostringstream o;
  char line[320];
  o << "\nworkloads: real tokens = prompt + each response's own tokens (EOS included); the rest of B x T is padding "
       "(not computed: the step runs packed)\n";
  std::snprintf(line, sizeof(line), "%-10s %5s %6s %24s %6s %6s %5s %11s %10s %8s %8s %8s\n", "workload", "B",
                "prompt", "response mean/min/max", "limit", "trunc", "T", "real tokens", "computed", "pad tok",
                "pad dec", "pad FLOP");
  o << line;
  for (const BenchWorkload& w : r.workloads) {
    char resp[64];
    std::snprintf(resp, sizeof(resp), "%.1f / %d / %d", w.len_mean, w.len_min, w.len_max);
    std::snprintf(line, sizeof(line), "%-10s %5d %6d %24s %6d %6d %5d %11lld %10lld %7.1f%% %7.1f%% %7.1f%%\n",
                  w.name.c_str(), w.B, w.P, resp, w.R_max, w.truncated, w.T, static_cast<long long>(w.tokens_real),
                  static_cast<long long>(w.tokens_computed), 100.0 * w.train_padding(), 100.0 * w.decode_padding(),
                  100.0 * (1.0 - (w.flops_rollout_real + w.flops_train_real) / (w.flops_rollout + w.flops_train)));
    o << line;
  }
  o << "(the [B, T] layout's padding, which the packed step skips — pad tok: train positions; pad dec: rows of a masked\n"
       " decode batch; pad FLOP: the analytic FLOPs a masked step would spend on padding)\n\n";
  std::snprintf(line, sizeof(line), "%-34s %12s %12s %12s %9s %9s\n", "real tokens per second (best)", "rollout",
                "fwd+bwd", "RL step", "attn% rol", "attn% trn");
  o << line;
  for (const BenchStep& s : r.steps) {
    const BenchWorkload* w = r.find_workload(s.workload);
    if (!w) continue;
    const double n = static_cast<double>(w->tokens_real);
    std::snprintf(line, sizeof(line), "%-34s %12.0f %12.0f %12.0f %8.1f%% %8.1f%%\n", step_label(s, true).c_str(),
                  n / s.rollout_s, n / s.train_s, n / s.total_s, 100.0 * s.attention_rollout_s / s.rollout_s,
                  100.0 * s.attention_train_s / s.train_s);
    o << line;
  }
  const BenchWorkload* ws = r.find_workload("short");
  if (ws)
    for (const BenchStep& sl : r.steps) {
      const BenchWorkload* wl = r.find_workload(sl.workload);
      const BenchStep* ss = sl.workload != "short" ? r.step(sl.rollout_profile, sl.train_profile, "short") : nullptr;
      if (!wl || !ss) continue;
      const TokenCost c = token_cost(*ws, *ss, *wl, sl);
      o << "\n";
      const std::string head = sl.workload + " / short, " + step_label(*ss, false);
      std::snprintf(line, sizeof(line), "%-36s %10s %9s %15s %15s\n", head.c_str(), "s/real tok", "padding",
                    "other s/comp", "attn s/pair");
      o << line;
      const char* names[3] = {"rollout", "train fwd+bwd", "RL step"};
      for (int ph = 0; ph < 3; ++ph) {
        char att[32] = "-";
        if (ph < 2) std::snprintf(att, sizeof(att), "%.2fx", c.attention_per_pair[ph]);
        std::snprintf(line, sizeof(line), "%-36s %9.2fx %8.2fx %14.2fx %15s\n", names[ph], c.per_real[ph],
                      c.padding[ph], c.rest_per_computed[ph], att);
        o << line;
      }
      o << "(s/real tok = padding x the cost per computed position; other s/comp: seconds outside attention per\n"
           " computed position; attn s/pair: attention seconds per query-key pair — both ~1x where a phase grows\n"
           " as its arithmetic does)\n";
    }
  o << "\n";
  std::snprintf(line, sizeof(line), "%-34s %9s %9s %9s %9s %9s\n", "where the time goes (s, best round)", "phase",
                "linear", "attention", "other ops", "outside");
  o << line;
  for (const BenchStep& s : r.steps) {
    if (!r.find_workload(s.workload) || s.ops_train_s.empty()) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const OpGroups g = op_groups(ph == 0 ? s.ops_rollout_s : s.ops_train_s, ph == 0 ? s.rollout_s : s.train_s);
      std::snprintf(line, sizeof(line), "%-34s %9s %9.3f %9.3f %9.3f %9.3f\n", (ph == 0 ? step_label(s, true) : std::string()).c_str(),
                    ph == 0 ? "rollout" : "fwd+bwd", g.linear, g.attention, g.other, g.outside);
      o << line;
    }
  }
  o << "(linear: the linear layers' GEMMs and weight packing; other ops: norms, RoPE, softmax, SwiGLU, top-k,\n"
       " log-probs, embedding; outside: the model's own loops, copies and zero-fills, the MoE dispatch, sampling)\n";
  if (ws)
    for (const BenchStep& sl : r.steps) {
      const BenchWorkload* wl = r.find_workload(sl.workload);
      const BenchStep* ss = sl.workload != "short" ? r.step(sl.rollout_profile, sl.train_profile, "short") : nullptr;
      if (!wl || !ss || ss->ops_train_s.empty() || sl.ops_train_s.empty()) continue;
      const std::string head = sl.workload + " / short per computed position, " + step_label(*ss);
      std::snprintf(line, sizeof(line), "%-52s %9s %9s %9s\n", head.c_str(), "linear", "other ops", "outside");
      o << line;
      for (int ph = 0; ph < 2; ++ph) {
        const OpGroups gs = op_groups(ph == 0 ? ss->ops_rollout_s : ss->ops_train_s, ph == 0 ? ss->rollout_s : ss->train_s);
        const OpGroups gl = op_groups(ph == 0 ? sl.ops_rollout_s : sl.ops_train_s, ph == 0 ? sl.rollout_s : sl.train_s);
        const double cs = computed_positions(*ws, *ss, ph), cl = computed_positions(*wl, sl, ph);
        std::snprintf(line, sizeof(line), "%-52s %8.2fx %8.2fx %8.2fx\n", ph == 0 ? "rollout" : "train fwd+bwd",
                      (gl.linear / cl) / (gs.linear / cs), (gl.other / cl) / (gs.other / cs),
                      (gl.outside / cl) / (gs.outside / cs));
        o << line;
      }
    }
  bool head = false;
  for (const BenchStep& s : r.steps) {
    const BenchWorkload* w = r.find_workload(s.workload);
    if (!w || s.decode_step_s.empty() || s.rollout_profile != s.train_profile) continue;
    if (!head) {
      o << "\ndecode step time against its context (best of the rounds, step by step; prefill apart)\n";
      std::snprintf(line, sizeof(line), "%-34s %11s %10s %10s %12s\n", "workload / profile", "keys", "step ms",
                    "attn ms", "attn us/key");
      o << line;
      head = true;
    }
    for (const DecodeBin& d : decode_bins(s, w->P)) {
      char keys[32];
      std::snprintf(keys, sizeof(keys), "%d-%d", d.keys_lo, d.keys_hi);
      std::snprintf(line, sizeof(line), "%-34s %11s %10.3f %10.3f %12.3f\n", step_label(s, true).c_str(), keys,
                    1e3 * d.step_s, 1e3 * d.attention_s, 1e6 * d.attention_s / (0.5 * (d.keys_lo + d.keys_hi)));
      o << line;
    }
  }
  return o.str();
}

}  // namespace

std::string bench_format_table(const BenchReport& r) {
  std::ostringstream o;
  char line[256];
  o << "moerl bench: " << r.workload << "\n";
  o << "model: " << r.model << "\n";
  o << "cpu: " << r.cpu << "; SIMD target " << r.simd << " (available: "
    << cli_join(simd_targets_available(), ", ") << ")\n";
  o << "RL step: rollout of " << r.B << " sequences (prefill " << r.P << " + " << r.R
    << " sampled tokens, KV cache), then forward + backward + AdamW over the " << r.B << " x " << r.T
    << " tokens\n";
  if (const BenchWorkload* w = r.find_workload("long"))
    o << "long answers: the same prompts, responses ending at EOS (token " << w->eos << ") at lengths spread evenly over "
      << "1.." << 2 * w->mean_len - 1 << " (mean " << w->mean_len << "), limit " << w->R_max
      << "; decode until the longest ends (a finished row leaves the decode batch under a row-independent profile), "
         "train packed: each sequence over its own prompt + response, the loss on each response's own tokens\n";
  if (const BenchWorkload* w = r.find_workload("long-fixed"))
    o << "long-fixed: the same prompts, every response " << w->R_max
      << " tokens (no EOS, no padding): the long answers' real tokens at one length\n";
  std::snprintf(line, sizeof(line),
                "machine: %d thread(s) x %d rank(s), %s; load average %.2f %.2f %.2f at start, %.2f %.2f %.2f at end\n",
                r.threads, r.ranks, r.blas.c_str(), r.load_begin[0], r.load_begin[1], r.load_begin[2],
                r.load_end[0], r.load_end[1], r.load_end[2]);
  o << line;
  std::snprintf(line, sizeof(line),
                "FP32 GEMM ceiling (best of the rounds): moerl kernel %.1f GFLOP/s, BLAS %.1f -> ceiling %.1f GFLOP/s\n\n",
                r.ceiling_own, r.ceiling_blas, r.ceiling);
  o << line;
  std::snprintf(line, sizeof(line), "%-26s %-12s %9s %9s %9s %8s %10s\n", "RL step (best of rounds)",
                "", "total s", "rollout s", "fwd+bwd s", "AdamW s", "median s");
  o << line;
  for (const BenchStep& s : r.steps) {
    const std::string name = step_label(s);
    std::snprintf(line, sizeof(line), "%-39s %9.3f %9.3f %9.3f %8.4f %10.3f\n", name.c_str(), s.total_s,
                  s.rollout_s, s.train_s, s.optimizer_s, s.total_median_s);
    o << line;
  }
  o << "\n";
  std::snprintf(line, sizeof(line), "%-34s %9s %9s %9s %9s %9s\n", "phase", "seconds", "GFLOP", "GFLOP/s",
                "% ceil", "x floor");
  o << line;
  for (const BenchStep& s : r.steps) {
    if (s.rollout_profile != s.train_profile) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const double sec = ph == 0 ? s.rollout_s : s.train_s;
      const double fl = step_flops(r, s, ph);
      const double gf = fl / sec * 1e-9;
      const std::string name = (ph == 0 ? "rollout " : "train fwd+bwd ") + step_label(s);
      std::snprintf(line, sizeof(line), "%-34s %9.3f %9.2f %9.1f %8.1f%% %9.2f\n", name.c_str(), sec,
                    fl * 1e-9, gf, 100.0 * gf / r.ceiling, sec / (fl / (r.ceiling * 1e9)));
      o << line;
    }
  }
  if (const BenchStep* base = r.step("fp32-ref", "fp32-ref"); base && r.peer_rollout_s > 0) {
    o << "\n";
    const std::string head = "fp32 vs peer " + (r.peer_name.empty() ? std::string("(given times)") : r.peer_name);
    std::snprintf(line, sizeof(line), "%-34s %9s %9s %9s\n", head.c_str(), "peer s", "moerl s", "speed-up");
    o << line;
    const double pt = r.peer_rollout_s + r.peer_train_s;
    std::snprintf(line, sizeof(line), "%-34s %9.3f %9.3f %8.2fx\n", "rollout", r.peer_rollout_s,
                  base->rollout_s, r.peer_rollout_s / base->rollout_s);
    o << line;
    std::snprintf(line, sizeof(line), "%-34s %9.3f %9.3f %8.2fx\n", "train (fwd+bwd+AdamW)", r.peer_train_s,
                  base->train_s + base->optimizer_s, r.peer_train_s / (base->train_s + base->optimizer_s));
    o << line;
    std::snprintf(line, sizeof(line), "%-34s %9.3f %9.3f %8.2fx\n", "RL step", pt, base->total_s,
                  pt / base->total_s);
    o << line;
  }
  o << workload_section(r);
  o << "\n";
  if (r.routing_bits > 0) {
    std::snprintf(line, sizeof(line),
                  "R3 routing record: %d bits per (layer, token) -> %lld bytes per step packed vs %lld as int32 (%.1fx smaller)\n",
                  r.routing_bits, static_cast<long long>(r.routing_bytes),
                  static_cast<long long>(r.routing_bytes_int32),
                  static_cast<double>(r.routing_bytes_int32) / static_cast<double>(r.routing_bytes));
    o << line;
  }
  std::snprintf(line, sizeof(line), "peak memory (maxrss, rank 0): %.1f MiB\n", r.peak_rss_mib);
  o << line;
  if (!r.targets.empty()) {
    o << "\ntargets:\n";
    for (const BenchTarget& t : r.targets) {
      std::snprintf(line, sizeof(line), "  [%s] %-48s %8.2f%s (%s %.2f%s)\n", t.pass ? "PASS" : "MISS",
                    t.name.c_str(), t.value, t.unit.c_str(), t.at_least ? ">=" : "<=", t.limit,
                    t.unit.c_str());
      o << line;
    }
  }
  return o.str();
}

std::string bench_format_json(const BenchReport& r) {
  std::ostringstream o;
  auto num = [](double v) { return fmt("%.6g", v); };
  o << "{\n";
  o << "  \"workload\": \"" << json_escape(r.workload) << "\",\n";
  o << "  \"model\": \"" << json_escape(r.model) << "\",\n";
  o << "  \"sequences\": " << r.B << ", \"seq_len\": " << r.T << ", \"prompt_len\": " << r.P
    << ", \"decode_steps\": " << r.R << ",\n";
  o << "  \"threads\": " << r.threads << ", \"ranks\": " << r.ranks << ", \"blas\": \"" << json_escape(r.blas)
    << "\", \"simd\": \"" << json_escape(r.simd) << "\", \"cpu\": \"" << json_escape(r.cpu) << "\",\n";
  o << "  \"load_begin\": [" << num(r.load_begin[0]) << ", " << num(r.load_begin[1]) << ", "
    << num(r.load_begin[2]) << "], \"load_end\": [" << num(r.load_end[0]) << ", " << num(r.load_end[1])
    << ", " << num(r.load_end[2]) << "],\n";
  o << "  \"ceiling_gflops\": " << num(r.ceiling) << ", \"ceiling_own_gflops\": " << num(r.ceiling_own)
    << ", \"ceiling_blas_gflops\": " << num(r.ceiling_blas) << ",\n";
  o << "  \"flops_rollout\": " << num(r.flops_rollout) << ", \"flops_train\": " << num(r.flops_train) << ",\n";
  auto list = [&](const std::vector<double>& v) {
    std::string a = "[";
    for (size_t k = 0; k < v.size(); ++k) a += (k ? ", " : "") + num(v[k]);
    return a + "]";
  };
  o << "  \"workloads\": [\n";
  for (size_t i = 0; i < r.workloads.size(); ++i) {
    const BenchWorkload& w = r.workloads[i];
    o << "    {\"name\": \"" << json_escape(w.name) << "\", \"sequences\": " << w.B << ", \"prompt_len\": " << w.P
      << ", \"response_limit\": " << w.R_max << ", \"eos\": " << w.eos << ", \"mean_len_target\": " << w.mean_len
      << ", \"decode_positions\": " << w.R << ", \"seq_len\": " << w.T << ",\n     \"len_mean\": " << num(w.len_mean)
      << ", \"len_min\": " << w.len_min << ", \"len_max\": " << w.len_max << ", \"truncated\": " << w.truncated
      << ", \"tokens_real\": " << w.tokens_real << ", \"tokens_computed\": " << w.tokens_computed
      << ", \"decode_rows_real\": " << w.decode_real << ", \"decode_rows_computed\": " << w.decode_computed
      << ",\n     \"train_padding\": " << num(w.train_padding()) << ", \"decode_padding\": " << num(w.decode_padding())
      << ", \"flops_rollout\": " << num(w.flops_rollout) << ", \"flops_train\": " << num(w.flops_train)
      << ", \"flops_rollout_real\": " << num(w.flops_rollout_real) << ", \"flops_train_real\": "
      << num(w.flops_train_real) << "}" << (i + 1 < r.workloads.size() ? "," : "") << "\n";
  }
  o << "  ],\n";
  o << "  \"steps\": [\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const BenchStep& s = r.steps[i];
    o << "    {\"rollout_profile\": \"" << json_escape(s.rollout_profile) << "\", \"train_profile\": \""
      << json_escape(s.train_profile) << "\", \"total_s\": " << num(s.total_s)
      << ", \"rollout_s\": " << num(s.rollout_s) << ", \"train_s\": " << num(s.train_s)
      << ", \"optimizer_s\": " << num(s.optimizer_s) << ", \"total_median_s\": " << num(s.total_median_s)
      << ",\n     \"workload\": \"" << json_escape(s.workload) << "\"";
    if (const BenchWorkload* w = r.find_workload(s.workload)) {
      // 0 for a phase not timed (--phase rollout | train): JSON has no inf
      auto rate = [&](double sec) { return num(sec > 0 ? static_cast<double>(w->tokens_real) / sec : 0.0); };
      o << ", \"tokens_per_s_rollout\": " << rate(s.rollout_s) << ", \"tokens_per_s_train\": " << rate(s.train_s)
        << ", \"tokens_per_s_step\": " << rate(s.total_s);
    }
    o << ", \"attention_rollout_s\": " << num(s.attention_rollout_s) << ", \"attention_train_s\": "
      << num(s.attention_train_s) << ", \"prefill_s\": " << num(s.prefill_s) << ",\n     \"decode_step_s\": "
      << list(s.decode_step_s) << ",\n     \"decode_attention_s\": " << list(s.decode_attention_s);
    for (int ph = 0; ph < 2; ++ph) {
      const std::vector<double>& v = ph == 0 ? s.ops_rollout_s : s.ops_train_s;
      o << ",\n     \"" << (ph == 0 ? "ops_rollout_s" : "ops_train_s") << "\": {";
      for (size_t k = 0; k < v.size(); ++k)
        o << (k ? ", " : "") << "\"" << op_name(static_cast<Op>(k)) << "\": " << num(v[k]);
      o << "}";
    }
    o << "}"
      << (i + 1 < r.steps.size() ? "," : "") << "\n";
  }
  o << "  ],\n";
  o << "  \"token_cost\": [";
  bool first = true;
  if (const BenchWorkload* ws = r.find_workload("short"))
    for (const BenchStep& sl : r.steps) {
      const BenchWorkload* wl = r.find_workload(sl.workload);
      const BenchStep* ss = sl.workload != "short" ? r.step(sl.rollout_profile, sl.train_profile, "short") : nullptr;
      if (!wl || !ss) continue;
      const TokenCost c = token_cost(*ws, *ss, *wl, sl);
      o << (first ? "\n" : ",\n") << "    {\"workload\": \"" << json_escape(sl.workload)
        << "\", \"rollout_profile\": \"" << json_escape(sl.rollout_profile)
        << "\", \"train_profile\": \"" << json_escape(sl.train_profile) << "\"";
      const char* names[3] = {"rollout", "train", "step"};
      for (int ph = 0; ph < 3; ++ph)
        o << ", \"" << names[ph] << "\": {\"per_real_token\": " << num(c.per_real[ph]) << ", \"padding\": "
          << num(c.padding[ph]) << ", \"other_per_computed\": " << num(c.rest_per_computed[ph])
          << (ph < 2 ? ", \"attention_per_pair\": " + num(c.attention_per_pair[ph]) : std::string()) << "}";
      o << "}";
      first = false;
    }
  o << (first ? "],\n" : "\n  ],\n");
  o << "  \"routing_bits\": " << r.routing_bits << ", \"routing_bytes\": " << r.routing_bytes
    << ", \"routing_bytes_int32\": " << r.routing_bytes_int32 << ",\n";
  o << "  \"peak_rss_mib\": " << num(r.peak_rss_mib) << ",\n";
  o << "  \"peer\": \"" << json_escape(r.peer_name) << "\", \"peer_rollout_s\": " << num(r.peer_rollout_s)
    << ", \"peer_train_s\": " << num(r.peer_train_s) << ",\n";
  o << "  \"targets\": [\n";
  for (size_t i = 0; i < r.targets.size(); ++i) {
    const BenchTarget& t = r.targets[i];
    o << "    {\"name\": \"" << json_escape(t.name) << "\", \"value\": " << num(t.value)
      << ", \"limit\": " << num(t.limit) << ", \"at_least\": " << (t.at_least ? "true" : "false")
      << ", \"pass\": " << (t.pass ? "true" : "false") << ", \"unit\": \"" << json_escape(t.unit) << "\"}"
      << (i + 1 < r.targets.size() ? "," : "") << "\n";
  }
  o << "  ]\n}\n";
  return o.str();
}

}  // namespace moerl
