// sweep_assemble.h — the index of a sweep directory assembled from what is on disk: its plan
// (plan.csv, sweep_index.h: every run of the grid), each run's results file (status, steps,
// headline numbers) and the note a failed array task leaves (<id>.failed.txt). Array tasks
// (`moerl sweep GRID --task K`) write only their own run's files; `moerl sweep --index-only`,
// `moerl inspect DIR` and `moerl report DIR` assemble the index from them, so no index is ever
// written by two processes at once.
#pragma once

#include <cstdint>
#include <string>
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

// Fills row's status, steps, collapse step, final reward and eval, and seconds (the sum of the
// run's step times) from a results file; false (row untouched) when the file does not exist.
// An unreadable file makes the row "unreadable" with the reason.
bool sweep_row_from_file(const std::string& path, SweepIndexRow* row);

// "<dir>/<id>.failed.txt": why an array task's run failed (removed when it succeeds).
std::string sweep_failure_path(const std::string& dir, const std::string& id);

// The index of `dir` from its plan and files: a run without a file is "pending" (or "failed" with
// its task's note), otherwise as its file says.
SweepIndex sweep_index_assemble(const std::string& dir);

// For inspect and report: when `dir` holds a plan and no sweep is writing its index (the index
// lock is free), writes index.json and index.csv assembled anew; returns whether it did.
bool sweep_index_refresh(const std::string& dir);

}  // namespace moerl
