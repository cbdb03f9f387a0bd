// run.cpp — see run.h. run_rl is a run in named phases, the way RlTrainer::step is a step: each
// phase is a method of RlRun, which holds what the phases share, and the methods are defined below
// in the order run_rl calls them, each with its helpers beside it:
//   1. setup: check — the scenario on these ranks, the backend and the engines' profiles;
//      claim_outputs — --out and its checkpoint writable, locked, and resumed or started;
//   2. base_policy — the cached SFT base (trained once per recipe) or --base;
//   3. build — the model on its ranks, the trainer, the results' attributes;
//   4. resume — the checkpoint's state; a run that had ended ends here;
//   5. loop — the steps: train, write, checkpoint, stop on a signal or the end;
//   6. finish — the summary.
// A phase that can fail on one rank runs checked (RankGrid::checked): it fails on every rank at
// once, one message, no rank left waiting in the next collective, no MPI_Abort.
#include "sim/jobs/run.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

#include "store/checkpoint.h"
#include "store/h5io.h"
#include "store/output_lock.h"
#include "store/path_checks.h"
#include "sim/process/backend_select.h"
#include "sim/comm/comms.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/io/run_identity.h"
#include "sim/process/preempt.h"
#include "sim/rl/registry.h"
#include "sim/rl/trainer.h"
#include "sim/jobs/sft.h"

namespace moerl {

namespace {
using Clock = std::chrono::steady_clock;

// One RL run: the state its phases share, and the phases.
class RlRun {
 public:
  RlRun(const Scenario& s, const RunOptions& opt);
  void check();
  void claim_outputs();
  void base_policy();
  void build();
  void resume();
  bool ended() const { return status_ != RunStatus::running; }
  void loop();
  RunSummary finish() const;

 private:
  // fn on every rank, checked (a failure on one rank fails all of them at once).
  void checked(const std::function<void()>& fn) const;
  // fn on the writer only (files), failing on every rank at once.
  void on_writer(const std::function<void()>& fn) const;
  void check_output_paths() const;
  bool can_resume() const;
  void results_attributes();
  std::string load_resumed_state();
  void stop_preempted();
  void train_step(int64_t end, bool rows_due);
  bool results_stale() const;
  bool checkpoint_due(bool last, int64_t end);
  void save_checkpoint(int64_t steps_done);
  std::pair<bool, bool> agree(bool stop, bool ckpt_due) const;
  void write_results() {
    on_writer([&] { results_.write(opt_.out); });
    last_results_time_ = Clock::now();
    results_written_ = true;
  }
  void print_progress() const;

