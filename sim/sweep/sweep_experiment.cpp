// sweep_experiment.cpp — see sweep_experiment.h.
#include "sim/sweep/sweep_experiment.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "sim/comm/comms.h"
#include "sim/io/run_identity.h"
#include "sim/io/text_io.h"
#include "sim/sweep/sweep_assemble.h"
#include "sim/sweep/sweep_index.h"
#include "store/h5io.h"
#include "store/output_lock.h"
#include "store/path_checks.h"

namespace fs = std::filesystem;

namespace moerl {

namespace {

// The first line of every resolved grid (sweep_grid.cpp, grid_resolved_text).
constexpr char kResolvedHead[] = "# moerl sweep: the grid of this directory, resolved";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The directory's experiment, expanded; throws usage_error when its grid.ini no longer parses.
SweepGrid recorded_grid(const std::string& dir) {
  const std::string path = sweep_experiment_path(dir);
  try {
    return sweep_grid_parse(text_read_input(path, "grid file", kScenarioMaxBytes), path, dir);
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string(e.what()) + " (the experiment this sweep directory records)");
  }
}

// What makes `now` another run than `before` (the same id in the directory): "" when none.
std::string run_difference(const SweepRun& before, const SweepRun& now) {
  const std::vector<std::string> d =
      run_scenario_diff(before.scenario.effective_text(), now.scenario.effective_text());
  if (d.empty()) return "";
  std::string msg = std::to_string(d.size()) + (d.size() == 1 ? " key differs: " : " keys differ: ");
  for (size_t i = 0; i < d.size() && i < 6; ++i) msg += (i ? "; " : "") + text_shown(d[i], 120);
  if (d.size() > 6) msg += "; ...";
  return msg;
}

// Why `now` names the runs of `before` otherwise: the swept keys (and the variants axis) it adds.
std::string renamed_why(const SweepGrid& before, const SweepGrid& now) {
  std::string added;
  for (const std::string& k : now.swept_keys)
    if (std::find(before.swept_keys.begin(), before.swept_keys.end(), k) == before.swept_keys.end())
      added += (added.empty() ? "" : ", ") + k;
  return added.empty() ? " (its run ids are made otherwise)" : " (it sweeps " + added + " too, which every run id names)";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string sweep_experiment_path(const std::string& dir) { return (fs::path(dir) / "grid.ini").string(); }
std::string sweep_experiment_log_path(const std::string& dir) { return (fs::path(dir) / "extensions.log").string(); }

bool sweep_experiment_recorded(const std::string& dir) {
  std::error_code ec;
  const std::string path = sweep_experiment_path(dir);
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  std::string head(sizeof kResolvedHead - 1, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  return in && head == kResolvedHead;
}

std::map<std::string, SweepRun> sweep_experiment_runs(const std::string& dir) {
  std::map<std::string, SweepRun> out;
  if (!sweep_experiment_recorded(dir)) return out;
  try {
    for (const SweepRun& r : recorded_grid(dir).runs) out.emplace(r.id, r);
  } catch (const std::exception&) {
    out.clear();  // a grid.ini that no longer expands: the plan's keys are checked instead
  }
  return out;
}

namespace {
// A directory whose experiment is not recorded (grid.ini missing, or an older directory's grid
// text) is what its run files say: every run of `grid` whose file is there must be the run that
// file holds (sweep_run_mismatch), else usage_error naming the file and the keys. A grid.ini that
// is there but cannot be read is refused as such: the directory's identity is unknown.
void check_by_run_files(const std::string& dir, const SweepGrid& grid) {
  const std::string where = sweep_experiment_path(dir);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(where, ec)) && (!fs::is_regular_file(where, ec) || !std::ifstream(where)))
    throw usage_error("sweep: " + where + ": cannot be read (" + path_kind(where) +
                      "); it records the directory's experiment, so nothing is run or written there until it is a "
                      "readable grid again");
  const std::string name = grid.path.empty() ? "this grid" : grid.path;
  for (const SweepRun& r : grid.runs) {
    const std::string path = (fs::path(dir) / (r.id + ".h5")).string();
    if (!fs::exists(path, ec)) continue;
    std::string stored;
    try {
      const H5File f = H5File::open(path);
      if (f.has_attr("/", "scenario")) stored = f.attr_string("/", "scenario");
    } catch (const H5Error&) {
      continue;  // a damaged file says nothing of the experiment (the index names it unreadable)
    }
    const std::string why = sweep_run_mismatch(stored, r.scenario.effective_text(), r.keys);
    if (!why.empty())
      throw usage_error("sweep: " + dir + ": " + (sweep_experiment_recorded(dir) ? "" : "has no grid.ini, and ") +
                        "its run file " + r.id + ".h5 is not run " + r.id + " as " + name +
                        " and --set make it (the grid's → the file's: " + why +
                        "); give the grid and --set the directory was made with, or choose another --out; "
                        "nothing was written");
  }
}
}  // namespace

void sweep_experiment_check(const std::string& dir, const SweepGrid& grid, const std::vector<int>& indices) {
  if (!sweep_experiment_recorded(dir)) {
    check_by_run_files(dir, grid);
    return;
  }
  const SweepGrid before = recorded_grid(dir);
  std::map<std::string, const SweepRun*> by_id;
  for (const SweepRun& r : before.runs) by_id[r.id] = &r;
  std::vector<int> which = indices;
  if (which.empty())
    for (const SweepRun& r : grid.runs) which.push_back(r.index);
  const std::string where = sweep_experiment_path(dir);
  for (int i : which) {
    const SweepRun& now = grid.runs.at(static_cast<size_t>(i));
    const auto it = by_id.find(now.id);
    if (it == by_id.end())
      throw usage_error("sweep: " + dir + ": run " + now.id + " of " + (grid.path.empty() ? "this grid" : grid.path) +
                        " is not a run of the directory's experiment (" + where +
                        "); --extend adds runs deliberately, or choose another --out");
    const std::string diff = run_difference(*it->second, now);
    if (!diff.empty())
      throw usage_error("sweep: " + dir + ": run " + now.id + " is not the directory's experiment: its scenario, as " +
                        (grid.path.empty() ? "this grid" : grid.path) + " and --set make it, differs from " + where +
                        " (" + diff + "); give the directory's grid and --set, or choose another --out");
  }
}

void sweep_experiment_publish(const std::string& dir, const SweepGrid& grid, const std::vector<int>& indices) {
  const std::string path = sweep_experiment_path(dir);
  // Tasks of one array start together: one writes, the others wait for it, then check.
  const OutputLock lock = OutputLock::wait(path);
  if (sweep_experiment_recorded(dir)) {
    sweep_experiment_check(dir, grid, indices);
    return;
  }
  // None yet, or an older directory's grid text: recorded from this grid once every run file there
  // agrees with it (rebuilt from the run files), never stamped on a directory they contradict.
  check_by_run_files(dir, grid);
  text_write_atomic(path, grid.resolved);
}

int sweep_experiment_extend(const std::string& dir, const SweepGrid& grid, const std::string& plan_text,
                            const std::string& command) {
  const std::string path = sweep_experiment_path(dir);
  if (!fs::exists(sweep_plan_path(dir)))
    throw usage_error("sweep: --extend: " + dir + " holds no sweep to extend (no plan.csv); start it without --extend");
  if (!sweep_experiment_recorded(dir))
    throw usage_error("sweep: --extend: " + dir + "'s grid.ini is not a resolved grid (a directory of an older moerl); "
                      "run `moerl sweep GRID --out " + dir + " --resume` with its own grid once, then extend it");
  const OutputLock lock = OutputLock::wait(path);
  const SweepGrid before = recorded_grid(dir);
  std::map<std::string, const SweepRun*> now_by_id;
  for (const SweepRun& r : grid.runs) now_by_id[r.id] = &r;
  // Every run the directory has stays, as it was.
  for (const SweepRun& b : before.runs) {
    const auto it = now_by_id.find(b.id);
    if (it == now_by_id.end()) {
      const std::string name = grid.path.empty() ? "this grid" : grid.path;
      // The same run under another id: the grid renames runs (a swept key or variants added).
      for (const SweepRun& r : grid.runs)
        if (run_difference(b, r).empty())
          throw usage_error("sweep: --extend: " + dir + "'s run " + b.id + " would be renamed " + r.id + " by " + name +
                            renamed_why(before, grid) +
                            "; an extension adds seeds or variants and keeps every run's id: give the directory's "
                            "swept keys and variants, or start the new grid in another --out");
      throw usage_error("sweep: --extend: " + dir + "'s run " + b.id + " is not in " + name +
                        " with these options, under its id or any other (" + std::to_string(grid.runs.size()) +
                        " runs, e.g. " + (grid.runs.empty() ? std::string("none") : grid.runs[0].id) +
                        "); an extension keeps every run of the directory (give all its seeds and "
                        "variants, and the same swept lists, plus the new ones)");
    }
    const std::string diff = run_difference(b, *it->second);
    if (!diff.empty())
      throw usage_error("sweep: --extend: " + dir + "'s run " + b.id + " would change (" + diff +
                        "); an extension adds runs and changes none");
  }
  std::set<std::string> old_ids;
  for (const SweepRun& b : before.runs) old_ids.insert(b.id);
  std::vector<std::string> added;
  for (const SweepRun& r : grid.runs)
    if (!old_ids.count(r.id)) added.push_back(r.id);
  if (added.empty()) return 0;
  // The previous experiment stays beside the new one; the log says what changed, when and how.
  int n = 1;
  while (fs::exists(fs::path(dir) / ("grid-before-extension-" + std::to_string(n) + ".ini"))) ++n;
  const std::string kept = (fs::path(dir) / ("grid-before-extension-" + std::to_string(n) + ".ini")).string();
  text_write_atomic(kept, read_all(path));
  std::string ids;
  for (size_t i = 0; i < added.size() && i < 20; ++i) ids += (i ? ", " : "") + added[i];
  if (added.size() > 20) ids += ", ...";
  const std::string log = read_all(sweep_experiment_log_path(dir)) + utc_now() + ": extension " + std::to_string(n) +
                          ": " + std::to_string(added.size()) + " run" + (added.size() == 1 ? "" : "s") + " added (" +
                          ids + ") by `" + text_shown(command, 400) + "`; the grid before: " +
                          fs::path(kept).filename().string() + "\n";
  text_write_atomic(sweep_plan_path(dir), plan_text);
  text_write_atomic(path, grid.resolved);
  text_write_atomic(sweep_experiment_log_path(dir), log);
  return static_cast<int>(added.size());
}

}  // namespace moerl
