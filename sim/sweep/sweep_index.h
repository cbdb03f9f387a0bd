// sweep_index.h — the index of a sweep directory: one row per run with its swept keys, file,
// status and headline numbers, written as index.json and index.csv (each atomically: temporary
// name, then rename) whenever a run starts or ends, so the directory always describes itself.
// Layout and columns: docs/sweeps.md, "The sweep directory".
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace moerl {

inline constexpr double kSweepNaN = std::numeric_limits<double>::quiet_NaN();

struct SweepIndexRow {
  int index = 0;
  std::string id;      // run id (sweep_grid.h)
  std::string file;    // results file, relative to the sweep directory
  // pending | running | complete | collapsed | failed | preempted (stopped by a signal, resumable;
  // sim/process/preempt.h). Assembled from files (sweep_assemble.h), "running" is also a run whose process
  // was killed: resumable as well; "unreadable", a run whose results file is damaged; "mismatched",
  // a run whose file holds another scenario than the plan's (a swapped or copied-in file: never
  // counted as the planned run, never overwritten); "unplanned", a run file the plan does not list.
  std::string status;
  std::vector<std::pair<std::string, std::string>> keys;  // swept key → value
  int64_t steps = 0;          // steps recorded in the results file
  int64_t collapse_step = -1;  // counted from 1 as steps are (sweep_collapse_step_of); -1: none
  // final_reward_of(reward_mean) (sim/io/results.h: mean of the last 10 steps), last eval_accuracy;
  // for a running run, as far as it got (refreshed while it trains)
  double final_reward = kSweepNaN, final_eval = kSweepNaN;
  double seconds = kSweepNaN;  // wall time of the run in the invocation that last ran it
  int rank = -1;               // world rank that led the run's group (-1: not run by this invocation)
  std::string error;           // why a failed run failed (a mismatched run: the keys that differ)
  // The planned run's scenario hash (run_scenario_hash of its effective scenario; "" when the
  // directory does not record it): index.json only, so readers of the index (analysis/runs.py)
  // check each run file's scenario_hash against the run it fills.
  std::string scenario_hash;
};

struct SweepIndex {
  std::string grid;                     // grid file as given
  std::string base;                     // base scenario ("" = none)
  std::vector<std::string> swept_keys;  // the key columns, grid order
  std::vector<SweepIndexRow> rows;
};

// Writes <dir>/index.json and <dir>/index.csv.
void sweep_index_write(const std::string& dir, const SweepIndex& index);
// index.json's text.
std::string sweep_index_json(const SweepIndex& index);
// Reads <dir>/index.csv back (every column; numbers that were empty come back as NaN).
SweepIndex sweep_index_read(const std::string& dir);
// index.csv's text.
std::string sweep_index_csv(const SweepIndex& index);

// The plan of a sweep directory, <dir>/plan.csv: every run of the grid (index, id, file, keys) as
// index rows, all "pending", with the grid and base in two header lines. Written once by whichever
// sweep or array task comes first, never changed, so array tasks write no shared file but their own
// runs'; the index is assembled from it and the run files (sweep_assemble.h).
std::string sweep_plan_path(const std::string& dir);
std::string sweep_plan_text(const SweepIndex& index);
SweepIndex sweep_plan_read(const std::string& dir);
// Writes the plan unless the directory has it already; throws naming the directory when the plan
// there lists other runs (another grid, other --seeds or --variants).
void sweep_plan_publish(const std::string& dir, const SweepIndex& index);
// The same refusal without the write (nothing when the directory has no plan): checked before any
// other check may refuse, so a refused command writes nothing.
void sweep_plan_check(const std::string& dir, const SweepIndex& index);

// The index as a terminal table (one line per run), for `moerl sweep` and `moerl inspect DIR`.
std::string sweep_index_table(const SweepIndex& index);

}  // namespace moerl
