// model_io.cpp — checkpoint → Model, and tokens files.
#include "sim/io/model_io.h"

#include <algorithm>
#include <stdexcept>

#include "store/checkpoint.h"
#include "store/h5io.h"

namespace moerl {

std::unique_ptr<Model> model_load_checkpoint(const std::string& path) {
  ModelConfig cfg;
  ParamStore params;
  CheckpointExtras extras;
  checkpoint_load(path, &cfg, &params, &extras);
  auto model = std::make_unique<Model>(cfg);
  std::copy(params.data().begin(), params.data().end(), model->params().data().begin());
  for (const auto& [name, v] : extras.arrays) {
    if (name != "router/expert_bias") continue;
    if (v.size() != model->expert_bias().size())
      throw CheckpointError(path + ": router/expert_bias has " + std::to_string(v.size()) +
                            " values, expected n_layers*n_experts = " +
                            std::to_string(model->expert_bias().size()));
    model->expert_bias() = v;
  }
  model->invalidate_packed_weights();
  return model;
}

std::vector<int32_t> tokens_read(const std::string& path, const ModelConfig& cfg, int64_t* N,
                                 int* T) {
  const H5File f = H5File::open(path);
  std::vector<int64_t> shape;
  std::vector<int32_t> tokens = f.read_i32("tokens", &shape);
  if (shape.size() != 2)
    throw std::runtime_error(path + ": tokens: has shape " + h5_shape_str(shape) +
                             ", expected [N, T]");
  if (shape[0] < 1 || shape[1] < 2 || shape[1] > cfg.max_seq_len)
    throw std::runtime_error(path + ": tokens: has shape " + h5_shape_str(shape) +
                             ", expected N >= 1 and 2 <= T <= max_seq_len = " +
                             std::to_string(cfg.max_seq_len));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= cfg.vocab_size)
      throw std::runtime_error(path + ": tokens: id " + std::to_string(tokens[i]) + " at [" +
                               std::to_string(i / shape[1]) + ", " + std::to_string(i % shape[1]) +
                               "] outside [0, vocab_size = " + std::to_string(cfg.vocab_size) + ")");
  *N = shape[0];
  *T = static_cast<int>(shape[1]);
  return tokens;
}

}  // namespace moerl
