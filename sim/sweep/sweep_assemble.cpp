// sweep_assemble.cpp — see sweep_assemble.h.
#include "sim/sweep/sweep_assemble.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sim/io/results.h"
#include "sim/io/run_identity.h"
#include "sim/io/text_io.h"
#include "sim/sweep/sweep_experiment.h"
#include "store/h5io.h"
#include "store/output_lock.h"

namespace fs = std::filesystem;

namespace moerl {

std::vector<double> sweep_read_series(const H5File& f, const std::string& name) {
  if (!f.is_dataset(name)) return {};
  const auto shape = f.shape(name);
  if (shape.size() != 1) return {};
  std::vector<double> v(static_cast<size_t>(shape[0]));
  f.read(name, shape, v.data());
  return v;
}

double sweep_last_finite(const H5File& f, const std::string& name) {
  const std::vector<double> v = sweep_read_series(f, name);
  for (size_t i = v.size(); i-- > 0;)
    if (std::isfinite(v[i])) return v[i];
  return kSweepNaN;
}

int64_t sweep_collapse_step_of(const H5File& f) {
  const int64_t c = f.has_attr("/", "collapse_step") ? f.attr_int("/", "collapse_step") : -1;
  return c >= 0 ? c + 1 : -1;
}

namespace {
// The value of `key` in an effective scenario body ("key = value" lines); false when absent.
bool stored_value(const std::string& body, const std::string& key, std::string* value) {
  const std::string head = key + " = ";
  for (size_t p = 0; p < body.size();) {
    size_t e = body.find('\n', p);
    if (e == std::string::npos) e = body.size();
    if (body.compare(p, head.size(), head) == 0) {
      *value = body.substr(p + head.size(), e - p - head.size());
      return true;
    }
    p = e + 1;
  }
  return false;
}

// Two spellings of one value: equal text, or numbers that parse whole to the same double.
bool same_value(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char *ea = nullptr, *eb = nullptr;
  const double x = std::strtod(a.c_str(), &ea), y = std::strtod(b.c_str(), &eb);
  return !a.empty() && !b.empty() && *ea == '\0' && *eb == '\0' && x == y;
}

std::string keys_differ(const std::vector<std::string>& d) {
  std::string msg;
  for (size_t i = 0; i < d.size() && i < 6; ++i) msg += (i ? "; " : "") + text_shown(d[i], 120);
  if (d.size() > 6) msg += "; ... (" + std::to_string(d.size()) + " keys)";
  return msg;
}
}  // namespace

std::string sweep_run_mismatch(const std::string& stored, const std::string& planned,
                               const std::vector<std::pair<std::string, std::string>>& keys) {
  if (run_scenario_body(stored).empty()) return "";
  if (!planned.empty()) {
    const std::vector<std::string> d = run_scenario_diff(planned, stored);
    return d.empty() ? "" : keys_differ(d);
  }
  const std::string body = run_scenario_body(stored);
  std::vector<std::string> d;
  for (const auto& [k, v] : keys) {
    std::string got;
    if (k == "variant") continue;  // a name, not a scenario key
    if (!stored_value(body, k, &got)) d.push_back(k + ": " + v + " → (unset)");
    else if (!same_value(v, got)) d.push_back(k + ": " + v + " → " + got);
  }
  return d.empty() ? "" : keys_differ(d);
}

std::string sweep_mismatch_message(const std::string& file, const std::string& id, const std::string& why) {
  return file + " holds another run than the plan's " + id + " (the plan's → the file's: " + why +
         "); not counted as " + id + ", left as it is (move it away to redo the run)";
}

bool sweep_row_from_file(const std::string& path, SweepIndexRow* row, const std::string& planned) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    const H5File f = H5File::open(path);
    if (!f.has_attr("/", "status")) {
      row->status = "unreadable";
      row->error = "unreadable results file: " + path + " has no 'status' attribute (not a run's results)";
      return true;
    }
    const std::string why =
        sweep_run_mismatch(f.has_attr("/", "scenario") ? f.attr_string("/", "scenario") : "", planned, row->keys);
    if (!why.empty()) {
      row->status = "mismatched";
      row->error = sweep_mismatch_message(fs::path(path).filename().string(), row->id, why);
      return true;
    }
    row->status = f.attr_string("/", "status");
    row->steps = f.has_attr("/", "steps") ? f.attr_int("/", "steps") : 0;
    row->collapse_step = sweep_collapse_step_of(f);
    row->final_reward = final_reward_of(sweep_read_series(f, "metrics/reward_mean"));
    row->final_eval = sweep_last_finite(f, "metrics/eval_accuracy");
    double t = 0.0;
    for (double x : sweep_read_series(f, "metrics/time_step"))
      if (std::isfinite(x)) t += x;
    row->seconds = t;
  } catch (const H5Error& e) {
    row->status = "unreadable";  // damaged, truncated or foreign: not a run's state, a file's
    row->error = std::string("unreadable results file: ") + e.what();
  }
  return true;
}

