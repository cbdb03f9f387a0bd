// sweep.h — runs every run of a sweep grid (sweep_grid.h) over the MPI world and keeps the sweep
// directory's index (sweep_index.h) up to date.
//
// The world splits into groups of `ranks_per_run` consecutive ranks (RankGrid, sim/comm/comms.h); each
// group does one run at a time, the run's experts and sequences spread over the group's ranks. Work is handed out dynamically by world rank 0: a group leader sends the
// report of its last run and gets the next run index back (-1: nothing left), so a slow run never
// idles the others. Rank 0 leads group 0 and runs too; it answers other leaders between two of its
// own steps (RunOptions::on_step) and between runs. With one rank everything happens in order.
//
// Before any run: rank 0 reads the directory (with `resume`, finished runs are skipped and partial
// ones resume from their checkpoints; without it, a directory that already holds results is an
// error), then every distinct base policy the remaining runs need is trained once — base j by group
// j mod G — into the cache, so no two groups ever train the same base. A run that throws is
// recorded as failed with its message; the others go on.
//
// Preemption (sim/process/preempt.h): a run whose ranks got a stop signal ends at its next step boundary,
// checkpointed, as "preempted"; once rank 0 got the signal or hears of a preempted run it hands
// out no further run, so every group stops after its current step and the sweep returns.
#pragma once

#include <string>

#include "sim/comm/comms.h"
#include "sim/sweep/sweep_grid.h"

namespace moerl {

struct SweepOptions {
  std::string out;           // the sweep directory (created)
  std::string cache_dir;     // cached base checkpoints ("" = <out>/cache)
  int ranks_per_run = 1;     // ranks per group (one run); must divide the world size
  bool resume = false;       // continue a sweep directory: skip finished runs, resume partial ones
  bool dump_tensors = false; // --dump-tensors for every run
  bool progress = true;      // rank 0 prints one line per finished run (and the live step line when alone)
  // An array task (--task K): run K only, on all the ranks, resuming it when its files exist;
  // writes the plan (when missing) and the run's own files, never the index. -1: the whole grid.
  int task = -1;
  bool index_only = false;   // run nothing: publish the plan, assemble the index from the files
  // Add this grid's new runs to the directory's experiment (sweep_experiment.h), then go on as
  // resume (or, with index_only, only record the extension). `command` is logged with it.
  bool extend = false;
  std::string command;
  // Every run checkpoints at least this often (RunOptions::checkpoint_seconds), so a SIGKILL or a
  // lost node costs at most this much work of each run in flight; 0: as the scenario says.
  double checkpoint_seconds = 300.0;
};

struct SweepSummary {
  int runs = 0, complete = 0, collapsed = 0, failed = 0;
  int preempted = 0;  // stopped by a signal (sim/process/preempt.h), resumable
  int skipped = 0;    // already finished before this invocation (resume)
  int pending = 0;    // not started (a sweep stopped by a signal before their turn; an array's runs to come)
  int running = 0;    // an array's runs whose files say running (a task in progress, or killed)
  int unreadable = 0; // an array's runs whose results file is damaged (--index-only)
  int mismatched = 0; // runs whose file holds another run than the plan's (sweep_assemble.h): left alone
  int unplanned = 0;  // run files the plan does not list (--index-only)
};

// Collective over comms.world; every rank returns the same summary.
SweepSummary sweep_execute(const Comms& comms, const SweepGrid& grid, const SweepOptions& opt);

}  // namespace moerl