  const Scenario& s_;
  const RunOptions& opt_;
  const RankGrid* const grid_;  // null: one process
  const bool verbose_;
  const bool writer_;       // the one rank that writes files
  const bool tty_;          // the progress line redraws itself on a terminal
  const std::string ckpt_;  // the checkpoint beside --out
  const int ranks_;         // the run's rank layout, recorded in both files
  ModelParallel par_;
  const Backend* backend_ = nullptr;
  RlSetup setup_;           // the engines' profiles (check), then the rest (build)
  bool resuming_ = false;   // resume asked for, and both files are this run's
  OutputLock lock_;         // one writer per output: held until the run returns
  std::string base_;        // the base checkpoint
  // On GPUs the dispatcher's all-to-all runs over NCCL (bootstrapped through the EP group's MPI
  // communicator); declared before the model, which keeps a pointer to it.
  std::unique_ptr<Collectives> nccl_ep_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<RlTrainer> trainer_;
  RunResults results_;
  int64_t start_ = 0;       // the first step this invocation runs
  int64_t step_ = 0;        // the next step
  int64_t ckpt_step_ = -1;  // the step the checkpoint on disk holds
  RunStatus status_ = RunStatus::running;
  Clock::time_point t0_, last_ckpt_time_, last_results_time_;
  bool results_written_ = false;  // by this invocation's loop
  bool stopped_before_start_ = false;  // preempted while the base policy trained: nothing built
};
}  // namespace

RunSummary run_rl(const Scenario& s, const RunOptions& opt) {
  RlRun run(s, opt);
  run.check();                   // 1. setup: the scenario on these ranks, the backend,
  run.claim_outputs();           //    the output files
  run.base_policy();             // 2. the cached SFT base (a stop signal ends the run here)
  if (!run.ended()) {
    run.build();                   // 3. the model, the trainer, the results
    run.resume();                  // 4. --resume: the checkpoint's state
  }
  if (!run.ended()) run.loop();  // 5. the steps
  return run.finish();           // 6. the summary
}

// ---- 1. setup ----------------------------------------------------------------------------------

void run_check_ranks(const Scenario& s, int ranks) {
  const int S = s.rl.prompts_per_step * s.rl.group_size;
  const auto need = [&](const std::string& what, int n) {
    if (n < ranks)
      throw std::invalid_argument(what + " = " + std::to_string(n) + ": fewer sequences than the " +
                                  std::to_string(ranks) + " ranks of the run (each rank needs at least one)");
  };
  need("rl.prompts_per_step * rl.group_size", S);
  need("rl.prompts_per_step * rl.group_size / rl.minibatches", S / std::max(s.rl.minibatches, 1));
  need("rl.eval_prompts", s.rl.eval_prompts);
  if (s.rl.drift_probes > 0) need("rl.drift_probes", s.rl.drift_probes);
  if (s.rl.shared_prefix_routing && ranks > 1 && s.rl.prompts_per_step % ranks != 0)
    throw std::invalid_argument("rl.shared_prefix_routing with " + std::to_string(ranks) +
                                " ranks: rl.prompts_per_step = " + std::to_string(s.rl.prompts_per_step) +
                                " must be a multiple of the ranks (a prompt's group stays on one rank)");
}

RlRun::RlRun(const Scenario& s, const RunOptions& opt)
    : s_(s), opt_(opt), grid_(opt.grid), verbose_(opt.progress), writer_(!grid_ || grid_->is_root()),
      tty_(isatty(STDOUT_FILENO)), ckpt_(run_checkpoint_path(opt.out)), ranks_(grid_ ? grid_->size() : 1),
      par_(grid_ ? grid_->model_parallel(0) : ModelParallel{}) {
  par_.reduce_chunks = s.run.deterministic ? s.run.reduce_chunks : 0;
}

void RlRun::checked(const std::function<void()>& fn) const {
  if (grid_) grid_->checked(fn);
  else fn();
}

void RlRun::on_writer(const std::function<void()>& fn) const {
  if (grid_) grid_->checked([&] { if (writer_) fn(); });
  else fn();
}

// Bad input fails on every rank at once: no rank left waiting.
void RlRun::check() {
  checked([&] {
    par_.validate(s_.model);
    run_check_ranks(s_, par_.dp_size());
    setup_.rollout = s_.profile(s_.engines.rollout);
    setup_.train = s_.profile(s_.engines.train);
    setup_.eval = s_.profile(s_.rl.eval_profile);
    backend_check_profiles(s_.run.backend, {&setup_.rollout, &setup_.train, &setup_.eval});
    backend_ = &backend_select(s_.run.backend, opt_.local_rank);
  });
}

std::string run_checkpoint_path(const std::string& out) {
  std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + ".ckpt.h5")).string();
}

// Before any work: a run is one thing — its results, its checkpoint and its scenario belong
// together, one process writes them, and output paths must be writable.
void RlRun::claim_outputs() {
  on_writer([&] {
    check_output_paths();
    // Taken before the files are looked at: whether results exist is then not a race.
    lock_ = OutputLock::take(opt_.out, "--out");
    resuming_ = can_resume();
  });
  if (grid_) resuming_ = grid_->broadcast(resuming_ ? "1" : "0") == "1";
}

void RlRun::check_output_paths() const {
  namespace fs = std::filesystem;
  const std::vector<std::pair<std::string, std::string>> inputs{{"scenario file", s_.source()},
                                                                {"base checkpoint", opt_.base}};
  path_check_output_file(opt_.out, "--out");
  path_check_output_file(ckpt_, "the checkpoint beside --out");
  path_check_not_an_input(opt_.out, "--out", inputs);
  path_check_not_an_input(ckpt_, "the checkpoint of --out", inputs);
  std::error_code ec;  // a directory that cannot be made is reported by h5_check_writable below
  if (fs::path(opt_.out).has_parent_path()) fs::create_directories(fs::path(opt_.out).parent_path(), ec);
  h5_check_writable(opt_.out);
  h5_check_writable(ckpt_);
}

