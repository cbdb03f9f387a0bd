// cmd_run.cpp — `moerl run SCENARIO [--set k=v]... [--out PATH]`: one RL run.
#include <cstdio>
#include <filesystem>
#include <string>

#include "sim/cli/cli.h"
#include "sim/process/preempt.h"
#include "sim/process/threads.h"
#include "sim/rl/corrections.h"
#include "sim/rl/registry.h"
#include "sim/jobs/run.h"
#include "store/path_checks.h"

namespace po = boost::program_options;

namespace moerl {

namespace {
// Shown under the usage line of --help: the choices that interact (docs/algorithms.md). The names
// come from the algorithm and correction tables (sim/rl/registry.h, sim/rl/corrections.h).
std::string run_notes() {
  std::string algorithms = "\n\nalgorithms (--set rl.algorithm=NAME; each is sim/rl/NAME.cpp, docs/algorithms.md):";
  for (const AlgorithmInfo& a : algorithm_registry()) {
    algorithms += std::string("\n  ") + a.name + ": " + a.doc;
    std::string keys;
    for (const AlgorithmParam& p : algorithm_loss_row(a).params) keys += std::string(keys.empty() ? "" : ", ") + "rl." + p.key;
    if (!keys.empty()) algorithms += " (keys: " + keys + ")";
  }
  std::string corrections, composing, forcing;
  for (const rl::CorrectionInfo& k : rl::correction_registry())
    if (!rl::correction_forced_by(k.kind))
      corrections += (corrections.empty() ? "" : " | ") + std::string(correction_name(k.kind));
  for (const AlgorithmInfo& a : algorithm_registry())
    (a.correction ? forcing : composing) += std::string(", ") + a.name;
  return algorithms + "\n\nrollout corrections (--set rl.correction=NAME; docs/algorithms.md, \"Rollout corrections\"):\n  " +
         corrections +
         ", with\n"
         "  rl.correction_cap, rl.correction_cap_low, rl.seq_mask_low, rl.seq_mask_high, rl.seq_k3_max.\n"
         "  They compose with rl.algorithm = " + composing.substr(2) +
         " (under gspo a token-level weight\n"
         "  weights each token of the GSPO-token form). They make no sense with rl.algorithm = " +
         forcing.substr(2) +
         ",\n"
         "  which forces its own band mask (rl.correction is ignored), nor with rl.old_logprobs = rollout\n"
         "  (bypass: pi_old = mu, so rho = 1 and every correction is the identity). Every run records\n"
         "  what each correction would do (rc_* metrics) and the collapse precursor flags (pre_*,\n"
         "  thresholds in [precursors]); docs/metrics.md.";
}
}  // namespace

int cmd_run(const Comms& comms, const std::vector<std::string>& args) {
  ScenarioArgs sa;
  RunOptions opt;
  opt.force = false;  // the command line's promise: existing results are never overwritten silently
  int ranks_per_run = 0;
  po::options_description desc("moerl run options");
  cli_add_scenario_args(&desc, &sa, "scenario", "scenario file (positional)");
  desc.add_options()
      ("out", po::value(&opt.out), "results file (default results/<scenario name>.h5)")
      ("base", po::value(&opt.base), "start from this checkpoint instead of the scenario's cached SFT base")
      ("cache", po::value(&opt.cache_dir)->default_value(kCliCacheDefault), kCliCacheDoc)
      ("resume", po::bool_switch(&opt.resume), "continue from the run's checkpoint (<out stem>.ckpt.h5); the scenario must be the run's")
      ("force", po::bool_switch(&opt.force), "overwrite existing results (with --resume: start over when the checkpoint is missing)")
      ("dump-tensors", po::bool_switch(&opt.dump_tensors), "write per-token RL tensors of each step's first mini-batch")
      ("max-steps", po::value(&opt.max_steps)->default_value(-1), "stop after this many steps of this invocation");
  cli_add_ranks_per_run(&desc, &ranks_per_run);
  po::variables_map vm;
  bool go = true;
  Scenario s;
  comms_checked(comms, [&] {  // bad options or scenario: one message, every rank exits
    go = cli_parse(comms, "run", std::string("SCENARIO [--set section.key=value]... [--out PATH] [--resume | --force]") + run_notes(),
                   desc, sa.positional, args, &vm);
    if (!go) return;
    if (opt.max_steps < -1 || opt.max_steps == 0)
      throw usage_error("run: --max-steps " + std::to_string(opt.max_steps) +
                        ": must be a positive number of steps (or -1, the default: all)");
    cli_check_ranks_per_run("run", vm, ranks_per_run);
    path_check_output_dir(opt.cache_dir, "--cache");
    s = Scenario::load(sa.path, sa.sets);
  });
  if (!go) return 0;
  const RankGrid grid(comms, ranks_per_run);
  if (!grid.active()) return 0;
  if (opt.out.empty())
    opt.out = "results/" + std::filesystem::path(sa.path).stem().string() + ".h5";
  grid.checked([&] {
    if (grid.is_root() && std::filesystem::path(opt.out).has_parent_path())
      std::filesystem::create_directories(std::filesystem::path(opt.out).parent_path());
  });
  opt.progress = grid.is_root();
  if (grid.is_root())
    std::printf("moerl run: %s → %s; %d rank%s, %s per rank\n", sa.path.c_str(), opt.out.c_str(), grid.size(),
                grid.size() == 1 ? "" : "s", threads_describe().c_str());
  opt.grid = &grid;
  opt.local_rank = comms.local_rank;
  const RunSummary sum = run_rl(s, opt);
  if (grid.is_root() && sum.status == "preempted")  // the run said what it wrote
    std::printf("moerl run: preempted after %lld steps (exit status %d; --resume continues) → %s\n",
                static_cast<long long>(sum.steps), kExitPreempted, opt.out.c_str());
  else if (grid.is_root())
    std::printf("moerl run: %s after %lld steps%s: final reward %.3f (last 10 steps), eval accuracy %.3f → %s\n",
                sum.status.c_str(), static_cast<long long>(sum.steps),
                sum.collapse_step >= 0 ? (" (collapse at step " + std::to_string(sum.collapse_step) + ")").c_str() : "",
                sum.final_reward, sum.final_eval, opt.out.c_str());
  // Stopped by a signal with everything written: not a failure, and the job may come back for it.
  return sum.status == "preempted" ? kExitPreempted : 0;
}

}  // namespace moerl