std::string sweep_failure_path(const std::string& dir, const std::string& id) {
  return (fs::path(dir) / (id + ".failed.txt")).string();
}

namespace {
// The run files of `dir` that no plan row names: <name>.h5 (not a checkpoint) holding a run's
// results or unreadable, as "unplanned" rows, so a row deleted from plan.csv (or a run file copied
// in) is named, never dropped. Files that say they are something else (a base checkpoint, a score
// file: a "format" attribute) are not runs.
void add_unplanned(const std::string& dir, const std::map<std::string, SweepRun>& planned, SweepIndex* idx) {
  std::set<std::string> listed;
  for (const SweepIndexRow& r : idx->rows) listed.insert(fs::path(r.file).lexically_normal().string());
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0 &&
        !(name.size() > 8 && name.compare(name.size() - 8, 8, ".ckpt.h5") == 0) && !listed.count(name))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    try {
      const H5File f = H5File::open(path);
      if (f.has_attr("/", "format") || !f.has_attr("/", "steps")) continue;  // not a run's results
    } catch (const H5Error&) {
      // damaged: it may be a run's; named below
    }
    SweepIndexRow row;
    row.index = -1;
    row.id = name.substr(0, name.size() - 3);
    row.file = name;
    const auto it = planned.find(row.id);
    const bool known = it != planned.end();
    if (known) row.keys = it->second.keys;
    SweepIndexRow read = row;
    sweep_row_from_file(path, &read, known ? it->second.scenario.effective_text() : "");
    row.status = "unplanned";
    row.steps = read.status == "mismatched" || read.status == "unreadable" ? 0 : read.steps;
    row.error = name + ": a run file (" + read.status + ") that plan.csv does not list" +
                (known ? " although grid.ini plans a run " + row.id + " (its row deleted from plan.csv?)"
                       : " (copied in?)") +
                "; not counted" + (read.error.empty() ? "" : ": " + read.error);
    idx->rows.push_back(row);
  }
}
}  // namespace

SweepIndex sweep_index_assemble(const std::string& dir) {
  SweepIndex idx = sweep_plan_read(dir);
  const std::map<std::string, SweepRun> planned = sweep_experiment_runs(dir);
  for (SweepIndexRow& row : idx.rows) {
    row.status = "pending";
    const auto it = planned.find(row.id);
    const std::string scenario = it == planned.end() ? "" : it->second.scenario.effective_text();
    if (!scenario.empty()) row.scenario_hash = run_scenario_hash(scenario);
    const bool have = sweep_row_from_file((fs::path(dir) / row.file).string(), &row, scenario);
    const bool finished = have && (row.status == "complete" || row.status == "collapsed");
    std::ifstream note(sweep_failure_path(dir, row.id));
    if (note && !finished && row.status != "mismatched") {
      std::stringstream ss;
      ss << note.rdbuf();
      row.status = "failed";
      row.error = ss.str();
      while (!row.error.empty() && row.error.back() == '\n') row.error.pop_back();
    }
  }
  add_unplanned(dir, planned, &idx);
  return idx;
}

SweepIndexView sweep_index_refresh(const std::string& dir) {
  SweepIndexView view;
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(sweep_plan_path(dir), ec)) return view;
  view.sweep = true;
  // A directory that cannot be written (a read-only job-array directory) still has its plan: the
  // index is assembled in memory, and the caller says it was not saved.
  if (access(dir.c_str(), W_OK) != 0) {
    view.unsaved = dir + " cannot be written (" + std::strerror(errno) + ")";
    view.index = sweep_index_assemble(dir);
    return view;
  }
  OutputLock lock;
  try {
    lock = OutputLock::take((fs::path(dir) / "index.csv").string(), "the sweep index");
  } catch (const std::runtime_error&) {
    view.index = sweep_index_read(dir);  // a sweep is running there and keeps its index current itself
    return view;
  }
  SweepIndex idx = sweep_index_assemble(dir);
  // What only the index knows (the rank that led a run, its wall time in the invocation that ran
  // it, a full sweep's grid path) stays where the files agree with it.
  try {
    const SweepIndex before = sweep_index_read(dir);
    for (SweepIndexRow& row : idx.rows)
      for (const SweepIndexRow& b : before.rows)
        if (b.id == row.id && b.status == row.status) {
          row.rank = b.rank;
          if (std::isfinite(b.seconds)) row.seconds = b.seconds;
          if (row.error.empty()) row.error = b.error;
        }
  } catch (const std::exception&) {
    // no index yet (array tasks), or an unreadable one: the assembled one replaces it
  }
  try {
    sweep_index_write(dir, idx);
  } catch (const std::runtime_error& e) {
    view.unsaved = e.what();  // a full disk: the index in memory is still the directory's
  }
  view.index = idx;
  return view;
}

std::vector<std::string> sweep_index_warnings(const std::string& dir, const SweepIndex& index) {
  std::vector<std::string> out;
  for (const SweepIndexRow& r : index.rows)
    if (r.status == "mismatched" || r.status == "unplanned") out.push_back(dir + ": " + r.error);
  return out;
}

}  // namespace moerl