// True when --resume continues the run in --out: both files are there, in this build's format, and
// are the run the scenario on these ranks continues (run_check_identity). False for a new run, or
// one --force starts over (a file of the two missing, an older format); refuses the rest.
bool RlRun::can_resume() const {
  const bool have_results = std::filesystem::exists(opt_.out), have_ckpt = std::filesystem::exists(ckpt_);
  if (!opt_.resume) {
    if (have_results && !opt_.force)
      throw std::invalid_argument(opt_.out + ": holds the results of an earlier run; --resume continues it, "
                                  "--force overwrites it, or choose another --out");
    return false;
  }
  if (have_results && !have_ckpt) {
    if (!opt_.force)
      throw std::invalid_argument(opt_.out + ": holds results but its checkpoint " + ckpt_ +
                                  " is missing, so the run cannot be resumed; --force starts it over");
    return false;
  }
  if (!have_results && have_ckpt) {
    if (!opt_.force)
      throw std::invalid_argument(ckpt_ + ": a checkpoint without its results file " + opt_.out +
                                  "; --force starts the run over");
    return false;
  }
  if (!have_results) return false;  // neither file: a new run
  const std::string older = run_resume_format_problem(opt_.out, ckpt_);
  if (!older.empty()) {
    if (!opt_.force)
      throw std::invalid_argument(older + "; moerl inspect and moerl report still read it, --resume --force starts the run over");
    return false;
  }
  run_check_identity(opt_.out, ckpt_, s_, ranks_);
  return true;
}

// ---- 2. base policy ----------------------------------------------------------------------------

// Trained and cached by the root alone; the others wait, sleeping. A stop signal on the root
// during the training ends the run here, "preempted" with nothing written (the base is not
// written half-trained; the run's files are not touched); a signal that reached only another rank
// is agreed on at the first step boundary.
void RlRun::base_policy() {
  base_ = opt_.base;
  if (!base_.empty()) return;
  std::string stopped;
  if (writer_) {
    try {
      base_ = run_base_checkpoint(s_, opt_.cache_dir, verbose_);
    } catch (const Preempted& e) {
      stopped = e.what();
    }
  }
  if (grid_) {
    grid_->wait();
    base_ = grid_->broadcast(stopped.empty() ? base_ : "");
    if (base_.empty() && stopped.empty()) stopped = "stopped by another rank's signal while the base policy trained";
  }
  if (stopped.empty()) return;
  status_ = RunStatus::preempted;
  stopped_before_start_ = true;
  if (verbose_)
    std::printf("%s: nothing written%s; run it again (--resume) to start it\n", stopped.c_str(),
                resuming_ ? " (the results and checkpoint hold what they held)" : "");
}

std::string run_base_checkpoint(const Scenario& s, const std::string& cache_dir, bool verbose) {
  std::filesystem::create_directories(cache_dir);
  const std::string path = run_base_path(s, cache_dir);
  // One writer per base: a second run of the same base waits for the first, then reads its file.
  const OutputLock lock = OutputLock::wait(path);
  if (std::filesystem::exists(path)) {
    if (verbose) std::printf("base policy: %s (cached)\n", path.c_str());
    return path;
  }
  SftReport rep;
  const auto model = run_train_base(s, -1, verbose, &rep);
  run_save_base(path, s, *model, rep);
  if (verbose) std::printf("base policy: %s\n", path.c_str());
  return path;
}

namespace {
// The effective scenario lines that make the base policy: the model, the task (less the keys of
// its reward, which the supervised warm-up never reads, so variants that differ only in their
// reward share one base), the warm-up and the seed.
std::string base_recipe(const Scenario& s) {
  std::istringstream in(s.effective_text());
  std::string line, out;
  while (std::getline(in, line)) {
    const bool reward_key = line.rfind("task.partial_credit", 0) == 0 || line.rfind("task.reward_on", 0) == 0;
    if ((line.rfind("model.", 0) == 0 || line.rfind("task.", 0) == 0 || line.rfind("sft.", 0) == 0 ||
         line.rfind("run.seed", 0) == 0) && !reward_key)
      out += line + "\n";
  }
  return out;
}

std::string fmt_eta(double s) {
  char buf[32];
  if (s < 90) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}
}  // namespace

std::string run_base_path(const Scenario& s, const std::string& cache_dir) {
  // The recipe has no comment lines: its scenario hash is the FNV-1a of the recipe itself.
  return (std::filesystem::path(cache_dir) / ("base-" + run_scenario_hash(base_recipe(s)) + ".h5")).string();
}

