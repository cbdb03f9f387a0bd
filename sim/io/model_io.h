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

// Reads dataset `tokens` [N, T] int32 and checks it against the model: 2 <= T <= max_seq_len and
// every id in [0, vocab_size). Throws std::runtime_error naming the file and the problem.
std::vector<int32_t> tokens_read(const std::string& path, const ModelConfig& cfg, int64_t* N,
                                 int* T);

}  // namespace moerl
