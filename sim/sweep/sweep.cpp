// sweep.cpp — see sweep.h. Messages between group leaders and rank 0 (on comms.world):
//   leader → 0, kTagReport: the report of the leader's last run as text ("" before its first);
//   0 → leader, kTagAssign: one int, the next run index, or -1 (stop).
// Inside a group the leader broadcasts each index to its members.
#include "sim/io/text_io.h"
#include "sim/sweep/sweep.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "store/h5io.h"
#include "sim/io/results.h"
#include "sim/io/run_identity.h"
#include "store/output_lock.h"
#include "sim/process/preempt.h"
#include "sim/jobs/run.h"
#include "sim/process/threads.h"
#include "sim/sweep/sweep_assemble.h"
#include "sim/sweep/sweep_experiment.h"
#include "sim/sweep/sweep_index.h"

namespace fs = std::filesystem;

namespace moerl {

namespace {

constexpr int kTagReport = 7101;
constexpr int kTagAssign = 7102;

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string("sweep: ") + what + ": " + std::string(msg, static_cast<size_t>(len)));
  }
}

// Waits for a request without spinning: ranks that wait (for a base policy another group trains,
// for the last runs of others) must not take cores from the ranks that compute.
void wait_sleeping(MPI_Request* req, const char* what) {
  for (int done = 0;;) {
    mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// What a group leader tells rank 0 about a finished run.
struct Report {
  int index = -1;
  int rank = -1;
  std::string status;
  int64_t steps = 0, collapse_step = -1;
  double final_reward = kSweepNaN, final_eval = kSweepNaN, seconds = kSweepNaN;
  std::string error;
};

constexpr char kSep = '\x1f';  // ASCII unit separator: cannot occur in the fields but the error text

std::string report_encode(const Report& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d%c%d%c%s%c%lld%c%lld%c%.17g%c%.17g%c%.17g%c", r.index, kSep, r.rank, kSep,
                r.status.c_str(), kSep, static_cast<long long>(r.steps), kSep, static_cast<long long>(r.collapse_step),
                kSep, r.final_reward, kSep, r.final_eval, kSep, r.seconds, kSep);
  return buf + r.error;
}

Report report_decode(const std::string& s) {
  std::vector<std::string> f;
  size_t p = 0;
  for (int i = 0; i < 8; ++i) {
    const size_t q = s.find(kSep, p);
    if (q == std::string::npos) throw std::runtime_error("sweep: malformed run report");
    f.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  Report r;
  r.index = std::stoi(f[0]);
  r.rank = std::stoi(f[1]);
  r.status = f[2];
  r.steps = std::stoll(f[3]);
  r.collapse_step = std::stoll(f[4]);
  r.final_reward = std::strtod(f[5].c_str(), nullptr);
  r.final_eval = std::strtod(f[6].c_str(), nullptr);
  r.seconds = std::strtod(f[7].c_str(), nullptr);
  r.error = s.substr(p);
  return r;
}

// The sum of a run's step times (metrics/time_step): its seconds when the index never heard of its
// end (the sweep was killed between the run's last write and the index's).
double sum_finite(const H5File& f, const std::string& name) {
  if (!f.is_dataset(name) || f.shape(name).size() != 1) return kSweepNaN;
  double t = 0.0;
  for (double x : sweep_read_series(f, name))
    if (std::isfinite(x)) t += x;
  return t;
}

// An index's runs counted by status, as one vector that a broadcast carries: runs, complete,
// collapsed, failed, skipped, preempted, pending, running, unreadable, mismatched, unplanned
// (summary_of reads it back).
constexpr size_t kTallySize = 11;
std::vector<int> status_tally(const std::vector<SweepIndexRow>& rows, int skipped) {
  std::vector<int> t(kTallySize, 0);
  t[0] = static_cast<int>(rows.size());
  for (const SweepIndexRow& r : rows) {
    t[1] += r.status == "complete";
    t[2] += r.status == "collapsed";
    t[3] += r.status == "failed";
    t[5] += r.status == "preempted";
    t[6] += r.status == "pending";
    t[7] += r.status == "running";
    t[8] += r.status == "unreadable";
    t[9] += r.status == "mismatched";
    t[10] += r.status == "unplanned";
  }
  t[4] = skipped;
  return t;
}

SweepSummary summary_of(const std::vector<int>& t) {
  SweepSummary sum;
  sum.runs = t[0];
  sum.complete = t[1];
  sum.collapsed = t[2];
  sum.failed = t[3];
  sum.skipped = t[4];
  sum.preempted = t[5];
  sum.pending = t[6];
  sum.running = t[7];
  sum.unreadable = t[8];
  sum.mismatched = t[9];
  sum.unplanned = t[10];
  return sum;
}

// The state of a run's results file before this invocation: fills row and returns true when the
// run is finished (or must not be touched), false when it is to be run.
bool read_previous(const std::string& path, const SweepRun& run, SweepIndexRow* row) {
  if (!fs::exists(path)) return false;
  try {
    const H5File f = H5File::open(path);
    // the check every reader of the directory makes (sweep_assemble.h): a file of another run is
    // never resumed, overwritten or counted as this one
    const std::string why = sweep_run_mismatch(f.has_attr("/", "scenario") ? f.attr_string("/", "scenario") : "",
                                               run.scenario.effective_text(), run.keys);
    if (!why.empty()) {
      row->status = "mismatched";
      row->error = sweep_mismatch_message(fs::path(path).filename().string(), run.id, why);
      return true;
    }
    const std::string status = f.attr_string("/", "status");
    row->steps = f.has_attr("/", "steps") ? f.attr_int("/", "steps") : 0;
    row->collapse_step = sweep_collapse_step_of(f);
    row->final_reward = final_reward_of(sweep_read_series(f, "metrics/reward_mean"));
    row->final_eval = sweep_last_finite(f, "metrics/eval_accuracy");
    if (status == "complete" || status == "collapsed") {
      row->status = status;
      row->seconds = sum_finite(f, "metrics/time_step");
      return true;
    }
  } catch (const H5Error&) {
    // unreadable (e.g. a foreign file): run it again; run_rl overwrites it
  }
  return false;
}

// A run's index row before it has run.
SweepIndexRow pending_row(const SweepRun& r) {
  SweepIndexRow row;
  row.index = r.index;
  row.id = r.id;
  row.file = r.id + ".h5";
  row.keys = r.keys;
  row.status = "pending";
  row.scenario_hash = run_scenario_hash(r.scenario.effective_text());
  return row;
}

// The grid's runs as index rows, all pending: the sweep directory's plan.
SweepIndex plan_of(const SweepGrid& g) {
  SweepIndex idx;
  idx.grid = g.path;
  idx.base = g.base;
  idx.swept_keys = g.swept_keys;
  for (const SweepRun& r : g.runs) idx.rows.push_back(pending_row(r));
  return idx;
}

// A failed run's note beside its files (sweep_assemble.h), so an assembled index still says why.
void note_failure(const std::string& dir, const std::string& id, const std::string& status, const std::string& error) {
  const std::string path = sweep_failure_path(dir, id);
  std::error_code ec;
  if (status == "failed") text_write_atomic(path, error + "\n");
  else fs::remove(path, ec);
}

class Sweep {
 public:
  Sweep(const Comms& comms, const SweepGrid& grid, const SweepOptions& opt) : c_(comms), g_(grid), o_(opt) {
    cache_ = o_.cache_dir.empty() ? (fs::path(o_.out) / "cache").string() : o_.cache_dir;
  }
  SweepSummary execute();

 private:
  SweepSummary execute_task();
  SweepSummary execute_index_only();
  std::vector<int> prepare_index();  // rank 0: the runs to do
  void extend_experiment();          // rank 0: --extend
  void prepare_bases(const std::vector<int>& todo);
  Report run_one(int index, bool serve);
  void record(const Report& r);
  void refresh_progress();
  int assign_next(int rank);
  void serve(bool block);
  void bcast_index(int* index) const;
  void bcast_ints(std::vector<int>* v) const;
  void wait_world() const;

  OutputLock lock_;  // rank 0: one sweep per directory (each run's own lock is run_rl's)
  const Comms& c_;
  const SweepGrid& g_;
  SweepOptions o_;
  std::string cache_;
  bool mpi_ = false;
  std::unique_ptr<RankGrid> grid_;  // sweep groups of ranks_per_run ranks (sim/comm/comms.h)
  int n_groups_ = 1, group_ = 0;
  bool leader_ = true;

  // rank 0 only
  SweepIndex index_;
  std::vector<int> todo_;
  size_t next_ = 0;
  int waiting_leaders_ = 0;  // other leaders not yet told to stop
  int done_ = 0, skipped_ = 0;
  int done_before_ = 0;  // runs finished before this invocation's first run (skipped ones)
  bool stopping_ = false;  // preempted (a signal here, or a group's run came back preempted): assign nothing more
  std::chrono::steady_clock::time_point t_start_;  // when this invocation's runs began
  std::chrono::steady_clock::time_point last_refresh_{};  // refresh_progress's last index write
};

void Sweep::bcast_index(int* index) const {
  if (grid_->size() > 1) *index = std::stoi(grid_->broadcast(std::to_string(*index)));
}

void Sweep::wait_world() const {
  if (!mpi_ || c_.size == 1) return;
  MPI_Request req;
  mpi_check(MPI_Ibarrier(c_.world, &req), "MPI_Ibarrier");
  wait_sleeping(&req, "MPI_Ibarrier");
}

void Sweep::bcast_ints(std::vector<int>* v) const {
  if (!mpi_ || c_.size == 1) return;
  int n = static_cast<int>(v->size());
  mpi_check(MPI_Bcast(&n, 1, MPI_INT, 0, c_.world), "MPI_Bcast");
  v->resize(static_cast<size_t>(n));
  if (n) mpi_check(MPI_Bcast(v->data(), n, MPI_INT, 0, c_.world), "MPI_Bcast");
}

std::vector<int> Sweep::prepare_index() {
  fs::create_directories(o_.out);
  // before the directory is looked at: two sweeps started together on it cannot both prepare it
  lock_ = OutputLock::take((fs::path(o_.out) / "index.csv").string(), "--out");
  const bool has_index = fs::exists(fs::path(o_.out) / "index.csv");
  index_.grid = g_.path;
  index_.base = g_.base;
  index_.swept_keys = g_.swept_keys;
  // Refusals come before any write: a refused command leaves the directory as it was.
  if (!o_.resume)
    for (const SweepRun& r : g_.runs)
      if (has_index || fs::exists(fs::path(o_.out) / (r.id + ".h5")))
        throw usage_error("sweep: " + o_.out + " already holds a sweep (" + (has_index ? "index.csv" : r.id + ".h5") +
                          "); --resume continues it, or choose another --out");
  if (o_.extend) extend_experiment();
  if (!o_.extend) sweep_plan_check(o_.out, plan_of(g_));
  sweep_experiment_check(o_.out, g_);
  sweep_plan_publish(o_.out, plan_of(g_));
  // one experiment per directory: every run of this grid is the directory's (or it is recorded now)
  sweep_experiment_publish(o_.out, g_);
  std::map<std::string, SweepIndexRow> before;  // the previous invocation's rows, for their timings
  if (o_.resume && has_index) {
    try {
      for (const SweepIndexRow& r : sweep_index_read(o_.out).rows) before[r.id] = r;
    } catch (const std::exception&) {
      // an unreadable index is rebuilt from the results files
    }
  }
  std::vector<int> todo;
  for (const SweepRun& r : g_.runs) {
    SweepIndexRow row = pending_row(r);
    const std::string path = (fs::path(o_.out) / row.file).string();
    if (o_.resume && read_previous(path, r, &row)) {
      if (row.status == "complete" || row.status == "collapsed") ++skipped_;
      if (before.count(r.id) && before[r.id].status == row.status) {
        row.seconds = before[r.id].seconds;
        row.rank = before[r.id].rank;
      }
      ++done_;
    } else {
      todo.push_back(r.index);
    }
    index_.rows.push_back(row);
  }
  sweep_index_write(o_.out, index_);
  return todo;
}

void Sweep::extend_experiment() {
  const int added = sweep_experiment_extend(o_.out, g_, sweep_plan_text(plan_of(g_)), o_.command);
  if (o_.progress)
    std::printf("sweep: %s: %s\n", o_.out.c_str(),
                added ? ("extended by " + std::to_string(added) + " run" + (added == 1 ? "" : "s") + " (recorded in " +
                         sweep_experiment_log_path(o_.out) + ")").c_str()
                      : "--extend: this grid adds no run to the directory's; nothing changed");
  std::fflush(stdout);
}

void Sweep::prepare_bases(const std::vector<int>& todo) {
  std::vector<int> firsts;  // one run per distinct base
  std::map<std::string, int> seen;
  for (int i : todo)
    if (seen.emplace(run_base_path(g_.runs[static_cast<size_t>(i)].scenario, cache_), i).second) firsts.push_back(i);
  int missing = 0;
  for (const auto& [path, i] : seen) missing += fs::exists(path) ? 0 : 1;
  if (c_.is_root && o_.progress && missing)
    std::printf("sweep: training %d base polic%s into %s\n", missing, missing == 1 ? "y" : "ies", cache_.c_str());
  std::fflush(stdout);
  for (size_t j = 0; j < firsts.size(); ++j) {
    if (static_cast<int>(j % static_cast<size_t>(n_groups_)) != group_ || !leader_) continue;
    const Scenario& s = g_.runs[static_cast<size_t>(firsts[j])].scenario;
    try {
      run_base_checkpoint(s, cache_, c_.is_root && n_groups_ == 1 && o_.progress);
    } catch (const Preempted& e) {
      // a stop signal: no further base; rank 0 then hands out no run (or a run finds the flag at
      // its first boundary), and the sweep exits 75 (cmd_sweep)
      if (c_.is_root && o_.progress) std::printf("sweep: %s: nothing written\n", e.what());
      break;
    } catch (const std::exception&) {
      // the runs that need this base fail with the same error, and are recorded as failed
    }
  }
  wait_world();
}

Report Sweep::run_one(int index, bool serve_others) {
  const SweepRun& r = g_.runs[static_cast<size_t>(index)];
  Report rep;
  rep.index = index;
  rep.rank = c_.rank;
  RunOptions ro;
  ro.out = (fs::path(o_.out) / (r.id + ".h5")).string();
  ro.cache_dir = cache_;
  ro.resume = o_.resume;
  ro.force = true;  // (explicitly) the sweep checked its directory itself (prepare_index): partial runs without a checkpoint start over
  ro.dump_tensors = o_.dump_tensors;
  ro.checkpoint_seconds = o_.checkpoint_seconds;
  // A task's log is its run's alone: the base policy and a line per step go there, as under `moerl run`.
  ro.progress = o_.progress && c_.is_root && (o_.task >= 0 || (n_groups_ == 1 && isatty(STDOUT_FILENO)));
  ro.grid = grid_.get();
  ro.local_rank = c_.local_rank;
  // (a task keeps no index: sweep_assemble.h)
  if (serve_others || (c_.is_root && o_.task < 0)) ro.on_step = [this, serve_others] {
    if (serve_others) serve(false);
    if (c_.is_root) refresh_progress();
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const RunSummary sum = run_rl(r.scenario, ro);
    rep.status = sum.status;
    rep.steps = sum.steps;
    rep.collapse_step = sum.collapse_step;
    rep.final_reward = sum.final_reward;
    rep.final_eval = sum.final_eval;
  } catch (const std::exception& e) {
    rep.status = "failed";
    rep.error = e.what();
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

// Rank 0, after a step of its own run, at most every 2 s: the index's running rows get the steps,
// final reward and eval their results files hold (each rewritten atomically at least as often:
// RunOptions::results_seconds), so
// index.csv and `moerl inspect DIR` show a running sweep's progress.
void Sweep::refresh_progress() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_refresh_ < std::chrono::seconds(2)) return;
  last_refresh_ = now;
  for (SweepIndexRow& row : index_.rows) {
    if (row.status != "running") continue;
    try {
      const H5File f = H5File::open((fs::path(o_.out) / row.file).string());
      if (f.has_attr("/", "steps")) row.steps = f.attr_int("/", "steps");
      row.final_reward = final_reward_of(sweep_read_series(f, "metrics/reward_mean"));
      row.final_eval = sweep_last_finite(f, "metrics/eval_accuracy");
    } catch (const H5Error&) {
      // not written yet (the run's first step is under way)
    }
  }
  sweep_index_write(o_.out, index_);
}

void Sweep::record(const Report& r) {
  SweepIndexRow& row = index_.rows[static_cast<size_t>(r.index)];
  row.status = r.status;
  row.steps = r.steps;
  row.collapse_step = r.collapse_step;
  row.final_reward = r.final_reward;
  row.final_eval = r.final_eval;
  row.seconds = r.seconds;
  row.rank = r.rank;
  row.error = r.error;
  if (r.status == "preempted") stopping_ = true;
  else ++done_;
  try {
    note_failure(o_.out, row.id, r.status, r.error);
  } catch (const std::exception&) {
    // the index below says it too
  }
  sweep_index_write(o_.out, index_);
  if (!o_.progress) return;
  // ETA from this invocation's pace (runs finished per second of wall time, all groups together).
  const int now_done = done_ - done_before_, left = static_cast<int>(index_.rows.size()) - done_;
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start_).count();
  char eta[48] = "";
  if (left > 0 && now_done > 0) {
    const int secs = static_cast<int>(el / now_done * left + 0.5);
    std::snprintf(eta, sizeof eta, "  (%d left, eta %dm%02ds)", left, secs / 60, secs % 60);
  }
  if (r.status == "failed") {
    std::printf("[%d/%zu] %s (rank %d): FAILED after %.1f s: %s%s\n", done_, index_.rows.size(), row.id.c_str(),
                r.rank, r.seconds, r.error.c_str(), eta);
  } else if (r.status == "preempted") {
    std::printf("[%d/%zu] %s (rank %d): preempted %s (--resume continues it)\n", done_, index_.rows.size(),
                row.id.c_str(), r.rank,
                r.steps > 0 ? ("after " + std::to_string(r.steps) + " steps, checkpointed").c_str()
                            : "before its first step, nothing written");
  } else {
    std::printf("[%d/%zu] %s (rank %d): %s%s, %lld steps, reward %.3f, eval %.3f, %.1f s%s\n", done_,
                index_.rows.size(), row.id.c_str(), r.rank, r.status.c_str(),
                r.collapse_step >= 0 ? (" at step " + std::to_string(r.collapse_step)).c_str() : "",
                static_cast<long long>(r.steps), r.final_reward, r.final_eval, r.seconds, eta);
  }
  std::fflush(stdout);
}

int Sweep::assign_next(int rank) {
  if (preempt_requested()) stopping_ = true;
  if (stopping_ || next_ >= todo_.size()) return -1;
  const int i = todo_[next_++];
  index_.rows[static_cast<size_t>(i)].status = "running";
  index_.rows[static_cast<size_t>(i)].rank = rank;
  index_.rows[static_cast<size_t>(i)].error.clear();
  sweep_index_write(o_.out, index_);
  return i;
}

// Rank 0: answers the leaders whose reports have arrived (block: waits for at least one).
void Sweep::serve(bool block) {
  while (waiting_leaders_ > 0) {
    MPI_Status st;
    int flag = 0;
    mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, kTagReport, c_.world, &flag, &st), "MPI_Iprobe");
    if (!flag && !block) return;
    if (!flag) {  // waiting for the others' last runs: sleep, do not spin
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    std::string text(static_cast<size_t>(n), '\0');
    mpi_check(MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, kTagReport, c_.world, MPI_STATUS_IGNORE),
              "MPI_Recv (report)");
    if (!text.empty()) record(report_decode(text));
    int next = assign_next(st.MPI_SOURCE);
    mpi_check(MPI_Send(&next, 1, MPI_INT, st.MPI_SOURCE, kTagAssign, c_.world), "MPI_Send (assign)");
    if (next < 0) --waiting_leaders_;
    block = false;  // answered one: now only what is already there
  }
}

