// sweep_experiment.h — a sweep directory is one experiment. Its grid.ini holds the grid resolved
// (SweepGrid::resolved: the base, the grid's keys and the --set overrides folded into one
// self-contained grid, on the selected seeds and variants), written by the first sweep or array
// task and changed only by --extend. Every later invocation — a task, --resume, --index-only — is
// checked against it: a run whose scenario, as this invocation's grid and --set make it, is not
// the directory's is refused, naming the keys that differ, before anything is written. (A grid
// file edited between two tasks of an array, a task given another --set: both would otherwise put
// two experiments into one directory under one index.)
//
// What it is not: the check of each run file against its run (every reader makes that one:
// sweep_run_mismatch, sweep_assemble.h). A directory without a resolved grid.ini (missing, or an
// older directory's grid file text) is checked by its run files alone, and gets a grid.ini only
// from a grid they all agree with: nothing is stamped on a directory whose identity is unknown.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/sweep/sweep_grid.h"

namespace moerl {

// "<dir>/grid.ini"; "<dir>/extensions.log", the record of every --extend.
std::string sweep_experiment_path(const std::string& dir);
std::string sweep_experiment_log_path(const std::string& dir);

// Whether dir's grid.ini is a resolved grid (false: none, or an older directory's grid text).
bool sweep_experiment_recorded(const std::string& dir);

// Every run of dir's recorded experiment, by run id: the scenario each run file of the directory
// must hold (sweep_assemble.h). Empty when the directory records none, or when its grid.ini no
// longer expands (then the plan's swept keys are all a reader can check).
std::map<std::string, SweepRun> sweep_experiment_runs(const std::string& dir);

// Throws usage_error when a run of `grid` (those with the given indices; all when empty) is not
// the run of the same id in dir's recorded experiment: its keys that differ (old → new), or that
// the directory has no such run. Writes nothing. A directory that records no experiment (grid.ini
// missing, or an older directory's grid text) is checked by its run files instead: each run file
// of the grid that is there must hold that run (all of them, whatever `indices`); a grid.ini that
// cannot be read is refused.
void sweep_experiment_check(const std::string& dir, const SweepGrid& grid, const std::vector<int>& indices = {});

// Records `grid` as dir's experiment when none is recorded and the run files there agree with it
// (the first of many tasks starting together writes it; the others wait, then check against it),
// else checks it (as above, for the runs `indices`).
void sweep_experiment_publish(const std::string& dir, const SweepGrid& grid, const std::vector<int>& indices = {});

// --extend: `grid` (with its plan, plan_text: sweep_plan_text) becomes dir's experiment, provided it keeps every run the directory's plan
// lists, each with its scenario unchanged (else usage_error naming the run and the keys); the
// plan (plan.csv) and grid.ini are replaced, the previous grid.ini is kept as
// grid-before-extension-<n>.ini, and a line in extensions.log says when, which runs were added
// and by what command line. Returns the number of runs added (0: nothing changes, nothing logged).
int sweep_experiment_extend(const std::string& dir, const SweepGrid& grid, const std::string& plan_text,
                            const std::string& command);

}  // namespace moerl
