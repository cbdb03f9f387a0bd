// cmd_bench.cpp — `moerl bench`: times the reference workload's RL step (scenarios/bench.ini; the
// built-in defaults are the same workload) on this machine, beside the FP32 GEMM ceiling measured
// in the same run, and checks the performance targets (sim/bench/bench.h, docs/performance.md).
// A scenario without a [bench] section (scenarios/quickstart.ini, or a grid such as
// scenarios/paper/collapse.ini, read as its scenario without [sweep]) is timed on its own RL
// step: its batch, prompt, response limit and mini-batches (sim/bench/bench_shape.h).
//   moerl bench [--scenario scenarios/bench.ini] [--rounds 5] [--json out.json]
//               [--peer-json peer.json] [--profiles fp32-ref,bf16-train,fp8-rollout] [--threads N]
//               [--simd avx512|avx2|scalar|...] [--workloads short,long] [--long-profiles fp32-ref]
//               [--long-mean 128] [--long-max 256]
// The long-answer workload (responses of their own length, sim/bench/workload.h) is not in the
// default run: its step is ≈ 10× the short one's (≈ 10–20 s on 2 cores) with ≈ 6 GiB peak memory;
// `--workloads short,long` adds it under --long-profiles; long-fixed (every response --long-mean
// tokens, no padding) separates its padding from its longer context.
// Under mpirun the model runs expert- and data-parallel over all ranks (as `moerl run`); rank 0
// prints. The exit status is 0 whether or not a target is missed (analysis/bench/compare.py
// reports them); --require-targets makes a miss exit with 1.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <tbb/global_control.h>

#include "kernels/simd.h"
#include "sim/bench/bench.h"
#include "sim/bench/bench_shape.h"
#include "sim/cli/cli.h"
#include "sim/io/json_check.h"
#include "sim/io/text_io.h"
#include "sim/process/preempt.h"
#include "sim/scenario/scenario.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

// The number after "key": in a flat JSON object (the peer's output), or 0 when absent.
double json_number(const std::string& text, const std::string& key) {
  const size_t k = text.find("\"" + key + "\"");
  if (k == std::string::npos) return 0.0;
  const size_t colon = text.find(':', k);
  if (colon == std::string::npos) return 0.0;
  return std::strtod(text.c_str() + colon + 1, nullptr);
}

