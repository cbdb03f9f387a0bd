// registry.h — the RL variants by name, one table per kind (LAMMPS styles: `fix nve` → FixNVE):
// algorithms (rl.algorithm) and rollout corrections (rl.correction). A row holds everything the
// rest of the program knows about a variant: its name, factory, defaults, forced choices, keys of
// its own, doc line and the extra metrics it reports. Lists of names, "must be …" messages and key
// docs are derived from the tables.
//
// An algorithm's row lives in its own file, sim/rl/<name>.cpp, which registers it with
// MOERL_REGISTER_ALGORITHM: no central table, CMake list or docs list names it. sim/CMakeLists.txt
// links every file under sim/rl/ that registers a row into each program (an object library: a
// static library would drop a file nothing calls), and tests/rl/test_registry.cpp checks that
// every registration in those files is a row. Adding one: docs/architecture.md, "Adding an
// algorithm".
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/rl/loss.h"
#include "sim/rl/rl_config.h"

namespace moerl {

// A metric a variant reports beside the common ones. Every run records it, so runs of different
// variants have the same columns: `off` is its value in runs without the variant.
struct ExtraMetric {
  const char* name;
  double off;
  const char* doc;
};

// A key of the [rl] section that one algorithm reads and no other: rl.<key> (sapo_tau_pos). Its
// value is LossConfig::param(key). It is written in a run's effective scenario only when the run's
// algorithm reads it, so a new algorithm's keys leave every other run's scenario (and
// scenario_hash) as it was; setting it under another algorithm is an error that says which reads it.
struct AlgorithmParam {
  const char* key;      // without "rl."; by convention it starts with the algorithm's name
  float value;          // the default
  const char* doc;
  float lo = -std::numeric_limits<float>::infinity();  // allowed: lo <= v (lo < v when lo_open) ...
  float hi = std::numeric_limits<float>::infinity();   // ... and v <= hi
  bool lo_open = false;
  bool boolean = false;  // a true/false key (stored as 1/0)
};

// A row: everything the program knows of one rl.algorithm. A variant that only changes defaults
// or forces a choice (r3) is a row alone: it names the row whose loss it runs (`loss_of`) instead
// of a factory of its own, and its Algorithm is that row's (name() included).
struct AlgorithmInfo {
  const char* name = nullptr;                             // rl.algorithm (set by the registration)
  const char* doc = nullptr;                              // one line: what it is, its source
  std::unique_ptr<Algorithm> (*create)(const LossConfig&) = nullptr;  // in sim/rl/<name>.cpp
  const char* loss_of = nullptr;                          // or: the row whose factory it uses
  float clip_low = 0.2f, clip_high = 0.2f;                // defaults of rl.clip_low / rl.clip_high
  std::optional<RoutingReplay> routing_replay = {};       // forced rl.routing_replay (r3)
  std::optional<Correction> correction = {};              // forced correction (icepop): its own,
                                                          // refused by rl.correction
  // Scenario keys, "rl.key = value": `defaults` apply where the scenario does not give the key
  // (the run's effective scenario records them); `forced` ones too, and a scenario that gives
  // another value is refused ("rl.algorithm = minirl means rl.adv_std_norm = false"). A loss_of
  // row's lists apply first. They are read by Scenario::parse (sim/scenario/), so a RlConfig built
  // in code sets those keys itself.
  std::vector<const char*> defaults = {};
  std::vector<const char*> forced = {};
  std::vector<AlgorithmParam> params = {};                // keys of its own (a loss_of row: its row's)
  std::vector<ExtraMetric> metrics = {};                  // written by the algorithm's record()
};

// Adds a row at static initialisation (MOERL_REGISTER_ALGORITHM); a second row of one name is a
// fatal error.
struct AlgorithmRegistrar {
  AlgorithmRegistrar(const char* name, AlgorithmInfo info);
};
// In sim/rl/<name>.cpp, at namespace scope and at the start of a line:
//   MOERL_REGISTER_ALGORITHM(name, {.doc = "...", .create = make_name, ...});
// The row's name is the identifier (the scenario's rl.algorithm value).
#define MOERL_REGISTER_ALGORITHM(id, ...) \
  static const ::moerl::AlgorithmRegistrar moerl_algorithm_row_##id(#id, ::moerl::AlgorithmInfo __VA_ARGS__)

// The algorithms, in alphabetical order (the order of every list derived from them).
const std::vector<AlgorithmInfo>& algorithm_registry();
// The row of `name`, or nullptr.
const AlgorithmInfo* algorithm_find(const std::string& name);
// The row whose factory and keys `a` uses: itself, or its loss_of row.
const AlgorithmInfo& algorithm_loss_row(const AlgorithmInfo& a);
std::vector<std::string> algorithm_names();
// "must be one of grpo, gspo, …": the message of a bad rl.algorithm.
std::string algorithm_must_be();
// Doc of the rl.algorithm key: "grpo | gspo | … (notes)".
std::string algorithm_key_doc();
// Doc of rl.clip_low (high = false) / rl.clip_high: every algorithm's default.
std::string algorithm_clip_doc(bool high);
// The param `key` (without "rl.") of any row, and the names of the rows that read it ("sapo").
const AlgorithmParam* algorithm_param_find(const std::string& key);
std::string algorithm_param_readers(const std::string& key);
// Does the algorithm `name` read the param `key`?
bool algorithm_reads_param(const std::string& name, const std::string& key);

class RunResults;
// Root attributes of a results file that record the resolved choices of `rl` (after
// RlConfig::resolve): algorithm, routing_replay, old_logprobs, correction, clip_low, clip_high
// (docs/hdf5-schema.md), so readers need not know any algorithm's defaults.
void algorithm_record_attrs(RunResults* res, const RlConfig& rl);
// Sets the extra metrics of every row but `algorithm`'s to their `off` values for this step.
void algorithm_record_others_off(RunResults* res, const std::string& algorithm);

}  // namespace moerl
