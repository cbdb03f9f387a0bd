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
  std::string status;  // pending | running | complete | collapsed | failed
  std::vector<std::pair<std::string, std::string>> keys;  // swept key → value
  int64_t steps = 0;          // steps recorded in the results file
  int64_t collapse_step = -1;
  // final_reward_of(reward_mean) (sim/io/results.h: mean of the last 10 steps), last eval_accuracy;
  // for a running run, as far as it got (refreshed while it trains)
  double final_reward = kSweepNaN, final_eval = kSweepNaN;
  double seconds = kSweepNaN;  // wall time of the run in the invocation that last ran it
  int rank = -1;               // world rank that led the run's group (-1: not run by this invocation)
  std::string error;           // why a failed run failed
};

struct SweepIndex {
  std::string grid;                     // grid file as given
  std::string base;                     // base scenario ("" = none)
  std::vector<std::string> swept_keys;  // the key columns, grid order
  std::vector<SweepIndexRow> rows;
};

// Writes <dir>/index.json and <dir>/index.csv.
void sweep_index_write(const std::string& dir, const SweepIndex& index);
// Reads <dir>/index.csv back (every column; numbers that were empty come back as NaN).
SweepIndex sweep_index_read(const std::string& dir);
// The index as a terminal table (one line per run), for `moerl sweep` and `moerl inspect DIR`.
std::string sweep_index_table(const SweepIndex& index);

}  // namespace moerl
