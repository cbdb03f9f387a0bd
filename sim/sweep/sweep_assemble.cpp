// sweep_assemble.cpp — see sweep_assemble.h.
#include "sim/sweep/sweep_assemble.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/io/results.h"
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

bool sweep_row_from_file(const std::string& path, SweepIndexRow* row) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  try {
    const H5File f = H5File::open(path);
    row->status = f.has_attr("/", "status") ? f.attr_string("/", "status") : "running";
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

SweepIndex sweep_index_assemble(const std::string& dir) {
  SweepIndex idx = sweep_plan_read(dir);
  for (SweepIndexRow& row : idx.rows) {
    row.status = "pending";
    const bool have = sweep_row_from_file((fs::path(dir) / row.file).string(), &row);
    const bool finished = have && (row.status == "complete" || row.status == "collapsed");
    std::ifstream note(sweep_failure_path(dir, row.id));
    if (note && !finished) {
      std::stringstream ss;
      ss << note.rdbuf();
      row.status = "failed";
      row.error = ss.str();
      while (!row.error.empty() && row.error.back() == '\n') row.error.pop_back();
    }
  }
  return idx;
}

bool sweep_index_refresh(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(sweep_plan_path(dir), ec)) return false;
  OutputLock lock;
  try {
    lock = OutputLock::take((fs::path(dir) / "index.csv").string(), "the sweep index");
  } catch (const std::runtime_error&) {
    return false;  // a sweep is running there and keeps its index current itself
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
  sweep_index_write(dir, idx);
  return true;
}

}  // namespace moerl
