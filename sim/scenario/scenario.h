// scenario.h — a scenario: INI text (read by Boost.Program_options' config-file parser, so
// "[section]" + "key = value" becomes "section.key"), overlaid with `--set section.key=value`
// overrides, converted into one typed struct per concern and validated once.
//
// Sections: [model] (ModelConfig, models/config.h), [run], [engines], [audit], [bench], and
// user numerics profiles [profile.NAME] (`base = <built-in>` plus any NumericsProfile field).
// Every key is declared once, with its doc line, in scenario.cpp (scenario_bind_*): adding a key
// is one line there plus the field here. Unknown sections and keys, malformed values and
// out-of-range values are rejected with a message naming where the value came from (file or
// --set), the key, the value and what is allowed. A scenario carries no output paths, rank counts
// or timings: those are command-line options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/numerics.h"
#include "models/config.h"
#include "sim/step/optimizer.h"
#include "sim/rl/rl_config.h"
#include "sim/jobs/sft.h"
#include "sim/tasks/task.h"

namespace moerl {

// [run] — the run as a whole. (The RL loop's keys join here.)
struct RunConfig {
  uint64_t seed = 0;  // root seed of every named stream: init, data, sampling
  // Deterministic mode (docs/parallelism.md): every sum over the batch's tokens or sequences is
  // formed from reduce_chunks canonical chunks, so 1, 2, 4, … ranks give bit-identical results
  // (with rank-invariant profiles). Off: plain sums — on one rank the serial ones.
  bool deterministic = false;
  int reduce_chunks = 4;  // C, a multiple of every data-parallel size the run may use
  // Where the model's ops run: cpu (the emulation, everywhere) or cuda (one GPU per rank, real
  // low-precision arithmetic; docs/gpu.md). The SFT base policy is always trained on the CPU.
  BackendKind backend = BackendKind::cpu;
  void validate() const;
};

// [engines] — which numerics profile each engine runs.
struct EnginesConfig {
  std::string rollout = "fp8-rollout";  // generation (vLLM/SGLang-like)
  std::string train = "bf16-train";     // log-prob recompute and training (Megatron-like)
};

// [audit] — the sequences `moerl audit` samples when no tokens are given.
struct AuditConfig {
  int prompts = 256;         // N sequences (each its own prompt)
  int prompt_len = 16;       // P uniform random prompt tokens (Stream::data)
  int response_len = 32;     // R tokens sampled from the model under profile A (Stream::sampling)
  float temperature = 1.0f;  // sampling temperature (0 = greedy)
  void validate() const;
};

// [bench] — the workload `moerl bench` times.
struct BenchConfig {
  int sequences = 256;    // B sequences per batch (32 prompts × group 8)
  int seq_len = 48;       // T of the training forward+backward
  int prompt_len = 16;    // P of the generation prefill
  int decode_steps = 32;  // generated tokens per sequence
  void validate() const;
};

class Scenario {
 public:
  // Parses INI text; `source` names it in messages (a path, or e.g. "<defaults>").
  // overrides: "section.key=value" strings, applied after the text; a key given twice is an error,
  // as in the text.
  // Throws std::invalid_argument on any problem.
  static Scenario parse(const std::string& text, const std::string& source,
                        const std::vector<std::string>& overrides = {});
  // Reads and parses a scenario file.
  static Scenario load(const std::string& path, const std::vector<std::string>& overrides = {});
  // Every key at its default, plus overrides.
  static Scenario defaults(const std::vector<std::string>& overrides = {});

  ModelConfig model;
  RunConfig run;
  EnginesConfig engines;
  AuditConfig audit;
  BenchConfig bench;
  RlConfig rl;        // [rl]: algorithm, data flow, schedule (sim/rl/rl_config.h)
  TaskConfig task;    // [task]: the verifiable task (sim/tasks/task.h)
  OptimConfig optim;  // [optim]: AdamW of the RL steps (sim/step/optimizer.h)
  SftConfig sft;      // [sft]: the supervised warm-up that makes the base policy (sim/jobs/sft.h)
  std::vector<NumericsProfile> profiles;  // user profiles, sorted by name

  // Finds a profile by name: user profiles first, then built-ins. Throws std::invalid_argument
  // listing the known names when there is none.
  NumericsProfile profile(const std::string& name) const;
  bool has_profile(const std::string& name) const;

  // The effective scenario after overrides: one canonical "section.key = value" line per key
  // (defaults included, user profiles fully resolved), itself a valid scenario text. Stored in
  // results files so a run can be repeated from its output.
  const std::string& effective_text() const { return effective_; }
  const std::string& source() const { return source_; }

  // Every fixed key with its default and doc line, for docs and --help.
  static std::string reference();

 private:
  std::string source_;
  std::string effective_;
};

}  // namespace moerl
