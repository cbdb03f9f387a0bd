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
#include "sim/backend_select.h"
#include "sim/cli/cli.h"
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
  std::string rollout, train;
  NumericsProfile rp, tp;
  std::vector<double> total, rollout_s, train_s, opt_s;
};

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

const BenchStep* BenchReport::step(const std::string& rollout, const std::string& train) const {
  for (const BenchStep& s : steps)
    if (s.rollout_profile == rollout && s.train_profile == train) return &s;
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
  Model model(cfg);
  params_init(&model.params(), cfg, s.run.seed);
  model.set_backend(backend);
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
  // Mean log-prob loss over the batch: every log-prob gets gradient −1/(B·(T−1)).
  const std::vector<float> dlogp(static_cast<size_t>(Bl) * (T - 1), -1.0f / (B * (T - 1.0f)));
  SamplingConfig sampling;  // temperature 1, top-p 1: plain multinomial sampling, as the peer

  std::vector<StepItem> items;
  auto add_item = [&](const std::string& r, const std::string& t) {
    for (const StepItem& it : items)
      if (it.rollout == r && it.train == t) return;
    StepItem it;
    it.rollout = r; it.train = t;
    it.rp = s.profile(r);
    it.tp = s.profile(t);
    items.push_back(std::move(it));
  };
  for (const std::string& p : o.profiles) add_item(p, p);
  if (o.recipe) add_item(s.engines.rollout, s.engines.train);

  RolloutBatch rb;
  auto run_step = [&](StepItem& it, bool record) {
    model.params().data() = params0;
    adamw.m() = m0;
    adamw.v() = v0;
    model.invalidate_packed_weights();
    barrier(par);
    const auto t0 = Clock::now();
    if (!record || o.phase != "train")
      rollout_generate(&rb, model, it.rp, prompts.data() + blk.begin * P, Bl, P, R, sampling,
                       s.run.seed, 0, static_cast<uint64_t>(blk.begin));
    barrier(par);
    const auto t1 = Clock::now();
    if (record && o.phase == "rollout") {
      it.total.push_back(seconds_between(t0, t1));
      it.rollout_s.push_back(seconds_between(t0, t1));
      it.train_s.push_back(0.0);
      it.opt_s.push_back(0.0);
      return;
    }
    model.grads().zero();
    ForwardResult res;
    ForwardRequest req;
    req.tokens = rb.tokens.data();
    req.B = Bl;
    req.T = T;
    req.B_total = B;
    req.profile = &it.tp;
    req.save_for_backward = true;
    model.forward(&res, req);
    model.backward(dlogp.data());
    barrier(par);
    const auto t2 = Clock::now();
    adamw.step(&model.params(), &model.grads(), oc.lr, 0);
    model.invalidate_packed_weights();
    barrier(par);
    const auto t3 = Clock::now();
    if (!record) return;
    it.total.push_back(seconds_between(t0, t3));
    it.rollout_s.push_back(seconds_between(t0, t1));
    it.train_s.push_back(seconds_between(t1, t2));
    it.opt_s.push_back(seconds_between(t2, t3));
  };

  for (StepItem& it : items) run_step(it, false);  // warm-up: page faults, thread pools
  if (cfg.is_moe()) {  // the R3 record of this rank's rollout (the last warm-up step's)
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
  for (const StepItem& it : items) {
    BenchStep st;
    st.rollout_profile = it.rollout;
    st.train_profile = it.train;
    st.total_s = *std::min_element(it.total.begin(), it.total.end());
    st.rollout_s = *std::min_element(it.rollout_s.begin(), it.rollout_s.end());
    st.train_s = *std::min_element(it.train_s.begin(), it.train_s.end());
    st.optimizer_s = *std::min_element(it.opt_s.begin(), it.opt_s.end());
    st.total_median_s = median(it.total);
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
      if (&st == base || st.rollout_profile != st.train_profile) continue;
      target("RL step " + st.rollout_profile + " / fp32-ref", st.total_s / base->total_s, 1.5, false, "x");
      target("rollout " + st.rollout_profile + " / rollout fp32-ref", st.rollout_s / base->rollout_s, 1.5,
             false, "x");
      target("train fwd+bwd " + st.train_profile + " / fp32-ref", st.train_s / base->train_s, 1.5, false, "x");
    }
  }
  return rep;
}

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
    const std::string name = s.rollout_profile == s.train_profile
                                 ? s.rollout_profile
                                 : s.rollout_profile + " + " + s.train_profile;
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
      const double fl = ph == 0 ? r.flops_rollout : r.flops_train;
      const double gf = fl / sec * 1e-9;
      const std::string name = (ph == 0 ? "rollout " : "train fwd+bwd ") + s.rollout_profile;
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
  o << "  \"steps\": [\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const BenchStep& s = r.steps[i];
    o << "    {\"rollout_profile\": \"" << json_escape(s.rollout_profile) << "\", \"train_profile\": \""
      << json_escape(s.train_profile) << "\", \"total_s\": " << num(s.total_s)
      << ", \"rollout_s\": " << num(s.rollout_s) << ", \"train_s\": " << num(s.train_s)
      << ", \"optimizer_s\": " << num(s.optimizer_s) << ", \"total_median_s\": " << num(s.total_median_s)
      << "}" << (i + 1 < r.steps.size() ? "," : "") << "\n";
  }
  o << "  ],\n";
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
