// sweep_grid.h — a sweep grid: a scenario (same sections and keys) plus a [sweep] section that
// lists values for scenario keys. It expands to the cross product of the lists × the seeds, every
// run a fully validated Scenario, before anything starts.
//
//   [sweep]
//   base = ../quickstart.ini              # optional scenario the grid starts from (relative to the grid)
//   seeds = 0, 1, 2                       # run.seed values (outermost loop)
//   rl.algorithm = grpo, gspo, r3         # any scenario key: comma-separated values
//   engines.rollout = fp8-rollout, bf16-train
//   zip = rl.algorithm + model.n_experts  # optional: these lists vary together (same length);
//                                         # several groups separated by commas
//   variants = grpo, control, r3          # optional: named variants, the first axis; each is a
//                                         # set of key overrides in its own section:
//   [variant.control]
//   engines.rollout = bf16-train
//   [variant.r3]
//   rl.algorithm = r3
//
// A variant may override any scenario key that the grid does not sweep; a listed variant without a
// section is the grid's scenario as it is. The variant's name is the run's `variant` key: it
// leads the run id, and the index has a `variant` column.
//
// A run's scenario is, from weakest to strongest: the base file, the grid's own scenario keys,
// the command line's --set overrides, the run's variant, the run's swept values. Unknown keys, malformed or
// out-of-range values in any combination reject the whole grid, with the combination named.
// Combinations that validate but fail while running (e.g. r3 on a dense model) are the sweep
// runner's business: they are recorded as failed runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/scenario/scenario.h"

namespace moerl {

struct SweepRun {
  int index = 0;   // position in the expansion; seeds outermost, then the axes in grid order
  std::string id;  // file-safe name: the swept values joined by '_' (numbers and booleans as
                   // key-value: n_experts-8), then "-seed<k>"; or run-NNNN when too long or not unique
  std::vector<std::pair<std::string, std::string>> keys;  // swept key → value, grid order, run.seed last
  Scenario scenario;
};

struct SweepGrid {
  std::string path;                     // the grid file ("" when parsed from text)
  std::string base;                     // base scenario path as resolved ("" = none)
  std::string text;                     // the grid file's text
  // The grid resolved: its base's keys, its own and the --set overrides folded into one scenario
  // part, then the [sweep] lists (the selected seeds and variants) and the selected variants'
  // sections. Self-contained (no base, no --set), it expands to the same runs with the same
  // scenarios: a sweep directory keeps it as its grid.ini, the experiment every later invocation
  // is checked against (sweep_experiment.h).
  std::string resolved;
  std::vector<std::string> swept_keys;  // grid order; run.seed last when seeds are swept
  std::vector<SweepRun> runs;
};

// What of a grid to run (moerl sweep --seeds / --variants): the same grid on other seeds, or a
// subset of its variants, with the run ids the whole grid gives them. Empty = the grid's own.
struct SweepSelection {
  std::vector<std::string> seeds;     // replaces the grid's seed list
  std::vector<std::string> variants;  // names from the grid's variants, run in the grid's order
};

// Parses grid text; `dir` resolves a relative `base`; overrides are --set "section.key=value".
// Throws std::invalid_argument naming the grid, the combination, the key and the value.
SweepGrid sweep_grid_parse(const std::string& text, const std::string& source, const std::string& dir,
                           const std::vector<std::string>& overrides = {}, const SweepSelection& select = {});
SweepGrid sweep_grid_load(const std::string& path, const std::vector<std::string>& overrides = {},
                          const SweepSelection& select = {});

// A comma-separated list of names as given to --variants; throws naming `key` on an empty item.
std::vector<std::string> sweep_name_list(const std::string& key, const std::string& text);

// A seed list as given to --seeds: "0,1,2", "100-109", or both ("0-4, 10"); throws naming `key`.
std::vector<std::string> sweep_seed_list(const std::string& key, const std::string& text);

}  // namespace moerl
