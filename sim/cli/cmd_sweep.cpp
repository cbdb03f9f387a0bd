// cmd_sweep.cpp — `moerl sweep GRID.ini [--out DIR] [--seeds LIST] [--ranks-per-run N] [--resume]`: every run of
// a grid (sim/sweep/sweep_grid.h) over the MPI world (sim/sweep/sweep.h), one results file per run and an
// index (sim/sweep/sweep_index.h) in DIR. For job arrays: `--list` (the runs, one line each), `--task K` /
// `--task-from-env` (run K alone), `--index-only` (the index from the files, sim/sweep/sweep_assemble.h).
// Exit status 1 when any run failed, kExitPreempted (sim/process/preempt.h) when a signal stopped runs.
#include <cstdio>
#include <filesystem>

#include <cstdlib>
#include <string>

#include "sim/cli/cli.h"
#include "sim/jobs/run.h"
#include "store/path_checks.h"
#include "sim/process/preempt.h"
#include "sim/sweep/sweep.h"
#include "sim/sweep/sweep_assemble.h"
#include "sim/sweep/sweep_index.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

const char* kSweepUsage =
    "GRID.ini [--out DIR] [--seeds LIST] [--variants LIST] [--ranks-per-run N] [--resume] [--set section.key=value]...";

struct SweepArgs {
  ScenarioArgs grid;
  SweepOptions opt;
  std::string seeds, variants;
  bool dry_run = false, quiet = false, list = false, task_from_env = false;
  int task = -1;
};

void sweep_add_options(po::options_description* desc, SweepArgs* a) {
  SweepOptions& opt = a->opt;
  cli_add_scenario_args(desc, &a->grid, "grid", "grid file: a scenario plus a [sweep] section (positional)");
  desc->add_options()
      ("out", po::value(&opt.out), "sweep directory (default results/<grid name>)")
      ("ranks-per-run", po::value(&opt.ranks_per_run)->default_value(1), "MPI ranks per run (must divide the rank count)")
      ("resume", po::bool_switch(&opt.resume), "continue the sweep in --out: skip finished runs, resume partial ones")
      ("cache", po::value(&opt.cache_dir)->default_value(kCliCacheDefault), kCliCacheDoc)
      ("seeds", po::value(&a->seeds), "run the grid on these seeds instead of its own: 0,1,2 or 100-109")
      ("variants", po::value(&a->variants), "run only these of the grid's variants: grpo,control (same run ids)")
      ("dump-tensors", po::bool_switch(&opt.dump_tensors), "write per-token RL tensors in every run")
      ("dry-run", po::bool_switch(&a->dry_run), "validate the grid and list its runs; run nothing")
      ("list", po::bool_switch(&a->list), "print the number of runs, then one line per run: index, id, variant, values, seed (for job arrays)")
      ("task", po::value(&a->task), "run only run K of the grid (0-based, as --list numbers them), resuming it if its file exists; writes no index")
      ("task-from-env", po::bool_switch(&a->task_from_env), "--task from SLURM_ARRAY_TASK_ID (a SLURM job array task)")
      ("index-only", po::bool_switch(&opt.index_only), "run nothing: write --out's index from its run files (array tasks write none)")
      ("extend", po::bool_switch(&opt.extend),
       "add this grid's new runs (more seeds or variants) to the sweep in --out, keeping every run it has unchanged; recorded in --out/extensions.log (docs/sweeps.md)")
      ("checkpoint-interval", po::value(&opt.checkpoint_seconds)->default_value(300.0),
       "checkpoint every run at least every this many seconds, bounding the work a kill or lost node costs (0: only as rl.checkpoint_every says)")
      ("quiet", po::bool_switch(&a->quiet), "print only the final table");
}

// --task-from-env: the run index SLURM_ARRAY_TASK_ID holds.
int sweep_task_from_env() {
  const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
  if (!id || !*id)
    throw usage_error("sweep: --task-from-env: SLURM_ARRAY_TASK_ID is not set (not a SLURM array task; use --task K)");
  char* end = nullptr;
  const long k = std::strtol(id, &end, 10);
  if (*end || k < 0 || k > 1000000000)
    throw usage_error(std::string("sweep: --task-from-env: SLURM_ARRAY_TASK_ID = '") + id +
                      "': must be a run index >= 0 (sbatch --array=0-N)");
  return static_cast<int>(k);
}

