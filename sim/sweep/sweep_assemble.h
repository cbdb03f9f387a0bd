// sweep_assemble.h — the index of a sweep directory assembled from what is on disk: its plan
// (plan.csv, sweep_index.h: every run of the grid), each run's results file (status, steps,
// headline numbers) and the note a failed array task leaves (<id>.failed.txt). Array tasks
// (`moerl sweep GRID --task K`) write only their own run's files; `moerl sweep --index-only`,
// `moerl inspect DIR` and `moerl report DIR` assemble the index from them, so no index is ever
// written by two processes at once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/sweep/sweep_index.h"

namespace moerl {

class H5File;

// A [steps] metric of a results file ("metrics/reward_mean"); empty when absent or not 1-D.
std::vector<double> sweep_read_series(const H5File& f, const std::string& name);
// Its last finite value, or kSweepNaN.
double sweep_last_finite(const H5File& f, const std::string& name);

// The step that collapsed, counted from 1 as steps are (the file's root attribute collapse_step is
// the 0-based index into its step datasets); -1: none.
int64_t sweep_collapse_step_of(const H5File& f);

// Why a results file whose root attribute `scenario` is `stored` is not the run a plan row expects:
// "" when it is, else the keys that differ, as "1 key differs (the plan's → the file's): ...".
// `planned` is that run's effective scenario as the directory's experiment makes it (compared
// whole, run_scenario_diff); "" when the directory records none (an older directory): then the
// row's swept keys are compared with the stored values (numbers by value: 1e-4 is 0.0001). A file
// of the format before runs recorded their scenario (`stored` empty) cannot be checked: "".
std::string sweep_run_mismatch(const std::string& stored, const std::string& planned,
                               const std::vector<std::pair<std::string, std::string>>& keys);

// The error of a "mismatched" row: names the file, the planned run and the keys (why).
std::string sweep_mismatch_message(const std::string& file, const std::string& id, const std::string& why);

// Fills row's status, steps, collapse step, final reward and eval, and seconds (the sum of the
// run's step times) from a results file; false (row untouched) when the file does not exist.
// An unreadable file (or one without a `status`: not a run's results) makes the row "unreadable"
// with the reason; a file of another run than the row's (sweep_run_mismatch against `planned`)
// makes it "mismatched", naming the file and the keys, with none of the file's numbers.
bool sweep_row_from_file(const std::string& path, SweepIndexRow* row, const std::string& planned = "");

// "<dir>/<id>.failed.txt": why an array task's run failed (removed when it succeeds).
std::string sweep_failure_path(const std::string& dir, const std::string& id);

// The index of `dir` from its plan and files: a run without a file is "pending" (or "failed" with
// its task's note), otherwise as its file says, once its file is checked against the run the
// directory's experiment (grid.ini) plans under that id ("mismatched" when it is another run).
// A run file (<name>.h5 with a run's results) that the plan does not list is indexed too, after
// the plan's rows, as "unplanned" with the reason: a row deleted from plan.csv never hides a run.
SweepIndex sweep_index_assemble(const std::string& dir);

// The index inspect and report read. `sweep`: dir holds a plan (else nothing was done: a directory
// without one is read as it is). `index`: assembled anew from the plan and the files, or, when a
// sweep is running there (the index lock is held), the index that sweep keeps current. `unsaved`:
// why the assembled index could not be written as index.json and index.csv (a read-only
// directory): the caller still uses `index`, and says so in one line.
struct SweepIndexView {
  bool sweep = false;
  SweepIndex index;
  std::string unsaved;
};
SweepIndexView sweep_index_refresh(const std::string& dir);

// One line per run of the index that is not what its name says — a file of another run
// ("mismatched") or one the plan does not list ("unplanned") — as "DIR: <the row's error>".
std::vector<std::string> sweep_index_warnings(const std::string& dir, const SweepIndex& index);

}  // namespace moerl