SweepSummary Sweep::execute() {
  mpi_ = c_.world != MPI_COMM_NULL;
  if (o_.index_only) return execute_index_only();
  if (o_.extend) o_.resume = true;  // the runs it had are continued, the new ones run
  if (o_.task >= 0) return execute_task();
  grid_ = std::make_unique<RankGrid>(c_, o_.ranks_per_run);  // throws on every rank if it does not divide
  n_groups_ = grid_->groups();
  group_ = grid_->group();
  leader_ = grid_->is_root();
  waiting_leaders_ = n_groups_ - 1;
  std::vector<int> todo;
  comms_checked(c_, [&] {  // a refused directory fails every rank alike, no abort
    if (c_.is_root) todo = prepare_index();
  });
  bcast_ints(&todo);
  if (c_.is_root && o_.progress) {
    std::printf("sweep: %zu runs (%zu to run) from %s → %s; %d group%s of %d rank%s, %s per rank\n", g_.runs.size(),
                todo.size(), g_.path.c_str(), o_.out.c_str(), n_groups_, n_groups_ == 1 ? "" : "s", grid_->size(),
                grid_->size() == 1 ? "" : "s", threads_describe().c_str());
    std::fflush(stdout);
  }
  prepare_bases(todo);
  done_before_ = done_;
  t_start_ = std::chrono::steady_clock::now();

  if (c_.is_root) {
    todo_ = todo;
    for (;;) {
      if (mpi_) serve(false);
      int i = assign_next(0);
      bcast_index(&i);
      if (i < 0) break;
      record(run_one(i, mpi_ && n_groups_ > 1));
    }
    while (waiting_leaders_ > 0) serve(true);
  } else if (leader_) {
    std::string report;
    for (;;) {
      mpi_check(MPI_Send(report.data(), static_cast<int>(report.size()), MPI_CHAR, 0, kTagReport, c_.world),
                "MPI_Send (report)");
      int i = -1;
      MPI_Request req;
      mpi_check(MPI_Irecv(&i, 1, MPI_INT, 0, kTagAssign, c_.world, &req), "MPI_Irecv (assign)");
      wait_sleeping(&req, "MPI_Irecv (assign)");
      bcast_index(&i);
      if (i < 0) break;
      report = report_encode(run_one(i, false));
    }
  } else {
    // A member of a group of several ranks: joins each run its leader was given (run_rl splits
    // experts and sequences over the group; only the leader writes).
    for (;;) {
      int i = -1;
      bcast_index(&i);
      if (i < 0) break;
      run_one(i, false);
    }
  }

  wait_world();  // ranks done early sleep here until the last run ends
  std::vector<int> tally(kTallySize, 0);
  if (c_.is_root) {
    tally = status_tally(index_.rows, skipped_);
    sweep_index_write(o_.out, index_);
  }
  bcast_ints(&tally);
  return summary_of(tally);
}

