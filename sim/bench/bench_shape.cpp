// bench_shape.cpp — see bench_shape.h.
#include "sim/bench/bench_shape.h"

#include <boost/program_options.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "sim/io/text_io.h"
#include "sim/rl/rl_config.h"
#include "sim/tasks/task.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

using Entries = std::vector<std::pair<std::string, std::string>>;  // "section.key" → value, file order

Entries ini_entries(const std::string& text, const std::string& source) {
  Entries out;
  try {
    std::istringstream in(text_strip_bom(text));
    for (const po::option& o : po::parse_config_file(in, po::options_description(), true).options)
      out.push_back({o.string_key, o.value.empty() ? "" : o.value.front()});
  } catch (const po::error& e) {
    throw std::invalid_argument(source + ": " + text_visible(e.what()));
  }
  return out;
}

bool names_bench(const std::string& key) { return key.rfind("bench.", 0) == 0; }

bool is_grid_key(const std::string& key) { return key.rfind("sweep.", 0) == 0 || key.rfind("variant.", 0) == 0; }

// The entries as scenario text: "[section]" (everything before the key's last dot) + "key = value".
std::string ini_text(const Entries& entries) {
  std::string text;
  for (const auto& [k, v] : entries) {
    const size_t dot = k.rfind('.');
    text += "[" + k.substr(0, dot) + "]\n" + k.substr(dot + 1) + " = " + v + "\n";
  }
  return text;
}

// A grid's scenario: its base file's entries, overlaid by the grid's own (not [sweep], not variants).
Entries grid_scenario_entries(const Entries& grid, const std::string& path) {
  std::map<std::string, size_t> at;  // key → position in merged
  Entries merged;
  auto put = [&](const std::string& k, const std::string& v) {
    if (auto it = at.find(k); it != at.end()) merged[it->second].second = v;
    else at[k] = merged.size(), merged.push_back({k, v});
  };
  for (const auto& [k, v] : grid)
    if (k == "sweep.base") {
      std::filesystem::path bp(v);
      if (bp.is_relative()) bp = std::filesystem::path(path).parent_path() / bp;
      const std::string base = bp.lexically_normal().string();
      for (const auto& [bk, bv] : ini_entries(text_read_input(base, "scenario file", kScenarioMaxBytes), base)) put(bk, bv);
    }
  for (const auto& [k, v] : grid)
    if (!is_grid_key(k)) put(k, v);
  return merged;
}

}  // namespace

BenchShape bench_shape_from_section(const Scenario& s) {
  const BenchConfig& bc = s.bench;
  BenchShape sh{bc.sequences, bc.prompt_len, bc.decode_steps, bc.seq_len, 1, false, "[bench]"};
  const int max_len = s.model.max_seq_len;
  if (sh.T > max_len || sh.P + sh.R > max_len)
    throw std::invalid_argument(
        "bench.seq_len = " + std::to_string(sh.T) + ", bench.prompt_len + bench.decode_steps = " +
        std::to_string(sh.P + sh.R) + ": both must be <= model.max_seq_len = " + std::to_string(max_len));
  if (sh.P + sh.R != sh.T)
    throw std::invalid_argument("bench.prompt_len + bench.decode_steps = " + std::to_string(sh.P + sh.R) +
                                " must equal bench.seq_len = " + std::to_string(sh.T) +
                                " (the train step runs over the rollout's sequences)");
  return sh;
}

BenchShape bench_shape_derive(const Scenario& s) {
  const std::unique_ptr<Task> task = task_create(s.task);
  BenchShape sh;
  sh.B = s.rl.prompts_per_step * s.rl.group_size;
  sh.P = task->prompt_len();
  sh.R = rl_response_limit(s.rl, *task);
  sh.T = sh.P + sh.R;
  sh.minibatches = s.rl.minibatches;
  sh.derived = true;
  sh.from = "rl.prompts_per_step x rl.group_size = " + std::to_string(s.rl.prompts_per_step) + " x " +
            std::to_string(s.rl.group_size) + " sequences, task." + s.task.name + " prompt " + std::to_string(sh.P) +
            (s.rl.max_response_len > 0 ? ", rl.max_response_len " : ", its longest answer ") + std::to_string(sh.R) +
            ", rl.minibatches " + std::to_string(sh.minibatches);
  if (sh.T > s.model.max_seq_len)
    throw std::invalid_argument("bench: the scenario's RL step (task." + s.task.name + " prompt " +
                                std::to_string(sh.P) + " + response limit " + std::to_string(sh.R) + " = " +
                                std::to_string(sh.T) + " tokens) must fit model.max_seq_len = " +
                                std::to_string(s.model.max_seq_len));
  if (sh.B < sh.minibatches)
    throw std::invalid_argument("bench: rl.minibatches = " + std::to_string(sh.minibatches) + ": must be <= the " +
                                std::to_string(sh.B) + " sequences of a rollout");
  return sh;
}

Scenario bench_scenario_load(const std::string& path, const std::vector<std::string>& overrides, bool* has_bench) {
  const Entries file = ini_entries(text_read_input(path, "scenario file", kScenarioMaxBytes), path);
  bool grid = false;
  for (const auto& [k, v] : file) grid = grid || is_grid_key(k);
  const Entries entries = grid ? grid_scenario_entries(file, path) : file;
  *has_bench = false;
  for (const auto& [k, v] : entries) *has_bench = *has_bench || names_bench(k);
  for (const std::string& o : overrides) *has_bench = *has_bench || names_bench(o);
  if (!grid) return Scenario::load(path, overrides);
  return Scenario::parse(ini_text(entries), path + " (its scenario: the base and the grid's keys, without [sweep])",
                         overrides);
}

}  // namespace moerl
