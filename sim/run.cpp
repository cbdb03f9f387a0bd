// run.cpp — see run.h.
#include "sim/run.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "store/checkpoint.h"
#include "store/h5io.h"
#include "store/output_lock.h"
#include "store/path_checks.h"
#include "sim/backend_select.h"
#include "sim/comm/comms.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/io/run_identity.h"
#include "sim/preempt.h"
#include "sim/rl/registry.h"
#include "sim/rl/trainer.h"
#include "sim/sft.h"

namespace moerl {

namespace {
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
  return h;
}

// The effective scenario lines that make the base policy.
std::string base_recipe(const Scenario& s) {
  std::istringstream in(s.effective_text());
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("model.", 0) == 0 || line.rfind("task.", 0) == 0 || line.rfind("sft.", 0) == 0 ||
        line.rfind("run.seed", 0) == 0)
      out += line + "\n";
  return out;
}

std::string fmt_eta(double s) {
  char buf[32];
  if (s < 90) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}
}  // namespace

namespace {
std::string scenario_body(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') out += line + "\n";
  return out;
}

std::map<std::string, std::string> scenario_keys(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(scenario_body(text));
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) kv[line] = "";
    else kv[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return kv;
}
}  // namespace

std::vector<std::string> run_scenario_diff(const std::string& before, const std::string& now) {
  const auto a = scenario_keys(before), b = scenario_keys(now);
  std::vector<std::string> out;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) out.push_back(k + ": " + v + " → (unset)");
    else if (it->second != v) out.push_back(k + ": " + v + " → " + it->second);
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(k + ": (unset) → " + v);
  return out;
}

std::string run_scenario_hash(const std::string& effective_text) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(scenario_body(effective_text))));
  return buf;
}

std::string run_checkpoint_path(const std::string& out) {
  std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + ".ckpt.h5")).string();
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
  const auto t0 = std::chrono::steady_clock::now();
  *rep = sft_train(model.get(), sft, *task, s.run.seed, s.rl.eval_prompts, [&](int step, double loss) {
    if (!verbose) return;
    const bool line = !tty && ((step + 1) % every == 0) && step + 1 < sft.steps;
    if (!tty && !line) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double eta = el / (step + 1) * (sft.steps - step - 1);
    std::printf("%ssft %d/%d  loss %.4f  eta %s%s", tty ? "\r" : "", step + 1, sft.steps, loss,
                fmt_eta(eta).c_str(), tty ? "   " : "\n");
    std::fflush(stdout);
  });
  if (verbose)
    std::printf("%ssft: %d steps, final loss %.4f, greedy eval accuracy %.3f\n",
                tty && sft.steps > 0 ? "\n" : "", rep->steps, rep->final_loss, rep->eval_accuracy);
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

std::string run_base_path(const Scenario& s, const std::string& cache_dir) {
  char name[64];
  std::snprintf(name, sizeof name, "base-%016llx.h5", static_cast<unsigned long long>(fnv1a(base_recipe(s))));
  return (std::filesystem::path(cache_dir) / name).string();
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
// Rank counts a run cannot be split over: every rank needs sequences in every batch it runs.
void check_ranks(const Scenario& s, int ranks) {
  const int S = s.rl.prompts_per_step * s.rl.group_size;
  const auto need = [&](const std::string& what, int n) {
    if (n < ranks)
      throw std::invalid_argument(what + " = " + std::to_string(n) + ": fewer sequences than the " +
                                  std::to_string(ranks) + " ranks of the run (each rank needs at least one)");
  };
  need("rl.prompts_per_step * rl.group_size", S);
  need("rl.prompts_per_step * rl.group_size / rl.minibatches", S / std::max(s.rl.minibatches, 1));
  need("rl.eval_prompts", s.rl.eval_prompts);
  if (s.rl.shared_prefix_routing && ranks > 1 && s.rl.prompts_per_step % ranks != 0)
    throw std::invalid_argument("rl.shared_prefix_routing with " + std::to_string(ranks) +
                                " ranks: rl.prompts_per_step = " + std::to_string(s.rl.prompts_per_step) +
                                " must be a multiple of the ranks (a prompt's group stays on one rank)");
}
}  // namespace