// --index-only: the plan (checked against this grid) and the files make the index; nothing runs.
SweepSummary Sweep::execute_index_only() {
  std::vector<int> tally(kTallySize, 0);
  comms_checked(c_, [&] {
    if (!c_.is_root) return;
    if (!fs::is_directory(o_.out)) throw usage_error("sweep: --index-only: " + o_.out + " is not a sweep directory");
    // An empty or unrelated directory gets no plan: an index of runs that never were is not one.
    if (!fs::exists(sweep_plan_path(o_.out)))
      throw usage_error("sweep: --index-only: " + o_.out +
                        " holds no sweep (no plan.csv: no sweep or array task of a grid has started there)");
    lock_ = OutputLock::take((fs::path(o_.out) / "index.csv").string(), "--out");
    if (o_.extend) extend_experiment();
    if (!o_.extend) sweep_plan_check(o_.out, plan_of(g_));
    sweep_experiment_check(o_.out, g_);  // refused before anything is written
    sweep_plan_publish(o_.out, plan_of(g_));
    SweepIndex idx = sweep_index_assemble(o_.out);
    idx.grid = g_.path;
    sweep_index_write(o_.out, idx);
    lock_ = OutputLock();
    tally = status_tally(idx.rows, 0);
  });
  bcast_ints(&tally);
  return summary_of(tally);
}

