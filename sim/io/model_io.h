// model_io.h — what the commands read from disk besides the scenario: a checkpoint as a ready
// Model, and a tokens file (docs/hdf5-schema.md, "Tokens file").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"

namespace moerl {

// Loads a checkpoint into a new Model: parameters, and the expert bias ("router/expert_bias",
// [L*E] float32) when the checkpoint has one. Throws CheckpointError.
std::unique_ptr<Model> model_load_checkpoint(const std::string& path);

// The fields in which a checkpoint's model differs from the scenario's [model], as
// "model.top_k = 2 in the checkpoint, 1 in the scenario" (empty: the same model). Every field
// counts but init_std (used only to initialise): a run takes its model from the checkpoint, so a
// difference would silently train another model than the scenario says.
std::vector<std::string> model_config_diff(const ModelConfig& ckpt, const ModelConfig& scenario);
// Throws CheckpointError naming the file and every differing field (see model_config_diff).
void model_check_matches(const std::string& path, const ModelConfig& ckpt, const ModelConfig& scenario);

// Reads dataset `tokens` [N, T] int32 and checks it against the model: 2 <= T <= max_seq_len and
// every id in [0, vocab_size). Sequences of their own length: the optional dataset `lengths` [N]
// int32, each in [2, T], says how many of a row's tokens are the sequence (the rest is padding,
// scored and audited nowhere); *lengths (when non-null) receives it, or T for every row without
// it. Throws std::runtime_error naming the file and the problem.
std::vector<int32_t> tokens_read(const std::string& path, const ModelConfig& cfg, int64_t* N,
                                 int* T, std::vector<int32_t>* lengths = nullptr);

}  // namespace moerl
