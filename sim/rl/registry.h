// registry.h — the RL variants by name, one table per kind (LAMMPS styles: `fix nve` → FixNVE):
// algorithms (rl.algorithm) and rollout corrections (rl.correction). A row holds everything the
// rest of the program knows about a variant: its name, factory or weights, defaults, doc line and
// the extra metrics it reports. Lists of names, "must be …" messages and key docs are derived
// from the tables. Adding a variant: docs/architecture.md, "Adding an algorithm / a correction".
#pragma once

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

// A row: everything the program knows of one rl.algorithm. A variant that only changes defaults
// or forces a choice (r3) is a row alone: it names the row whose loss it runs (`loss_of`) instead
// of a factory of its own, and its Algorithm is that row's (name() included).
struct AlgorithmInfo {
  const char* name;                                       // rl.algorithm
  const char* doc;                                        // one line: what it is, its source
  std::unique_ptr<Algorithm> (*create)(const LossConfig&) = nullptr;  // sim/rl/<name>.cpp
  const char* loss_of = nullptr;                          // or: the row whose factory it uses
  float clip_low = 0.2f, clip_high = 0.2f;                // defaults of rl.clip_low / rl.clip_high
  std::optional<RoutingReplay> routing_replay = {};       // forced rl.routing_replay (r3)
  std::optional<Correction> correction = {};              // forced correction (icepop)
  std::vector<ExtraMetric> metrics = {};                  // written by the algorithm's record()
};

// The algorithms, in alphabetical order.
const std::vector<AlgorithmInfo>& algorithm_registry();
// The row of `name`, or nullptr.
const AlgorithmInfo* algorithm_find(const std::string& name);
std::vector<std::string> algorithm_names();
// "must be one of grpo, gspo, …": the message of a bad rl.algorithm.
std::string algorithm_must_be();
// Doc of the rl.algorithm key: "grpo | gspo | … (notes)".
std::string algorithm_key_doc();
// Doc of rl.clip_low (high = false) / rl.clip_high: every algorithm's default.
std::string algorithm_clip_doc(bool high);

class RunResults;
// Root attributes of a results file that record the resolved choices of `rl` (after
// RlConfig::resolve): algorithm, routing_replay, old_logprobs, correction, clip_low, clip_high
// (docs/hdf5-schema.md), so readers need not know any algorithm's defaults.
void algorithm_record_attrs(RunResults* res, const RlConfig& rl);
// Sets the extra metrics of every row but `algorithm`'s to their `off` values for this step.
void algorithm_record_others_off(RunResults* res, const std::string& algorithm);

}  // namespace moerl
