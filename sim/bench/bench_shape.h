// bench_shape.h — the batch `moerl bench` times as its short workload, and the scenario it comes
// from. Two sources:
//  * a [bench] section (scenarios/bench.ini, the reference workload of DESIGN.md): bench.sequences
//    × (bench.prompt_len + bench.decode_steps), trained in one batch; a scenario or --set that
//    names any bench.* key keeps this meaning;
//  * any other scenario (quickstart, a paper grid): the RL step the scenario itself runs —
//    B = rl.prompts_per_step × rl.group_size sequences, P = the task's prompt length, R = the
//    response limit (rl.max_response_len, or the task's longest answer; every response R tokens,
//    so an EOS task is timed at its limit), trained in rl.minibatches mini-batches of B / m
//    sequences, each its own forward + backward + AdamW step, as the trainer does.
// A grid file (a [sweep] section) is read as its scenario without [sweep] and [variant.*]: its
// `base` file overlaid with the grid's own keys, before any variant or swept value.
#pragma once

#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace moerl {

struct BenchShape {
  int B = 0, P = 0, R = 0, T = 0;  // sequences, prompt, response tokens, train length P + R
  int minibatches = 1;             // optimizer steps over the batch (B / minibatches sequences each)
  bool derived = false;            // from the RL run (else the [bench] section)
  std::string from;                // how, for the report: "[bench]" or the keys it came from
};

// The [bench] section's batch; throws std::invalid_argument when it does not fit the model
// (names bench.seq_len, bench.prompt_len + bench.decode_steps and model.max_seq_len).
BenchShape bench_shape_from_section(const Scenario& s);
// The scenario's RL batch (above); throws std::invalid_argument naming the keys when
// P + R > model.max_seq_len or B < rl.minibatches.
BenchShape bench_shape_derive(const Scenario& s);

// A scenario file as `moerl bench --scenario` reads it, a grid as its scenario without [sweep];
// *has_bench: whether the file (or its grid's base) or an override names a bench.* key.
Scenario bench_scenario_load(const std::string& path, const std::vector<std::string>& overrides, bool* has_bench);

}  // namespace moerl
