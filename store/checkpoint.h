// checkpoint.h — HDF5 checkpoints: the contract of docs/hdf5-schema.md.
// Root attributes: format="moerl-checkpoint", version=1, the ModelConfig fields; float32 datasets
// under params/ named and shaped as ParamStore's infos; optional groups for optimizer and RNG state.
// Writes go to "<path>.tmp-<pid>" and are renamed into place only when complete.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/params.h"

namespace moerl {

// Thrown for any unreadable, truncated, corrupted or mismatched checkpoint; what() names the file
// and what is wrong.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Extra named float arrays stored beside the parameters (optimizer moments "optim/m", "optim/v",
// the expert bias "router/expert_bias", …) and integer scalars (step, seed).
struct CheckpointExtras {
  std::vector<std::pair<std::string, std::vector<float>>> arrays;
  std::vector<std::pair<std::string, int64_t>> scalars;
};

void checkpoint_save(const std::string& path, const ModelConfig& cfg, const ParamStore& params,
                     const CheckpointExtras* extras = nullptr);
// Reads the config from the root attributes (validated) and the parameters (shapes checked).
void checkpoint_load(const std::string& path, ModelConfig* cfg, ParamStore* params,
                     CheckpointExtras* extras = nullptr);

}  // namespace moerl
