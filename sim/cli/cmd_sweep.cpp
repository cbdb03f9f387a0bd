// cmd_sweep.cpp — `moerl sweep GRID.ini [--out DIR] [--seeds LIST] [--ranks-per-run N] [--resume]`: every run of
// a grid (sim/sweep/sweep_grid.h) over the MPI world (sim/sweep/sweep.h), one results file per run and an
// index (sim/sweep/sweep_index.h) in DIR. Exit status 1 when any run failed.
#include <cstdio>
#include <filesystem>

#include "sim/cli/cli.h"
#include "sim/sweep/sweep.h"
#include "sim/sweep/sweep_index.h"

namespace po = boost::program_options;

namespace moerl {

int cmd_sweep(const Comms& comms, const std::vector<std::string>& args) {
  std::string grid_path;
  SweepOptions opt;
  std::vector<std::string> sets;
  std::string seeds, variants;
  bool dry_run = false, quiet = false;
  po::options_description desc("moerl sweep options");
  desc.add_options()
      ("grid", po::value(&grid_path)->required(), "grid file: a scenario plus a [sweep] section (positional)")
      ("out", po::value(&opt.out), "sweep directory (default results/<grid name>)")
      ("ranks-per-run", po::value(&opt.ranks_per_run)->default_value(1), "MPI ranks per run (must divide the rank count)")
      ("resume", po::bool_switch(&opt.resume), "continue the sweep in --out: skip finished runs, resume partial ones")
      ("cache", po::value(&opt.cache_dir), "directory of cached base checkpoints (default <out>/cache)")
      ("seeds", po::value(&seeds), "run the grid on these seeds instead of its own: 0,1,2 or 100-109")
      ("variants", po::value(&variants), "run only these of the grid's variants: grpo,control (same run ids)")
      ("dump-tensors", po::bool_switch(&opt.dump_tensors), "write per-token RL tensors in every run")
      ("dry-run", po::bool_switch(&dry_run), "validate the grid and list its runs; run nothing")
      ("quiet", po::bool_switch(&quiet), "print only the final table");
  cli_add_set_option(&desc, &sets);
  po::positional_options_description pos;
  pos.add("grid", 1);
  po::variables_map vm;
  bool go = true;
  SweepGrid grid;
  // Bad options or grid: one message, every rank exits with it (no MPI_Abort).
  comms_checked(comms, [&] {
    go = cli_parse(comms, "sweep", "GRID.ini [--out DIR] [--seeds LIST] [--variants LIST] [--ranks-per-run N] [--resume] [--set section.key=value]...",
                   desc, pos, args, &vm);
    if (!go) return;
    if (opt.ranks_per_run < 1)
      throw usage_error("sweep: --ranks-per-run " + std::to_string(opt.ranks_per_run) + ": must be >= 1");
    SweepSelection select;
    // Given, even empty: an empty list is refused, not read as "the grid's own" (it is not what was asked).
    if (vm.count("seeds")) select.seeds = sweep_seed_list("--seeds", seeds);
    if (vm.count("variants")) select.variants = sweep_name_list("--variants", variants);
    grid = sweep_grid_load(grid_path, sets, select);
  });
  if (!go) return 0;
  if (opt.out.empty()) opt.out = "results/" + std::filesystem::path(grid_path).stem().string();
  opt.progress = !quiet;
  if (dry_run) {
    if (!comms.is_root) return 0;
    std::printf("%zu runs (all validate) → %s\n", grid.runs.size(), opt.out.c_str());
    for (const SweepRun& r : grid.runs) {
      std::string keys;
      for (const auto& [k, v] : r.keys) keys += "  " + k + "=" + v;
      std::printf("%4d  %-40s%s\n", r.index, (r.id + ".h5").c_str(), keys.c_str());
    }
    return 0;
  }
  const SweepSummary sum = sweep_execute(comms, grid, opt);
  if (comms.is_root) {
    std::fputs(sweep_index_table(sweep_index_read(opt.out)).c_str(), stdout);
    std::printf("moerl sweep: %d runs (%d complete, %d collapsed, %d failed%s) → %s/index.csv\n"
                "  report: moerl report %s\n",
                sum.runs, sum.complete, sum.collapsed, sum.failed,
                sum.skipped ? (", " + std::to_string(sum.skipped) + " finished before").c_str() : "",
                opt.out.c_str(), opt.out.c_str());
  }
  return sum.failed > 0 ? 1 : 0;
}

}  // namespace moerl
