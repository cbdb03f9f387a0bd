// run_identity.h — what makes a run's two files one run. The results file (root attributes) and
// the run's checkpoint (attributes of group `state`) both record the run's identity: the
// scenario's hash, run.seed, the step, the format version and the rank layout (the ranks of the
// run's group). `--resume` combines the two files with the scenario and refuses, naming each
// differing field, when any of them is not the same run: a checkpoint copied from another seed's
// run, a run resumed on another number of ranks, files of an older format that do not record it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/io/results.h"
#include "sim/scenario/scenario.h"
#include "store/checkpoint.h"

namespace moerl {

// The effective text of a scenario without its comment lines: what the hash covers.
std::string run_scenario_body(const std::string& effective_text);
// Hex FNV-1a 64 of a scenario's effective text without its comment lines: the results file's
// "scenario_hash" attribute.
std::string run_scenario_hash(const std::string& effective_text);
// The keys whose values differ between two effective scenario texts, as "key: a → b" (a key
// present in one only shows "(unset)"); comment lines are ignored.
std::vector<std::string> run_scenario_diff(const std::string& before, const std::string& now);

// The identity scalars of a run's checkpoint: step, seed, ranks, scenario_hash (the int64 bit
// pattern of run_scenario_hash's 64 bits).
void run_identity_scalars(const Scenario& s, int ranks, int64_t step, CheckpointExtras* ex);

// Why a results file and checkpoint cannot be resumed by this build: a results version other than
// kResultsVersion, no scenario attribute (the format before results recorded their scenario), a
// checkpoint without the identity scalars. "" when both are in the current format. The message
// names the file and the field.
std::string run_resume_format_problem(const std::string& results, const std::string& ckpt);

// Checks that a results file of the current format (run_resume_format_problem is "") and its
// checkpoint are the run that `s` on `ranks` ranks continues: first the scenario the results
// record (run_scenario_diff against s's is empty; else the message names the first 8 keys that
// differ), then the scenario hash, seed and ranks of both files and the checkpoint's step within
// the steps of the results. Throws std::invalid_argument naming every differing field with both
// values.
void run_check_identity(const std::string& results, const std::string& ckpt, const Scenario& s, int ranks);

}  // namespace moerl