RunSummary run_rl(const Scenario& s, const RunOptions& opt) {
  const bool verbose = opt.progress;
  const RankGrid* grid = opt.grid;
  const bool writer = !grid || grid->is_root();  // the one rank that writes files
  ModelParallel par = grid ? grid->model_parallel(0) : ModelParallel{};
  par.reduce_chunks = s.run.deterministic ? s.run.reduce_chunks : 0;
  const Backend* backend = nullptr;
  auto check = [&] {
    par.validate(s.model);
    check_ranks(s, par.dp_size());
    const NumericsProfile rollout = s.profile(s.engines.rollout), train = s.profile(s.engines.train),
                          eval = s.profile(s.rl.eval_profile);
    backend_check_profiles(s.run.backend, {&rollout, &train, &eval});
    backend = &backend_select(s.run.backend, opt.local_rank);
  };
  if (grid) grid->checked(check);  // bad input fails on every rank at once: no rank left waiting
  else check();
  // A phase only the writer does (files), failing on every rank at once: one message, no rank left
  // waiting in the next collective, no MPI_Abort.
  const auto on_writer = [&](const std::function<void()>& fn) {
    if (grid) grid->checked([&] { if (writer) fn(); });
    else fn();
  };
  const std::string ckpt = run_checkpoint_path(opt.out);
  const int ranks = grid ? grid->size() : 1;  // the run's rank layout, recorded in both files
  bool start_over = false;  // resume asked for, but there is nothing to resume
  bool resuming = false;    // resume asked for, and both files are there
  OutputLock lock;          // one writer per output: held until the run returns
  // Before any work: a run is one thing — its results, its checkpoint and its scenario belong
  // together, one process writes them, and output paths must be writable.
  on_writer([&] {
    namespace fs = std::filesystem;
    path_check_output_file(opt.out, "--out");
    path_check_output_file(ckpt, "the checkpoint beside --out");
    path_check_not_an_input(opt.out, "--out", {{"scenario file", s.source()}, {"base checkpoint", opt.base}});
    path_check_not_an_input(ckpt, "the checkpoint of --out", {{"scenario file", s.source()}, {"base checkpoint", opt.base}});
    std::error_code ec;  // a directory that cannot be made is reported by h5_check_writable below
    if (fs::path(opt.out).has_parent_path()) fs::create_directories(fs::path(opt.out).parent_path(), ec);
    h5_check_writable(opt.out);
    h5_check_writable(ckpt);
    // Taken before the files are looked at: whether results exist is then not a race.
    lock = OutputLock::take(opt.out, "--out");
    const bool have_results = fs::exists(opt.out), have_ckpt = fs::exists(ckpt);
    if (!opt.resume && have_results && !opt.force)
      throw std::invalid_argument(opt.out + ": holds the results of an earlier run; --resume continues it, "
                                  "--force overwrites it, or choose another --out");
    if (opt.resume && have_results && !have_ckpt) {
      if (!opt.force)
        throw std::invalid_argument(opt.out + ": holds results but its checkpoint " + ckpt +
                                    " is missing, so the run cannot be resumed; --force starts it over");
      start_over = true;
    }
    if (opt.resume && !have_results && have_ckpt) {
      if (!opt.force)
        throw std::invalid_argument(ckpt + ": a checkpoint without its results file " + opt.out +
                                    "; --force starts the run over");
      start_over = true;
    }
    if (opt.resume && have_results && have_ckpt && !start_over) {
      const std::string older = run_resume_format_problem(opt.out, ckpt);
      if (!older.empty()) {
        if (!opt.force)
          throw std::invalid_argument(older + "; moerl inspect and moerl report still read it, --resume --force starts the run over");
        start_over = true;
      }
    }
    if (opt.resume && have_results && have_ckpt && !start_over) {
      const H5File prev = H5File::open(opt.out);
      const std::vector<std::string> d = run_scenario_diff(prev.attr_string("/", "scenario"), s.effective_text());
      if (!d.empty()) {
        std::string msg = opt.out + ": --resume with a different scenario (" + std::to_string(d.size()) +
                          " key" + (d.size() == 1 ? "" : "s") + " differ: ";
        for (size_t i = 0; i < d.size() && i < 8; ++i) msg += (i ? "; " : "") + d[i];
        if (d.size() > 8) msg += "; …";
        throw std::invalid_argument(msg + "); a resumed run must continue the run it started as");
      }
      run_check_identity(opt.out, ckpt, s, ranks);
      resuming = true;
    }
  });
  if (grid) {
    start_over = grid->broadcast(start_over ? "1" : "0") == "1";
    resuming = grid->broadcast(resuming ? "1" : "0") == "1";
  }
  std::string base = opt.base;
  if (base.empty()) {  // trained and cached by the root alone; the others wait, sleeping
    if (writer) base = run_base_checkpoint(s, opt.cache_dir, verbose);
    if (grid) {
      grid->wait();
      base = grid->broadcast(base);
    }
  }
  // On GPUs the dispatcher's all-to-all runs over NCCL (bootstrapped through the EP group's MPI
  // communicator); declared before the model, which keeps a pointer to it.
  const std::unique_ptr<Collectives> nccl_ep = backend_ep_collectives(s.run.backend, grid, par.ep);
  if (nccl_ep) par.ep = nccl_ep.get();
  std::unique_ptr<Model> model;
  auto load = [&] {
    model = model_load_checkpoint(base);
    model_check_matches(base, model->config(), s.model);
    model->set_parallel(par);
    model->set_backend(*backend);
  };
  if (grid) grid->checked(load);
  else load();

  RlSetup setup;
  setup.rl = s.rl;
  setup.task = s.task;
  setup.optim = s.optim;
  setup.rollout = s.profile(s.engines.rollout);
  setup.train = s.profile(s.engines.train);
  setup.eval = s.profile(s.rl.eval_profile);
  setup.seed = s.run.seed;
  setup.dump_tensors = opt.dump_tensors;
  setup.rl.resolve();
  RlTrainer trainer(setup, model.get());

  RunResults results;
  results.attrs["scenario"] = s.effective_text();
  results.attrs["scenario_hash"] = run_scenario_hash(s.effective_text());
  algorithm_record_attrs(&results, setup.rl);
  results.attrs["profile_rollout"] = setup.rollout.name;
  results.attrs["profile_train"] = setup.train.name;
  results.attrs["base_checkpoint"] = base;
  results.attrs["status"] = run_status_name(RunStatus::running);
  results.int_attrs["seed"] = static_cast<int64_t>(s.run.seed);
  results.int_attrs["ranks"] = ranks;
  results.int_attrs["collapse_step"] = -1;

  int64_t start = 0;
  if (resuming) {
    std::string prev_status;
    // Every rank reads both files: a damaged one fails on every rank at once, before any step.
    auto resume_load = [&] {
      ModelConfig cfg;
      ParamStore params;
      CheckpointExtras ex;
      checkpoint_load(ckpt, &cfg, &params, &ex);
      model_check_matches(ckpt, cfg, s.model);
      model->params().data() = params.data();
      trainer.load_state(ex);
      for (auto& [name, v] : ex.scalars)
        if (name == "step") start = v;
      results.load(opt.out, start);
      const H5File prev = H5File::open(opt.out);
      results.int_attrs["collapse_step"] = prev.attr_int("/", "collapse_step");
      prev_status = prev.attr_string("/", "status");
    };
    if (grid) grid->checked(resume_load);
    else resume_load();
    {  // a finished run stays finished: resuming it changes nothing
      const std::string& st = prev_status;
      if (st == "complete" || st == "collapsed") {
        RunSummary done;
        done.status = st;
        done.steps = start;
        done.collapse_step = results.int_attrs["collapse_step"];
        done.final_reward = results.final_reward();
        done.final_eval = results.last("eval_accuracy");
        return done;
      }
      // Stopped between the last checkpoint and the final status (killed): the run had ended, so
      // it ends now, with the status the uninterrupted run wrote, instead of training on.
      const int64_t cs = results.int_attrs["collapse_step"];
      if (start >= s.rl.steps || (cs >= 0 && !s.rl.continue_after_collapse)) {
        results.attrs["status"] = run_status_name(cs >= 0 ? RunStatus::collapsed : RunStatus::complete);
        on_writer([&] { results.write(opt.out); });
        RunSummary done;
        done.status = results.attrs["status"];
        done.steps = start;
        done.collapse_step = cs;
        done.final_reward = results.final_reward();
        done.final_eval = results.last("eval_accuracy");
        return done;
      }
    }
    if (verbose) std::printf("resuming %s at step %lld from %s\n", opt.out.c_str(), static_cast<long long>(start), ckpt.c_str());
  }
  auto save_checkpoint = [&](int64_t steps_done) {
    CheckpointExtras ex;
    trainer.save_state(&ex);
    run_identity_scalars(s, ranks, steps_done, &ex);
    ParamStore params = model->params();
    if (par.ep_size() > 1) {  // the owners' expert slices first: the file equals a 1-rank one
      gather_experts(&params.data(), params, s.model.n_experts, *par.ep);
      for (auto& [name, v] : ex.arrays)
        if (name == "optim/m" || name == "optim/v" || name.rfind("stale/params_", 0) == 0)
          gather_experts(&v, params, s.model.n_experts, *par.ep);
    }
    on_writer([&] { checkpoint_save(ckpt, s.model, params, &ex); });
  };

  RunSummary sum;
  const bool tty = isatty(STDOUT_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  auto last_ckpt_time = t0;
  int64_t step = start;
  int64_t ckpt_step = resuming ? start : -1;  // the step the checkpoint on disk holds
  RunStatus status = RunStatus::running;
  const int64_t end = opt.max_steps >= 0 ? std::min<int64_t>(s.rl.steps, start + opt.max_steps) : s.rl.steps;
  // At a step boundary, the run's ranks agree on [stop: a signal reached one of them (sim/preempt.h),
  // checkpoint now: the root's clock says checkpoint_seconds have passed]. One allreduce per step.
  const auto agree = [&](bool stop, bool ckpt_due) {
    std::vector<int> v{stop ? 1 : 0, writer && ckpt_due ? 1 : 0};
    if (grid) grid->max_ints(&v);
    return std::pair<bool, bool>(v[0] != 0, v[1] != 0);
  };
  for (; step < end; ++step) {
    if (agree(preempt_requested(), false).first) {
      // Stopped before this step: everything up to it is on disk, the results say "preempted".
      status = RunStatus::preempted;
      if (step > start) {
        if (ckpt_step != step) save_checkpoint(step);
        results.attrs["status"] = run_status_name(status);
        on_writer([&] { results.write(opt.out); });
      }
      if (verbose)
        std::printf("%spreempted by %s after step %lld: checkpoint and results written; --resume continues\n",
                    tty ? "\n" : "", preempt_signal_name()[0] ? preempt_signal_name() : "another rank's signal",
                    static_cast<long long>(step));
      break;
    }
    trainer.step(step, &results);
    const bool collapsed = trainer.check_collapse(results);
    if (collapsed && results.int_attrs["collapse_step"] < 0) results.int_attrs["collapse_step"] = step;
    const bool last = step + 1 == s.rl.steps;
    if (collapsed && !s.rl.continue_after_collapse) status = RunStatus::collapsed;
    else if (last) status = collapsed || results.int_attrs["collapse_step"] >= 0 ? RunStatus::collapsed : RunStatus::complete;
    // The step's rows, then the checkpoint, and only then the final status: a run whose last
    // write fails is never marked complete.
    results.attrs["status"] = run_status_name(RunStatus::running);
    on_writer([&] { results.write(opt.out); });
    const bool ckpt_due = opt.checkpoint_seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - last_ckpt_time).count() >= opt.checkpoint_seconds;
    if ((s.rl.checkpoint_every > 0 && (step + 1) % s.rl.checkpoint_every == 0) || last ||
        status != RunStatus::running || step + 1 == end || (opt.checkpoint_seconds > 0 && agree(false, ckpt_due).second)) {
      save_checkpoint(step + 1);
      ckpt_step = step + 1;
      last_ckpt_time = std::chrono::steady_clock::now();
    }
    if (status != RunStatus::running) {
      results.attrs["status"] = run_status_name(status);
      on_writer([&] { results.write(opt.out); });
    }
    if (opt.on_step) opt.on_step();
    if (verbose) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = el / static_cast<double>(step + 1 - start) * static_cast<double>(s.rl.steps - step - 1);
      const double ev = results.last("eval_accuracy");
      std::printf("%sstep %lld/%d  reward %.3f  kl %.2e  flip %.2f%%  clip %.3f%s  eta %s%s",
                  tty ? "\r" : "", static_cast<long long>(step + 1), s.rl.steps,
                  results.last("reward_mean"), results.last("kl_rollout_train"),
                  100.0 * results.last("flip_rate_mean"), results.last("clip_frac"),
                  std::isnan(ev) ? "" : ("  eval " + std::to_string(ev).substr(0, 5)).c_str(),
                  fmt_eta(eta).c_str(), tty ? "   " : "\n");
      std::fflush(stdout);
    }
    if (status != RunStatus::running) { ++step; break; }
  }
  if (verbose && tty && status != RunStatus::preempted) std::printf("\n");
  sum.status = run_status_name(status);
  sum.steps = step;
  sum.collapse_step = results.int_attrs["collapse_step"];
  sum.final_reward = results.final_reward();
  sum.final_eval = results.last("eval_accuracy");
  return sum;
}

}  // namespace moerl
