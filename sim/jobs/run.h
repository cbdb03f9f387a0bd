// run.h — one RL run from a scenario: base policy (cached SFT), the RL loop with progress line,
// results file, checkpoints and resume. Used by `moerl run` and by each run of a sweep. The run's
// phases, in the order they run: sim/jobs/run.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <memory>
#include <vector>

#include "models/model.h"
#include "sim/io/run_identity.h"  // run_scenario_hash, run_scenario_diff: what makes two files one run
#include "sim/scenario/scenario.h"
#include "sim/jobs/sft.h"

namespace moerl {

class RankGrid;

struct RunOptions {
  std::string out;             // results file (HDF5); the checkpoint is <out stem>.ckpt.h5
  std::string base;            // base checkpoint to start from ("" = cached SFT of the scenario)
  std::string cache_dir = "results/cache";  // where base checkpoints are cached by content hash
  bool resume = false;         // continue from the run's checkpoint when there is one
  // Overwrite existing results (without it, `out` holding results is an error unless resuming),
  // and with `resume`, start over when results exist without their checkpoint. On for library
  // callers that manage their own files (tests, the sweep, which checks its directory itself);
  // `moerl run` sets it from --force, off by default.
  bool force = true;
  bool dump_tensors = false;
  bool progress = true;        // print the live progress line (root rank only)
  int max_steps = -1;          // stop after this many steps in this invocation (-1 = all)
  // Also checkpoint after a step when this many seconds have passed since the last checkpoint
  // (0 = only rl.checkpoint_every and the end): bounds the work a SIGKILL or a lost node costs
  // without changing the scenario. The root's clock decides; the run's ranks agree on it.
  double checkpoint_seconds = 0.0;
  // The results file is rewritten whole (store/h5io.h: sealed, atomic), so writing it after every
  // step cost time growing with the step: 5 % of a 400-step collapse-grid run, and quadratic in
  // the run's length. It is written after an invocation's first step, then when this many seconds
  // have passed since its last write (the root's clock; the ranks agree on it in the step's one
  // allreduce), before every checkpoint and at every change of status, so its rows are never
  // older than this on disk and always cover the checkpoint. 0 = after every step.
  double results_seconds = 2.0;
  std::function<void()> on_step;  // called after every step (a sweep's rank 0 serves other groups here)
  // The ranks of this run (sim/comm/comms.h): experts over its EP group, sequences over its DP group;
  // only its root prints and writes. Null: one process.
  const RankGrid* grid = nullptr;
  int local_rank = 0;  // this rank's index on its node: its GPU with run.backend = cuda
};

struct RunSummary {
  std::string status;          // complete | collapsed | running (stopped by max_steps) | preempted (sim/process/preempt.h)
  int64_t steps = 0;
  int64_t collapse_step = -1;  // the step that collapsed, counted from 1 as steps are (-1: none)
  double final_reward = 0.0, final_eval = 0.0;
};

// The base policy of a scenario: initialised with run.seed, then sft_steps supervised warm-up
// steps (the scenario's sft.steps when negative). Prints progress when verbose.
std::unique_ptr<Model> run_train_base(const Scenario& s, int sft_steps, bool verbose, SftReport* rep);
// Writes a base policy as a checkpoint (sft_steps and seed as scalars, the expert bias if used).
void run_save_base(const std::string& path, const Scenario& s, const Model& model, const SftReport& rep);

// The base checkpoint of a scenario: <cache_dir>/base-<hash>.h5, where the hash covers exactly
// what makes it (model, task, sft sections and run.seed). Trained once, reused by every run.
std::string run_base_checkpoint(const Scenario& s, const std::string& cache_dir, bool verbose);
// The path run_base_checkpoint uses for a scenario, without training anything.
std::string run_base_path(const Scenario& s, const std::string& cache_dir);

RunSummary run_rl(const Scenario& s, const RunOptions& opt);

// Refuses a scenario that cannot be split over `ranks` ranks (every rank needs sequences in every
// batch it runs: the step's, a mini-batch's, the evaluation's, the drift probe's), naming the key.
// run_rl checks it first; `moerl sweep` (--dry-run included) checks every run of a grid with its
// --ranks-per-run before anything runs. Throws std::invalid_argument.
void run_check_ranks(const Scenario& s, int ranks);

// Path of the checkpoint that goes with a results file.
std::string run_checkpoint_path(const std::string& out);

}  // namespace moerl