// The options that exclude or constrain each other; sets a->task from the environment.
void sweep_check_options(const po::variables_map& vm, SweepArgs* a) {
  const SweepOptions& opt = a->opt;
  if (opt.ranks_per_run < 1)
    throw usage_error("sweep: --ranks-per-run " + std::to_string(opt.ranks_per_run) + ": must be >= 1");
  if (vm.count("task") && a->task_from_env) throw usage_error("sweep: --task and --task-from-env: give one of them");
  if (vm.count("task") && a->task < 0)
    throw usage_error("sweep: --task " + std::to_string(a->task) + ": must be a run index >= 0 (moerl sweep GRID --list)");
  if (a->task_from_env) a->task = sweep_task_from_env();
  if ((a->task >= 0) + opt.index_only + a->list + a->dry_run > 1)
    throw usage_error("sweep: --task, --index-only, --list and --dry-run exclude each other");
  if (opt.extend && (a->task >= 0 || a->list || a->dry_run))
    throw usage_error("sweep: --extend with --task, --list or --dry-run: extend with the whole sweep (or --index-only), then run tasks");
  if ((a->task >= 0 || opt.index_only) && opt.resume)
    throw usage_error(std::string("sweep: --resume with ") +
                      (opt.index_only ? "--index-only: it runs nothing" : "--task: a task always resumes its run"));
  if (!(opt.checkpoint_seconds >= 0))
    throw usage_error("sweep: --checkpoint-interval " + std::to_string(opt.checkpoint_seconds) + ": must be >= 0 seconds");
}

// Phase 1: options and the grid, validated whole; bad options or grid: one message, every rank
// exits with it (no MPI_Abort). False when --help was asked.
bool sweep_parse(const Comms& comms, const std::vector<std::string>& args, SweepArgs* a, SweepGrid* grid) {
  po::options_description desc("moerl sweep options");
  sweep_add_options(&desc, a);
  po::variables_map vm;
  bool go = true;
  comms_checked(comms, [&] {
    go = cli_parse(comms, "sweep", kSweepUsage, desc, a->grid.positional, args, &vm);
    if (!go) return;
    sweep_check_options(vm, a);
    // a --cache that cannot hold the base policies fails every run: refused before anything is written
    if (!a->list && !a->dry_run) path_check_output_dir(a->opt.cache_dir, "--cache");
    SweepSelection select;
    // Given, even empty: an empty list is refused, not read as "the grid's own" (it is not what was asked).
    if (vm.count("seeds")) select.seeds = sweep_seed_list("--seeds", a->seeds);
    if (vm.count("variants")) select.variants = sweep_name_list("--variants", a->variants);
    *grid = sweep_grid_load(a->grid.path, a->grid.sets, select);
    // what every run then checks on its ranks, checked here for all of them (--dry-run too)
    for (const SweepRun& r : grid->runs) {
      try {
        run_check_ranks(r.scenario, a->opt.ranks_per_run);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("sweep: run " + r.id + " with --ranks-per-run " +
                                    std::to_string(a->opt.ranks_per_run) + ": " + e.what());
      }
    }
  });
  a->opt.task = a->task;
  if (a->opt.out.empty()) a->opt.out = "results/" + std::filesystem::path(a->grid.path).stem().string();
  a->opt.progress = !a->quiet;
  return go;
}

// --dry-run: the runs of the valid grid, with their keys.
void sweep_print_dry_run(const SweepGrid& grid, const std::string& out) {
  std::printf("%zu runs (all validate) → %s\n", grid.runs.size(), out.c_str());
  for (const SweepRun& r : grid.runs) {
    std::string keys;
    for (const auto& [k, v] : r.keys) keys += "  " + k + "=" + v;
    std::printf("%4d  %-40s%s\n", r.index, (r.id + ".h5").c_str(), keys.c_str());
  }
}