std::string json_string(const std::string& text, const std::string& key) {
  const size_t k = text.find("\"" + key + "\"");
  if (k == std::string::npos) return "";
  const size_t q0 = text.find('"', text.find(':', k) + 1);
  const size_t q1 = text.find('"', q0 + 1);
  return q0 == std::string::npos || q1 == std::string::npos ? "" : text.substr(q0 + 1, q1 - q0 - 1);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The command line, as parsed: BenchOptions' fields and what only the command needs.
struct BenchArgs {
  std::string scenario_path, json_out, peer_json, profiles, phase, simd, workloads, long_profiles;
  int rounds = 5, gemm_n = 1024, long_mean = 128, long_max = 256;
  double gemm_seconds = 0.25;
  bool recipe = true, require = false, progress = false;
  std::vector<std::string> sets;
};

void bench_add_options(po::options_description* desc, BenchArgs* a) {
  desc->add_options()
      ("scenario", po::value(&a->scenario_path),
       "scenario or grid (default: built-in defaults = scenarios/bench.ini's workload); without a [bench] section "
       "its own RL step is timed")
      ("rounds", po::value(&a->rounds)->default_value(5), "timed rounds; every number is the best of them")
      ("profiles", po::value(&a->profiles)->default_value("fp32-ref,bf16-train,fp8-rollout"),
       "profiles whose RL step is timed (comma-separated; fp32-ref is the baseline of the ratios)")
      ("recipe", po::value(&a->recipe)->default_value(true), "also time the [engines] recipe step (rollout + train profile)")
      ("workloads", po::value(&a->workloads)->default_value("short"),
       "short (the reference step), long (long answers ending at EOS), long-fixed (every response "
       "--long-mean tokens), comma-separated")
      ("long-profiles", po::value(&a->long_profiles)->default_value("fp32-ref"),
       "profiles whose long-answer step is timed (comma-separated)")
      ("long-mean", po::value(&a->long_mean)->default_value(128),
       "long answers: response lengths spread evenly over 1 .. 2*mean-1 tokens (EOS included), mean exactly this")
      ("long-max", po::value(&a->long_max)->default_value(256), "long answers: the response limit (>= 2*mean-1)")
      ("gemm-n", po::value(&a->gemm_n)->default_value(1024), "size n of the n×n×n GEMM-ceiling product on the CPU (on run.backend = cuda: 8192)")
      ("gemm-seconds", po::value(&a->gemm_seconds)->default_value(0.25), "minimum time per ceiling measurement and round")
      ("json", po::value(&a->json_out), "also write the numbers to this JSON file")
      ("peer-json", po::value(&a->peer_json), "the peer's JSON (analysis/bench/torch_peer.py): adds the speed-up target")
      ("require-targets", po::bool_switch(&a->require), "exit with 1 when a target is missed")
      ("phase", po::value(&a->phase)->default_value("step"), "step | rollout | train: time only one phase (for profiling)")
      ("progress", po::bool_switch(&a->progress), "a line per round on stderr")
      ("simd", po::value(&a->simd), ("restrict the CPU kernels to one instruction set: " +
                                     cli_join(simd_target_names(), " | ") + " (as MOERL_SIMD)").c_str());
  cli_add_set_option(desc, &a->sets);
}

// The times of the peer's step (analysis/bench/torch_peer.py's JSON) into o.
void bench_read_peer(const std::string& path, BenchOptions* o) {
  std::string text;
  try {
    text = text_read_input(path, "peer JSON file", kScenarioMaxBytes);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("bench: --peer-json ") + e.what());
  }
  const std::string bad = json_syntax_error(text);
  if (!bad.empty())
    throw usage_error("bench: --peer-json " + path + ": not valid JSON (" + bad +
                      "; analysis/bench/torch_peer.py writes it)");
  o->peer_rollout_s = json_number(text, "rollout_s");
  o->peer_train_s = json_number(text, "train_s");
  o->peer_name = json_string(text, "peer");
  if (!(o->peer_rollout_s > 0 && o->peer_train_s > 0 && std::isfinite(o->peer_rollout_s) &&
        std::isfinite(o->peer_train_s)))
    throw usage_error("bench: --peer-json " + path + ": needs positive \"rollout_s\" and \"train_s\"");
}

// A comma-separated list of names, at least one: "--profiles ','" names none.
std::vector<std::string> bench_names(const std::string& option, const std::string& text, const std::string& example) {
  std::vector<std::string> v = split_commas(text);
  if (v.empty())
    throw usage_error("bench: " + option + " '" + text_shown(text) + "': no name given (comma-separated, e.g. " +
                      example + ")");
  return v;
}