std::unique_ptr<Model> run_train_base(const Scenario& s, int sft_steps, bool verbose, SftReport* rep) {
  auto model = std::make_unique<Model>(s.model);
  params_init(&model->params(), s.model, s.run.seed);
  SftConfig sft = s.sft;
  if (sft_steps >= 0) sft.steps = sft_steps;
  const auto task = task_create(s.task);
  const bool tty = verbose && isatty(STDOUT_FILENO);
  // The warm-up takes a minute on the quickstart: a live line on a terminal, a line per tenth
  // of the steps otherwise (logs, pipes).
  const int every = std::max(1, sft.steps / 10);
  const auto t0 = Clock::now();
  *rep = sft_train(model.get(), sft, *task, s.run.seed, s.rl.eval_prompts, [&](int step, double loss) {
    if (preempt_requested() && step + 1 < sft.steps) {
      if (tty) std::printf("\n");
      throw Preempted(std::string("preempted by ") + (preempt_signal_name()[0] ? preempt_signal_name() : "a stop request") +
                      " while training the base policy (step " + std::to_string(step + 1) + " of " +
                      std::to_string(sft.steps) + ")");
    }
    if (!verbose) return;
    const bool line = !tty && ((step + 1) % every == 0) && step + 1 < sft.steps;
    if (!tty && !line) return;
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    const double eta = el / (step + 1) * (sft.steps - step - 1);
    std::printf("%ssft %d/%d  loss %.4f  eta %s%s", tty ? "\r" : "", step + 1, sft.steps, loss,
                fmt_eta(eta).c_str(), tty ? "   " : "\n");
    std::fflush(stdout);
  });
  if (verbose) {
    std::printf("%ssft: %d steps, final loss %.4f, greedy eval accuracy %.3f\n",
                tty && sft.steps > 0 ? "\n" : "", rep->steps, rep->final_loss, rep->eval_accuracy);
    if (rep->has_load)
      std::printf("sft: held-out expert load: CV %.3f, max/mean %.2f, %d dead (layer, expert) pairs of %d\n",
                  rep->load_cv, rep->load_max_over_mean, rep->dead_experts, s.model.n_layers * s.model.n_experts);
  }
  return model;
}

void run_save_base(const std::string& path, const Scenario& s, const Model& model, const SftReport& rep) {
  CheckpointExtras ex;
  ex.scalars.push_back({"step", 0});
  ex.scalars.push_back({"sft_steps", rep.steps});
  // run.seed is a uint64; the int64 scalar holds its bit pattern. A base has no run identity
  // beyond it: the cache shares it between every scenario with its model, task, sft and seed.
  ex.scalars.push_back({"seed", static_cast<int64_t>(s.run.seed)});
  if (s.model.expert_bias)
    ex.arrays.push_back({"router/expert_bias", const_cast<Model&>(model).expert_bias()});
  checkpoint_save(path, s.model, model.params(), &ex);
}

// ---- 3. build ----------------------------------------------------------------------------------

void RlRun::build() {
  nccl_ep_ = backend_ep_collectives(s_.run.backend, grid_, par_.ep);
  if (nccl_ep_) par_.ep = nccl_ep_.get();
  checked([&] {
    model_ = model_load_checkpoint(base_);
    model_check_matches(base_, model_->config(), s_.model);
    model_->set_parallel(par_);
    model_->set_backend(*backend_);
  });
  setup_.rl = s_.rl;
  setup_.task = s_.task;
  setup_.optim = s_.optim;
  setup_.seed = s_.run.seed;
  setup_.dump_tensors = opt_.dump_tensors;
  setup_.rl.resolve();
  trainer_ = std::make_unique<RlTrainer>(setup_, model_.get());
  results_attributes();
}

void RlRun::results_attributes() {
  results_.attrs["scenario"] = s_.effective_text();
  results_.attrs["scenario_hash"] = run_scenario_hash(s_.effective_text());
  algorithm_record_attrs(&results_, setup_.rl);
  results_.attrs["profile_rollout"] = setup_.rollout.name;
  results_.attrs["profile_train"] = setup_.train.name;
  results_.attrs["base_checkpoint"] = base_;
  results_.attrs["status"] = run_status_name(RunStatus::running);
  results_.int_attrs["seed"] = static_cast<int64_t>(s_.run.seed);
  results_.int_attrs["ranks"] = ranks_;
  results_.int_attrs["collapse_step"] = -1;
}

// ---- 4. resume ---------------------------------------------------------------------------------

