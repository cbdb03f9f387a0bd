// rl_fixture.h — a tiny scenario for end-to-end RL tests (seconds, not minutes).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/test_device.h"
#include "models/model.h"
#include "models/params.h"
#include "store/h5io.h"
#include "sim/jobs/run.h"
#include "sim/rl/trainer.h"
#include "sim/scenario/scenario.h"

namespace moerl::test {

inline const char* kTinyScenario = R"(
[run]
seed = 3
[model]
vocab_size = 12
d_model = 16
n_layers = 2
n_heads = 2
n_experts = 4
top_k = 2
d_ff = 16
max_seq_len = 16
init_std = 0.3
[task]
name = sort
length = 4
base = 8
[sft]
steps = 0
[rl]
steps = 3
prompts_per_step = 4
group_size = 4
minibatches = 2
eval_every = 0
eval_prompts = 16
[optim]
lr = 1e-3
)";

// A fresh scratch directory under the system's temporary directory, named by the test and the
// process (removed first if a previous run left it).
inline std::string tmp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("moerl_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline Scenario tiny_scenario(const std::vector<std::string>& sets = {}) {
  return Scenario::parse(kTinyScenario, "<tiny>", sets);
}

// The trainer's setup of a scenario, as a run builds it (sim/jobs/run.cpp): the engines' profiles
// by name, the run's seed, the RL options resolved.
inline RlSetup rl_setup(const Scenario& s) {
  RlSetup u;
  u.rl = s.rl;
  u.task = s.task;
  u.optim = s.optim;
  u.rollout = s.profile(s.engines.rollout);
  u.train = s.profile(s.engines.train);
  u.eval = s.profile(s.rl.eval_profile);
  u.seed = s.run.seed;
  u.rl.resolve();
  return u;
}

// One scenario trained twice from the same initialisation, on the CPU backend (cpu, t_cpu) and on
// the test device (on, t_dev, whose transfer log is dev's), for tests that hold the device to the
// CPU's bits.
struct TwinTrainers {
  TestDeviceBackend dev;  // declared first: it outlives the model whose memory it holds
  Model cpu, on;
  std::unique_ptr<RlTrainer> t_cpu, t_dev;
  TwinTrainers(const Scenario& s, uint64_t init_seed) : cpu(s.model), on(s.model) {
    params_init(&cpu.params(), s.model, init_seed);
    params_init(&on.params(), s.model, init_seed);
    on.set_backend(dev);
    const RlSetup setup = rl_setup(s);
    t_cpu = std::make_unique<RlTrainer>(setup, &cpu);
    t_dev = std::make_unique<RlTrainer>(setup, &on);
  }
  void step(int64_t step, RunResults* rc, RunResults* rd) {
    t_cpu->step(step, rc);
    t_dev->step(step, rd);
  }
};

// The values of metrics/<name> of a run's results file, flattened.
inline std::vector<double> run_metric(const std::string& file, const std::string& name) {
  const H5File f = H5File::open(file);
  const auto shape = f.shape("metrics/" + name);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  f.read("metrics/" + name, shape, v.data());
  return v;
}

// What run_quiet changes of a plain run.
struct QuietRun {
  bool dump = false, resume = false;
  int max_steps = -1;
};
// One run of `s` into `out` without progress lines, base policies cached in `dir`/cache.
inline RunSummary run_quiet(const Scenario& s, const std::string& out, const std::string& dir, QuietRun q = {}) {
  RunOptions o;
  o.out = out;
  o.cache_dir = dir + "/cache";
  o.progress = false;
  o.dump_tensors = q.dump;
  o.resume = q.resume;
  o.max_steps = q.max_steps;
  return run_rl(s, o);
}

}  // namespace moerl::test