// The options checked (each error names the flag and its value) into BenchOptions.
BenchOptions bench_options(const BenchArgs& a) {
  if (a.rounds < 1) throw usage_error("bench: --rounds " + std::to_string(a.rounds) + ": must be >= 1");
  // 3 n×n FP32 matrices: 16384 is 3 GiB, more than a ceiling needs and what a machine may not have
  if (a.gemm_n < 16 || a.gemm_n > 16384)
    throw usage_error("bench: --gemm-n " + std::to_string(a.gemm_n) + ": must be in [16, 16384]");
  if (!(std::isfinite(a.gemm_seconds) && a.gemm_seconds > 0))
    throw usage_error("bench: --gemm-seconds " + text_shown(std::to_string(a.gemm_seconds)) +
                      ": must be a finite number of seconds > 0 (default 0.25)");
  if (!a.simd.empty()) {
    try {
      simd_select(a.simd, "bench: --simd");
    } catch (const std::invalid_argument& e) {
      throw usage_error(e.what());
    }
  }
  BenchOptions o;
  o.rounds = a.rounds;
  o.gemm_n = a.gemm_n;
  o.gemm_seconds = a.gemm_seconds;
  o.profiles = bench_names("--profiles", a.profiles, "fp32-ref,bf16-train");
  o.workloads = split_commas(a.workloads);
  o.long_profiles = bench_names("--long-profiles", a.long_profiles, "fp32-ref");
  o.long_mean = a.long_mean;
  o.long_max = a.long_max;
  for (const std::string& w : o.workloads)
    if (!bench_workload_known(w))
      throw usage_error("bench: --workloads " + a.workloads + ": '" + w + "' is not one of " + kBenchWorkloads);
  if (o.workloads.empty()) throw usage_error(std::string("bench: --workloads: none given (") + kBenchWorkloads + ")");
  if (a.long_mean < 1 || 2 * a.long_mean - 1 > a.long_max)
    throw usage_error("bench: --long-mean " + std::to_string(a.long_mean) + ", --long-max " +
                      std::to_string(a.long_max) + ": needs 1 <= mean and 2 * mean - 1 <= max");
  o.recipe = a.recipe;
  o.progress = a.progress;
  o.phase = a.phase;
  if (!a.peer_json.empty()) bench_read_peer(a.peer_json, &o);
  return o;
}

// The scenario timed: the built-in reference workload, a scenario with its [bench] section, or
// one without (its own RL step: o->derive_shape).
Scenario bench_scenario(const BenchArgs& a, BenchOptions* o) {
  bool has_bench = true;
  const Scenario s = a.scenario_path.empty() ? Scenario::defaults(a.sets)
                                             : bench_scenario_load(a.scenario_path, a.sets, &has_bench);
  o->derive_shape = !has_bench;
  for (const std::string& p : o->profiles) (void)s.profile(p);  // unknown names fail before timing
  for (const std::string& p : o->long_profiles) (void)s.profile(p);
  return s;
}

int bench_write(const BenchReport& r, const BenchArgs& a) {
  std::fputs(bench_format_table(r).c_str(), stdout);
  std::fflush(stdout);
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    if (!(f << bench_format_json(r))) throw std::runtime_error("bench: cannot write " + a.json_out);
  }
  if (a.require)
    for (const BenchTarget& t : r.targets)
      if (!t.pass) return 1;
  return 0;
}

}  // namespace

int cmd_bench(const Comms& comms, const std::vector<std::string>& args) {
  BenchArgs a;
  po::options_description desc("moerl bench options");
  bench_add_options(&desc, &a);
  po::variables_map vm;
  if (!cli_parse(comms, "bench", "[--scenario scenarios/bench.ini] [--rounds N] [--json out.json]", desc,
                 po::positional_options_description(), args, &vm))
    return 0;
  BenchOptions o = bench_options(a);
  // --threads (every command's, sim/cli/cli.cpp) has limited oneTBB already (sim/process/threads.h).
  const Scenario s = bench_scenario(a, &o);
  o.local_rank = comms.local_rank;
  const RankGrid grid(comms, 0);
  BenchReport r;
  try {
    r = bench_run(s, a.scenario_path.empty() ? "built-in reference workload" : a.scenario_path, o,
                  grid.size() > 1 ? grid.model_parallel(0) : ModelParallel{});
  } catch (const Preempted& e) {  // every rank throws it at the same point (bench.cpp's stop_point)
    if (grid.is_root())
      std::fprintf(stderr, "moerl bench: %s: nothing written (exit status %d); run it again\n", e.what(), kExitPreempted);
    return kExitPreempted;
  }
  if (!grid.is_root()) return 0;
  return bench_write(r, a);
}

}  // namespace moerl