void RlRun::resume() {
  if (!resuming_) return;
  std::string prev_status;
  // Every rank reads both files: a damaged one fails on every rank at once, before any step.
  checked([&] { prev_status = load_resumed_state(); });
  step_ = ckpt_step_ = start_;
  // A finished run stays finished: resuming it changes nothing.
  if (prev_status == "complete" || prev_status == "collapsed") {
    status_ = prev_status == "complete" ? RunStatus::complete : RunStatus::collapsed;
    return;
  }
  // Stopped between the last checkpoint and the final status (killed): the run had ended, so it
  // ends now, with the status the uninterrupted run wrote, instead of training on.
  const int64_t cs = results_.int_attrs["collapse_step"];
  if (start_ >= s_.rl.steps || (cs >= 0 && !s_.rl.continue_after_collapse)) {
    status_ = cs >= 0 ? RunStatus::collapsed : RunStatus::complete;
    results_.attrs["status"] = run_status_name(status_);
    write_results();
    return;
  }
  if (verbose_)
    std::printf("resuming %s at step %lld from %s\n", opt_.out.c_str(), static_cast<long long>(start_), ckpt_.c_str());
}

// The checkpoint's parameters, trainer state and step, and the results' rows up to it; returns
// the status the results file holds.
std::string RlRun::load_resumed_state() {
  ModelConfig cfg;
  ParamStore params;
  CheckpointExtras ex;
  checkpoint_load(ckpt_, &cfg, &params, &ex);
  model_check_matches(ckpt_, cfg, s_.model);
  model_->params().data() = params.data();
  trainer_->load_state(ex);
  for (auto& [name, v] : ex.scalars)
    if (name == "step") start_ = v;
  results_.load(opt_.out, start_);
  const H5File prev = H5File::open(opt_.out);
  results_.int_attrs["collapse_step"] = prev.attr_int("/", "collapse_step");
  // set by every step (sim/rl/trainer.cpp): a run resumed after its last step takes none, and its
  // final write must still carry it (the fault suite's kill between the last checkpoint and the
  // final status found the finished file without it)
  if (prev.has_attr("/", "position_bucket_width"))
    results_.int_attrs["position_bucket_width"] = prev.attr_int("/", "position_bucket_width");
  return prev.attr_string("/", "status");
}

// ---- 5. loop -----------------------------------------------------------------------------------

void RlRun::loop() {
  t0_ = last_ckpt_time_ = last_results_time_ = Clock::now();
  const int64_t end = opt_.max_steps >= 0 ? std::min<int64_t>(s_.rl.steps, start_ + opt_.max_steps) : s_.rl.steps;
  for (; step_ < end; ++step_) {
    const auto [stop, rows_due] = agree(preempt_requested(), results_stale());
    if (stop) {
      stop_preempted();
      break;
    }
    train_step(end, rows_due);
    if (opt_.on_step) opt_.on_step();
    if (verbose_) print_progress();
    if (status_ != RunStatus::running) {
      ++step_;
      break;
    }
  }
  if (verbose_ && tty_ && status_ != RunStatus::preempted) std::printf("\n");
}

// At a step boundary, the run's ranks agree on [stop: a signal reached one of them (sim/process/preempt.h),
// due: the root's clock says the results (step start) or the checkpoint (after the step, when
// nothing else made it due) are due]. One allreduce per step, a second only for the checkpoint.
std::pair<bool, bool> RlRun::agree(bool stop, bool ckpt_due) const {
  std::vector<int> v{stop ? 1 : 0, writer_ && ckpt_due ? 1 : 0};
  if (grid_) grid_->max_ints(&v);
  return {v[0] != 0, v[1] != 0};
}

// Stopped before step_: everything up to it is on disk, the results say "preempted".
void RlRun::stop_preempted() {
  status_ = RunStatus::preempted;
  if (step_ > start_) {
    if (ckpt_step_ != step_) save_checkpoint(step_);
    results_.attrs["status"] = run_status_name(status_);
    write_results();
  }
  // The message names only what this invocation wrote.
  const std::string what = step_ > start_ ? "checkpoint and results written"
                            : resuming_   ? "nothing new written (the files hold step " + std::to_string(start_) + ")"
                                          : "nothing written";
  if (verbose_)
    std::printf("%spreempted by %s after step %lld: %s; --resume continues\n", tty_ ? "\n" : "",
                preempt_signal_name()[0] ? preempt_signal_name() : "another rank's signal", static_cast<long long>(step_),
                what.c_str());
}