// --list: tab-separated after the count line, so job scripts read it: the count with
// `head -1 | cut -d' ' -f1`, a task's id with `awk -F'\t' '$1 == K {print $2}'`.
void sweep_print_list(const SweepGrid& grid) {
  std::printf("%zu runs (index, id, variant, values, seed)\n", grid.runs.size());
  for (const SweepRun& r : grid.runs) {
    std::string variant = "-", values, seed = "-";
    for (const auto& [k, v] : r.keys) {
      if (k == "variant") variant = v;
      else if (k == "run.seed") seed = v;
      else values += (values.empty() ? "" : " ") + k + "=" + v;
    }
    if (seed == "-") seed = std::to_string(r.scenario.run.seed);
    std::printf("%d\t%s\t%s\t%s\t%s\n", r.index, r.id.c_str(), variant.c_str(), values.empty() ? "-" : values.c_str(),
                seed.c_str());
  }
}

// The final table and the line under it: every run counted under the state it is in.
void sweep_print_summary(const SweepSummary& sum, const std::string& out, bool stopped) {
  std::fputs(sweep_index_table(sweep_index_read(out)).c_str(), stdout);
  const auto count = [](int n, const char* what) { return n ? ", " + std::to_string(n) + " " + what : std::string(); };
  std::string next = "report: moerl report " + out;
  if (stopped)
    next = std::string("stopped by ") + (preempt_signal_name()[0] ? preempt_signal_name() : "another rank's signal") +
           (sum.complete + sum.collapsed + sum.failed + sum.preempted - sum.skipped > 0 ? "" : " before any run started") +
           " (exit status " + std::to_string(kExitPreempted) + "); continue with: moerl sweep GRID --resume --out " + out;
  std::printf("moerl sweep: %d runs (%d complete, %d collapsed, %d failed%s%s%s%s) → %s/index.csv\n  %s\n", sum.runs,
              sum.complete, sum.collapsed, sum.failed, count(sum.preempted, "preempted").c_str(),
              (count(sum.running, "running") + count(sum.unreadable, "unreadable") +
               count(sum.mismatched, "mismatched") + count(sum.unplanned, "unplanned")).c_str(),
              count(sum.pending, "not started").c_str(),
              count(sum.skipped, "finished before").c_str(), out.c_str(), next.c_str());
}

}  // namespace

int cmd_sweep(const Comms& comms, const std::vector<std::string>& args) {
  SweepArgs a;
  SweepGrid grid;
  if (!sweep_parse(comms, args, &a, &grid)) return 0;
  a.opt.command = "moerl sweep " + cli_join(args, " ");
  if (a.dry_run || a.list) {
    if (comms.is_root) a.dry_run ? sweep_print_dry_run(grid, a.opt.out) : sweep_print_list(grid);
    return 0;
  }
  const SweepSummary sum = sweep_execute(comms, grid, a.opt);
  // A stop signal on any rank, whatever phase it reached (base policies, between runs): exit 75,
  // so a job script requeues the sweep rather than take it for done (sim/preempt.h).
  const bool stopped = sum.preempted > 0 || comms_agree_exit(comms, preempt_requested() ? 1 : 0) != 0;
  // --index-only did its job whatever the runs' states (the table says them).
  const int status = stopped ? kExitPreempted : a.opt.index_only ? 0 : sum.failed > 0 ? 1 : 0;
  if (a.opt.task >= 0) return status;  // the task printed its line; it writes no index to show
  if (comms.is_root) sweep_print_summary(sum, a.opt.out, stopped);
  // Files of other runs under planned names were left alone and not counted: named, as an error
  // of --resume (their runs are not done), as a warning of --index-only (it did its job).
  if (sum.mismatched + sum.unplanned > 0 && !stopped) {
    comms_checked(comms, [&] {
      if (!comms.is_root) return;
      const std::vector<std::string> w = sweep_index_warnings(a.opt.out, sweep_index_read(a.opt.out));
      if (a.opt.index_only) {
        for (const std::string& line : w) std::fprintf(stderr, "moerl: warning: sweep: %s\n", line.c_str());
      } else if (!w.empty()) {
        throw ExitError(1, "sweep: " + w[0] + (w.size() > 1 ? " (and " + std::to_string(w.size() - 1) +
                                                                 " more: " + a.opt.out + "/index.csv names each)" : ""));
      }
    });
  }
  return status;
}

}  // namespace moerl
