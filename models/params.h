// params.h — all parameters of a model in one contiguous float buffer, with named views whose
// names and shapes are the checkpoint contract (docs/hdf5-schema.md), e.g. "layers.0.attn.wq" [D,D].
// Gradients and optimizer moments use the same layout (a second ParamStore built from the same
// config), so optimizers and reductions work on flat arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/config.h"

namespace moerl {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into ParamStore::data
  int64_t size = 0;    // product of shape
};

class ParamStore {
 public:
  ParamStore() = default;
  explicit ParamStore(const ModelConfig& cfg);  // layout for cfg, all zeros

  const std::vector<ParamInfo>& infos() const { return infos_; }
  std::vector<float>& data() { return data_; }
  const std::vector<float>& data() const { return data_; }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }

  // Named views; throw std::out_of_range naming the parameter if it does not exist.
  float* get(const std::string& name);
  const float* get(const std::string& name) const;
  const ParamInfo& info(const std::string& name) const;
  bool has(const std::string& name) const;

  void zero();

 private:
  std::vector<ParamInfo> infos_;
  std::vector<float> data_;
};

// A store's named views over an array of its size that may live elsewhere — a backend's memory,
// where Model keeps its parameters and gradients on a device (models/model.h) — for passing to
// the backend's ops: get() is pointer arithmetic only, nothing is read through it on the host.
template <class T>
class ParamView {
 public:
  ParamView(const ParamStore& layout, T* base) : layout_(&layout), base_(base) {}
  T* get(const std::string& name) const { return base_ + layout_->info(name).offset; }
  T* data() const { return base_; }
  const ParamStore& layout() const { return *layout_; }

 private:
  const ParamStore* layout_;
  T* base_;
};

// Initialises weights ~ N(0, init_std²) from Stream::init keyed by (seed, parameter index, element),
// norm weights to 1, expert biases to 0. Independent of thread count.
void params_init(ParamStore* params, const ModelConfig& cfg, uint64_t seed);

}  // namespace moerl
