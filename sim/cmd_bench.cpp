// cmd_bench.cpp — `moerl bench`: times the reference workload (scenarios/bench.ini; the built-in
// defaults are the same workload) on this machine:
//  (a) training forward + backward of [bench] sequences × seq_len under fp32-ref, bf16-train and
//      fp8-rollout;
//  (b) generation under fp32-ref: prefill of prompt_len tokens, then decode_steps KV-cache steps;
//  (c) the FP32 GEMM ceiling measured in the same run (BLAS sgemm, and moerl's exact kernel).
// Reports seconds (median of --repeat runs after one warm-up), tokens/s, achieved GFLOP/s from the
// analytic counts of sim/flops.h, % of the ceiling (the faster of the two GEMM measurements), the BLAS kernel and peak memory.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <tbb/info.h>

#include "kernels/linear.h"
#include "kernels/rng.h"
#include "sim/cli.h"
#include "models/model.h"
#include "sim/flops.h"
#include "sim/scenario.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median of repeat timings of fn, after one untimed warm-up call (packs weights, faults pages).
template <class Fn>
double time_median(int repeat, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double peak_rss_mib() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

int cmd_bench(const Comms& comms, const std::vector<std::string>& args) {
  std::string scenario_path;
  int repeat = 3, gemm_n = 1024;
  double gemm_seconds = 1.0;
  std::vector<std::string> sets;
  po::options_description desc("moerl bench options");
  desc.add_options()
      ("scenario", po::value(&scenario_path), "scenario (default: built-in defaults = scenarios/bench.ini's workload)")
      ("repeat", po::value(&repeat)->default_value(3), "timed runs per measurement (median reported)")
      ("gemm-n", po::value(&gemm_n)->default_value(1024), "size n of the n×n×n GEMM-ceiling product")
      ("gemm-seconds", po::value(&gemm_seconds)->default_value(1.0), "minimum time per ceiling measurement");
  cli_add_set_option(&desc, &sets);
  po::variables_map vm;
  if (!cli_parse(comms, "bench", "[--scenario scenarios/bench.ini] [--repeat N]", desc,
                 po::positional_options_description(), args, &vm))
    return 0;
  if (repeat < 1) throw usage_error("bench: --repeat " + std::to_string(repeat) + ": must be >= 1");
  if (gemm_n < 16) throw usage_error("bench: --gemm-n " + std::to_string(gemm_n) + ": must be >= 16");
  if (!comms.is_root) return 0;

  const Scenario s =
      scenario_path.empty() ? Scenario::defaults(sets) : Scenario::load(scenario_path, sets);
  const ModelConfig& cfg = s.model;
  const BenchConfig& bc = s.bench;
  if (bc.seq_len > cfg.max_seq_len || bc.prompt_len + bc.decode_steps > cfg.max_seq_len)
    throw std::invalid_argument(
        "bench.seq_len = " + std::to_string(bc.seq_len) + ", bench.prompt_len + bench.decode_steps = " +
        std::to_string(bc.prompt_len + bc.decode_steps) + ": both must be <= model.max_seq_len = " +
        std::to_string(cfg.max_seq_len));
  const int B = bc.sequences, T = bc.seq_len, V = cfg.vocab_size;

  std::printf("moerl bench: %s\n", scenario_path.empty() ? "built-in reference workload" : scenario_path.c_str());
  std::printf("model: vocab %d, d_model %d, %d layers, %d heads, %s, d_ff %d\n", V, cfg.d_model,
              cfg.n_layers, cfg.n_heads,
              cfg.is_moe() ? (std::to_string(cfg.n_experts) + " experts top-" + std::to_string(cfg.top_k)).c_str()
                           : "dense",
              cfg.d_ff);
  std::printf("BLAS: %s; threads: %d; repeat %d (median)\n", blas_kernel_name(),
              tbb::info::default_concurrency(), repeat);
  std::fflush(stdout);

  // (c) first: the ceiling the other numbers are compared with.
  const double ceiling_blas = gemm_measure_gflops(gemm_n, gemm_seconds, true);
  const double ceiling_own = gemm_measure_gflops(gemm_n, gemm_seconds, false);
  // The ceiling is the faster of the two: what this machine reaches on a large FP32 product.
  const double ceiling = std::max(ceiling_blas, ceiling_own);
  std::printf("FP32 GEMM ceiling (%d^3): BLAS %.1f GFLOP/s, moerl exact kernel %.1f GFLOP/s\n\n",
              gemm_n, ceiling_blas, ceiling_own);

  Model model(cfg);
  params_init(&model.params(), cfg, s.run.seed);
  model.invalidate_packed_weights();
  std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
  Rng rng(rng_derive(s.run.seed, static_cast<uint64_t>(Stream::data), {0xBE7C4}));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  // Mean log-prob loss: every log-prob gets gradient −1/(B·(T−1)).
  const std::vector<float> dlogp(static_cast<size_t>(B) * (T - 1), -1.0f / (B * (T - 1.0f)));

  std::printf("%-46s %10s %12s %10s %9s\n", "phase", "seconds", "tokens/s", "GFLOP/s", "% ceil");
  auto report = [&](const std::string& name, double sec, double tokens_done, double flops) {
    const double gf = flops / sec * 1e-9;
    std::printf("%-46s %10.4f %12.0f %10.2f %8.1f%%\n", name.c_str(), sec, tokens_done / sec, gf,
                100.0 * gf / ceiling);
    std::fflush(stdout);
  };

  // (a) training forward + backward.
  for (const char* pname : {"fp32-ref", "bf16-train", "fp8-rollout"}) {
    const NumericsProfile prof = s.profile(pname);
    ForwardResult res;
    const double sec = time_median(repeat, [&] {
      model.grads().zero();
      ForwardRequest req;
      req.tokens = tokens.data();
      req.B = B;
      req.T = T;
      req.profile = &prof;
      req.save_for_backward = true;
      model.forward(&res, req);
      model.backward(dlogp.data());
    });
    report(std::string("train fwd+bwd ") + pname + " (" + std::to_string(B) + "x" + std::to_string(T) + ")",
           sec, static_cast<double>(B) * T, B * flops_train_sequence(cfg, T));
  }

  // (b) generation: prefill + decode steps, greedy (argmax costs nothing next to the model).
  {
    const NumericsProfile prof = s.profile("fp32-ref");
    const int P = bc.prompt_len, S = bc.decode_steps;
    std::vector<int32_t> prompt(static_cast<size_t>(B) * P), next(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) std::copy_n(tokens.begin() + static_cast<size_t>(b) * T, P, prompt.begin() + b * P);
    std::vector<float> logits(static_cast<size_t>(B) * V);
    const double sec = time_median(repeat, [&] {
      GenerationState* st = nullptr;
      model.generation_begin(&st, B, P + S, &prof);
      model.generation_prefill(st, logits.data(), nullptr, nullptr, prompt.data(), P);
      for (int step = 0; step < S; ++step) {
        for (int b = 0; b < B; ++b) {
          const float* row = logits.data() + static_cast<size_t>(b) * V;
          next[b] = static_cast<int32_t>(std::max_element(row, row + V) - row);
        }
        model.generation_step(st, logits.data(), nullptr, nullptr, next.data());
      }
      model.generation_end(st);
    });
    double flops = flops_prefill(cfg, P);
    for (int step = 0; step < S; ++step) flops += flops_decode_step(cfg, P + step);
    report("generate fp32-ref (prefill " + std::to_string(P) + " + " + std::to_string(S) + " decode)",
           sec, static_cast<double>(B) * (P + S), B * flops);
  }
  std::printf("\npeak memory (maxrss): %.1f MiB\n", peak_rss_mib());
  std::printf("reference (DESIGN.md): PyTorch eager, 2 threads, AVX-512 OpenBLAS: ~4.1 s rollout + "
              "~3.8 s train per step of this workload\n");
  return 0;
}

}  // namespace moerl