// --task K: one run on every rank of the job (one group), as an array task runs it: resumed when
// its files are there, finished runs left alone; the plan is published, the index not written.
SweepSummary Sweep::execute_task() {
  const int n = static_cast<int>(g_.runs.size());
  comms_checked(c_, [&] {
    if (o_.task >= n)
      throw usage_error("sweep: --task " + std::to_string(o_.task) + ": the grid has " + std::to_string(n) +
                        " run" + (n == 1 ? "" : "s") + " (tasks 0 to " + std::to_string(n - 1) + "; moerl sweep GRID --list)");
    if (o_.ranks_per_run != 1 && o_.ranks_per_run != c_.size)
      throw usage_error("sweep: --task with --ranks-per-run " + std::to_string(o_.ranks_per_run) +
                        ": a task is one run on all the job's " + std::to_string(c_.size) +
                        " rank(s); leave --ranks-per-run out or give the rank count");
    if (!c_.is_root) return;
    // refused before anything is written: a run that is not the directory's, a file of another
    // run under this run's name
    sweep_plan_check(o_.out, plan_of(g_));
    sweep_experiment_check(o_.out, g_, {o_.task});
    SweepIndexRow probe;
    const SweepRun& r = g_.runs[static_cast<size_t>(o_.task)];
    if (read_previous((fs::path(o_.out) / (r.id + ".h5")).string(), r, &probe) && probe.status == "mismatched")
      throw usage_error("sweep: --task " + std::to_string(o_.task) + ": " + o_.out + ": " + probe.error);
    fs::create_directories(o_.out);
    sweep_plan_publish(o_.out, plan_of(g_));
    // this run must be the directory's (the first task records the experiment for the others)
    sweep_experiment_publish(o_.out, g_, {o_.task});
  });
  grid_ = std::make_unique<RankGrid>(c_, 0);
  n_groups_ = 1;
  leader_ = grid_->is_root();
  o_.resume = true;
  const SweepRun& run = g_.runs[static_cast<size_t>(o_.task)];
  const std::string path = (fs::path(o_.out) / (run.id + ".h5")).string();
  SweepIndexRow row;
  bool finished = false;
  if (c_.is_root) finished = read_previous(path, run, &row);
  finished = grid_->broadcast(finished ? "1" : "0") == "1";
  std::string status = grid_->broadcast(row.status);
  if (c_.is_root && o_.progress) {
    std::string keys;
    for (const auto& [k, v] : run.keys) keys += "  " + k + "=" + v;
    std::printf("sweep: task %d of %d: %s%s → %s%s; %d rank%s, %s per rank\n", o_.task, n, run.id.c_str(), keys.c_str(),
                path.c_str(), finished ? (" (" + status + " before: nothing to do)").c_str() : "", c_.size,
                c_.size == 1 ? "" : "s", threads_describe().c_str());
    std::fflush(stdout);
  }
  Report rep;
  if (finished) {
    rep.status = status;
    rep.error = row.error;
    rep.steps = row.steps;
    rep.final_reward = row.final_reward;
    rep.final_eval = row.final_eval;
  } else {
    rep = run_one(o_.task, false);
  }
  if (c_.is_root) {
    try {
      note_failure(o_.out, run.id, rep.status, rep.error);
    } catch (const std::exception&) {
      // the task's exit status and its log say it
    }
    if (o_.progress) {
      if (rep.status == "failed") std::printf("sweep: task %d: %s FAILED: %s\n", o_.task, run.id.c_str(), rep.error.c_str());
      else
        std::printf("sweep: task %d: %s %s, %lld steps, reward %.3f, eval %.3f\n", o_.task, run.id.c_str(),
                    rep.status.c_str(), static_cast<long long>(rep.steps), rep.final_reward, rep.final_eval);
      std::fflush(stdout);
    }
  }
  SweepIndexRow mine;
  mine.status = rep.status;
  std::vector<int> tally = status_tally({mine}, 0);
  bcast_ints(&tally);
  SweepSummary sum = summary_of(tally);
  sum.skipped = finished && !sum.failed ? 1 : 0;
  return sum;
}

}  // namespace

SweepSummary sweep_execute(const Comms& comms, const SweepGrid& grid, const SweepOptions& opt) {
  Sweep sweep(comms, grid, opt);
  return sweep.execute();
}

}  // namespace moerl
