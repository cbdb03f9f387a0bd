// cmd_sft.cpp — `moerl sft SCENARIO [--steps N] --out CKPT`: the base checkpoint RL starts from:
// a model initialised with run.seed, then N supervised warm-up steps on the scenario's task
// (sim/jobs/sft.h; N defaults to the scenario's sft.steps, 0 writes the freshly initialised model).
#include <cstdio>

#include "sim/cli/cli.h"
#include "sim/process/preempt.h"
#include "store/h5io.h"
#include "store/output_lock.h"
#include "store/path_checks.h"
#include "sim/scenario/scenario.h"
#include "sim/jobs/run.h"

namespace po = boost::program_options;

namespace moerl {

int cmd_sft(const Comms& comms, const std::vector<std::string>& args) {
  ScenarioArgs sa;
  std::string out;
  int steps = -1;
  bool force = false;
  po::options_description desc("moerl sft options");
  cli_add_scenario_args(&desc, &sa, "scenario", "scenario file (positional)");
  desc.add_options()
      ("steps", po::value(&steps), "supervised warm-up steps (default: the scenario's sft.steps; 0 = initialise only)")
      ("out", po::value(&out)->required(), "checkpoint to write (HDF5)")
      ("force", po::bool_switch(&force), "overwrite an existing --out (without it, an existing file is refused)");
  po::variables_map vm;
  bool go = true;
  Scenario s;
  OutputLock lock;  // one writer per output, until the checkpoint is written
  comms_checked(comms, [&] {  // bad options or scenario: one message, every rank exits
    go = cli_parse(comms, "sft", "SCENARIO [--steps N] --out CKPT.h5 [--force] [--set section.key=value]...",
                   desc, sa.positional, args, &vm);
    if (!go) return;
    if (vm.count("steps") && steps < 0)
      throw usage_error("sft: --steps " + std::to_string(steps) + ": must be >= 0");
    s = Scenario::load(sa.path, sa.sets);
    path_check_output_file(out, "--out");
    path_check_not_an_input(out, "--out", {{"scenario file", sa.path}});
    path_check_no_overwrite(out, "--out", force);
    if (comms.is_root) {  // before the warm-up, not after it
      h5_check_writable(out);
      lock = OutputLock::take(out, "--out");
    }
  });
  if (!go) return 0;
  SftReport rep;
  std::unique_ptr<Model> model;
  std::string stopped;  // a stop signal: nothing written, exit status 75 on every rank
  try {
    model = run_train_base(s, steps, comms.is_root, &rep);
  } catch (const Preempted& e) {
    stopped = e.what();
  }
  // Every rank trains the same base alone; they agree on a signal that reached any of them.
  if (comms_agree_exit(comms, stopped.empty() ? 0 : 1) != 0) {
    if (comms.is_root)
      std::printf("moerl sft: %s: nothing written\n", stopped.empty() ? "stopped by another rank's signal" : stopped.c_str());
    return kExitPreempted;
  }
  if (comms.is_root) {
    run_save_base(out, s, *model, rep);
    std::printf("moerl sft: wrote %s: %lld parameters (%s, %d layers, %s), seed %llu, %d steps\n",
                out.c_str(), static_cast<long long>(model->params().size()), sa.path.c_str(),
                s.model.n_layers,
                s.model.is_moe() ? (std::to_string(s.model.n_experts) + " experts top-" +
                                    std::to_string(s.model.top_k)).c_str()
                                 : "dense",
                static_cast<unsigned long long>(s.run.seed), rep.steps);
  }
  return 0;
}

}  // namespace moerl