// The results file's rows are older than results_seconds, or this invocation has written none yet
// (its first step goes to disk at once), or every step is written.
bool RlRun::results_stale() const {
  return opt_.results_seconds <= 0 || !results_written_ ||
         std::chrono::duration<double>(Clock::now() - last_results_time_).count() >= opt_.results_seconds;
}

void RlRun::train_step(int64_t end, bool rows_due) {
  trainer_->step(step_, &results_);
  const bool collapsed = trainer_->check_collapse(results_);
  if (collapsed && results_.int_attrs["collapse_step"] < 0) results_.int_attrs["collapse_step"] = step_;
  const bool last = step_ + 1 == s_.rl.steps;
  if (collapsed && !s_.rl.continue_after_collapse) status_ = RunStatus::collapsed;
  else if (last) status_ = collapsed || results_.int_attrs["collapse_step"] >= 0 ? RunStatus::collapsed : RunStatus::complete;
  // The step's rows, then the checkpoint, and only then the final status: a run whose last
  // write fails is never marked complete.
  results_.attrs["status"] = run_status_name(RunStatus::running);
  const bool ckpt = checkpoint_due(last, end);
  if (ckpt || rows_due) write_results();  // (a change of status always makes the checkpoint due)
  if (ckpt) {
    save_checkpoint(step_ + 1);
    ckpt_step_ = step_ + 1;
    last_ckpt_time_ = Clock::now();
  }
  if (status_ != RunStatus::running) {
    results_.attrs["status"] = run_status_name(status_);
    write_results();
  }
}

// After step_: every rl.checkpoint_every steps, at the run's end, at this invocation's end, and
// when the ranks agree that checkpoint_seconds have passed (asked only when nothing else is due).
bool RlRun::checkpoint_due(bool last, int64_t end) {
  if ((s_.rl.checkpoint_every > 0 && (step_ + 1) % s_.rl.checkpoint_every == 0) || last ||
      status_ != RunStatus::running || step_ + 1 == end)
    return true;
  if (opt_.checkpoint_seconds <= 0) return false;
  const bool due = std::chrono::duration<double>(Clock::now() - last_ckpt_time_).count() >= opt_.checkpoint_seconds;
  return agree(false, due).second;
}

void RlRun::save_checkpoint(int64_t steps_done) {
  CheckpointExtras ex;
  trainer_->save_state(&ex);
  run_identity_scalars(s_, ranks_, steps_done, &ex);
  ParamStore params = static_cast<const Model&>(*model_).params();  // a read: the device copy stays current
  if (par_.ep_size() > 1) {  // the owners' expert slices first: the file equals a 1-rank one
    gather_experts(&params.data(), params, s_.model.n_experts, *par_.ep);
    for (auto& [name, v] : ex.arrays)
      if (name == "optim/m" || name == "optim/v" || name.rfind("stale/params_", 0) == 0)
        gather_experts(&v, params, s_.model.n_experts, *par_.ep);
  }
  on_writer([&] { checkpoint_save(ckpt_, s_.model, params, &ex); });
}

void RlRun::print_progress() const {
  const double el = std::chrono::duration<double>(Clock::now() - t0_).count();
  const double eta = el / static_cast<double>(step_ + 1 - start_) * static_cast<double>(s_.rl.steps - step_ - 1);
  const double ev = results_.last("eval_accuracy");
  std::printf("%sstep %lld/%d  reward %.3f  kl %.2e  flip %.2f%%  clip %.3f%s  eta %s%s",
              tty_ ? "\r" : "", static_cast<long long>(step_ + 1), s_.rl.steps,
              results_.last("reward_mean"), results_.last("kl_rollout_train"),
              100.0 * results_.last("flip_rate_mean"), results_.last("clip_frac"),
              std::isnan(ev) ? "" : ("  eval " + std::to_string(ev).substr(0, 5)).c_str(),
              fmt_eta(eta).c_str(), tty_ ? "   " : "\n");
  std::fflush(stdout);
}

// ---- 6. finish ---------------------------------------------------------------------------------

RunSummary RlRun::finish() const {
  RunSummary sum;
  sum.status = run_status_name(status_);
  sum.steps = step_;
  if (stopped_before_start_) return sum;  // nothing built, nothing written
  const int64_t c = results_.int_attrs.at("collapse_step");  // the file's 0-based index
  sum.collapse_step = c >= 0 ? c + 1 : -1;
  sum.final_reward = results_.final_reward();
  sum.final_eval = results_.last("eval_accuracy");
  return sum;
}

}  // namespace moerl
