// checkpoint.cpp — HDF5 checkpoints (layout: docs/hdf5-schema.md, "Checkpoint").
//
// Root attributes: format, version, and every ModelConfig field (ints as int64, floats as float64,
// bools as int64 0/1, enums as their names). params/<name>: float32, shape from ParamStore.
// Extras: float arrays as 1-D float32 datasets at their own path (e.g. "optim/m"), integer
// scalars as int64 attributes of the group "state". Loading checks everything it reads and
// rejects missing or unexpected parameters; it does not reject NaN values (a diverged run's
// checkpoint is still evidence).
#include "store/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "store/h5io.h"

namespace moerl {

namespace {

constexpr const char* kFormat = "moerl-checkpoint";
constexpr int64_t kVersion = 1;

void write_config(H5File* f, const ModelConfig& c) {
  f->set_attr("/", "vocab_size", int64_t{c.vocab_size});
  f->set_attr("/", "d_model", int64_t{c.d_model});
  f->set_attr("/", "n_layers", int64_t{c.n_layers});
  f->set_attr("/", "n_heads", int64_t{c.n_heads});
  f->set_attr("/", "n_experts", int64_t{c.n_experts});
  f->set_attr("/", "top_k", int64_t{c.top_k});
  f->set_attr("/", "d_ff", int64_t{c.d_ff});
  f->set_attr("/", "shared_expert_ff", int64_t{c.shared_expert_ff});
  f->set_attr("/", "max_seq_len", int64_t{c.max_seq_len});
  f->set_attr("/", "rope_theta", double{c.rope_theta});
  f->set_attr("/", "norm_eps", double{c.norm_eps});
  f->set_attr("/", "norm_topk_prob", int64_t{c.norm_topk_prob ? 1 : 0});
  f->set_attr("/", "scoring", scoring_name(c.scoring));
  f->set_attr("/", "expert_bias", int64_t{c.expert_bias ? 1 : 0});
  f->set_attr("/", "bias_update_rate", double{c.bias_update_rate});
  f->set_attr("/", "load_balance", load_balance_name(c.load_balance));
  f->set_attr("/", "aux_loss_coef", double{c.aux_loss_coef});
  f->set_attr("/", "z_loss_coef", double{c.z_loss_coef});
  f->set_attr("/", "init_std", double{c.init_std});
}

int read_int(const H5File& f, const char* key) {
  const int64_t v = f.attr_int("/", key);
  if (v < INT32_MIN || v > INT32_MAX)
    throw CheckpointError(f.path() + ": attribute '" + key + "' = " + std::to_string(v) +
                          " does not fit an int");
  return static_cast<int>(v);
}

bool read_bool(const H5File& f, const char* key) {
  const int64_t v = f.attr_int("/", key);
  if (v != 0 && v != 1)
    throw CheckpointError(f.path() + ": attribute '" + std::string(key) + "' = " +
                          std::to_string(v) + ", expected 0 or 1");
  return v == 1;
}

// An enum stored by its name (kernels/enum_names.h).
template <class E, std::size_t N>
E read_enum(const H5File& f, const char* key, const EnumNames<E, N>& names) {
  const std::string v = f.attr_string("/", key);
  E e{};
  if (!names.parse(v, &e))
    throw CheckpointError(f.path() + ": attribute '" + key + "' = '" + v + "', expected " + names.allowed());
  return e;
}

// float32 values are stored as float64 exactly; a value that does not survive the narrowing was
// not written by us, but it is still a valid config value, so it is rounded, not rejected.
float read_float(const H5File& f, const char* key) {
  return static_cast<float>(f.attr_double("/", key));
}

ModelConfig read_config(const H5File& f) {
  ModelConfig c;
  c.vocab_size = read_int(f, "vocab_size");
  c.d_model = read_int(f, "d_model");
  c.n_layers = read_int(f, "n_layers");
  c.n_heads = read_int(f, "n_heads");
  c.n_experts = read_int(f, "n_experts");
  c.top_k = read_int(f, "top_k");
  c.d_ff = read_int(f, "d_ff");
  c.shared_expert_ff = read_int(f, "shared_expert_ff");
  c.max_seq_len = read_int(f, "max_seq_len");
  c.rope_theta = read_float(f, "rope_theta");
  c.norm_eps = read_float(f, "norm_eps");
  c.norm_topk_prob = read_bool(f, "norm_topk_prob");
  c.scoring = read_enum(f, "scoring", kScoringNames);
  c.expert_bias = read_bool(f, "expert_bias");
  c.bias_update_rate = read_float(f, "bias_update_rate");
  c.load_balance = read_enum(f, "load_balance", kLoadBalanceNames);
  c.aux_loss_coef = read_float(f, "aux_loss_coef");
  c.z_loss_coef = read_float(f, "z_loss_coef");
  c.init_std = read_float(f, "init_std");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(f.path() + ": invalid model config: " + e.what());
  }
  return c;
}

void check_extra_name(const std::string& path, const std::string& name, const char* what) {
  if (name.empty()) throw CheckpointError(path + ": extra " + what + " with an empty name");
  if (name == "params" || name.rfind("params/", 0) == 0)
    throw CheckpointError(path + ": extra " + what + " '" + name + "' collides with params/");
}

}  // namespace

void checkpoint_save(const std::string& path, const ModelConfig& cfg, const ParamStore& params,
                     const CheckpointExtras* extras) {
  try {
    cfg.validate();
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(path + ": refusing to save an invalid model config: " + e.what());
  }
  const ParamStore layout(cfg);
  if (layout.size() != params.size())
    throw CheckpointError(path + ": parameter store holds " + std::to_string(params.size()) +
                          " floats, the config needs " + std::to_string(layout.size()));
  if (extras) {
    for (const auto& [name, v] : extras->arrays) check_extra_name(path, name, "array");
    for (const auto& [name, v] : extras->scalars) {
      if (name.empty() || name.find('/') != std::string::npos)
        throw CheckpointError(path + ": extra scalar name '" + name + "' must be non-empty without '/'");
    }
  }
  try {
    H5File f = H5File::create(path);
    f.set_attr("/", "format", kFormat);
    f.set_attr("/", "version", kVersion);
    write_config(&f, cfg);
    for (const ParamInfo& p : layout.infos())
      f.write("params/" + p.name, p.shape, params.data().data() + p.offset);
    if (extras) {
      for (const auto& [name, v] : extras->arrays)
        f.write(name, {static_cast<int64_t>(v.size())}, v.data());
      for (const auto& [name, v] : extras->scalars) f.set_attr("state", name, v);
    }
    f.commit();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(e.what());
  }
}

void checkpoint_load(const std::string& path, ModelConfig* cfg, ParamStore* params,
                     CheckpointExtras* extras) {
  try {
    const H5File f = H5File::open(path);
    if (!f.has_attr("/", "format"))
      throw CheckpointError(path + ": missing attribute 'format' (not a moerl checkpoint?)");
    const std::string format = f.attr_string("/", "format");
    if (format != kFormat)
      throw CheckpointError(path + ": attribute 'format' = '" + format + "', expected '" +
                            kFormat + "'");
    const int64_t version = f.attr_int("/", "version");
    if (version != kVersion)
      throw CheckpointError(path + ": checkpoint version " + std::to_string(version) +
                            " is not supported (this build reads version " +
                            std::to_string(kVersion) + ")");
    const ModelConfig c = read_config(f);
    ParamStore p(c);

    if (!f.exists("params")) throw CheckpointError(path + ": params: missing group");
    std::set<std::string> expected;
    for (const ParamInfo& info : p.infos()) expected.insert(info.name);
    for (const std::string& name : f.children("params"))
      if (!expected.count(name))
        throw CheckpointError(path + ": params/" + name +
                              ": unexpected parameter (not in the layout of this config)");
    for (const ParamInfo& info : p.infos())
      f.read("params/" + info.name, info.shape, p.data().data() + info.offset);

    if (extras) {
      extras->arrays.clear();
      extras->scalars.clear();
      for (const std::string& name : f.datasets_below("/")) {
        if (name.rfind("params/", 0) == 0) continue;
        std::vector<int64_t> shape;
        std::vector<float> v = f.read_f32(name, &shape);
        extras->arrays.emplace_back(name, std::move(v));
      }
      if (f.exists("state"))
        for (const std::string& key : f.attr_names("state"))
          extras->scalars.emplace_back(key, f.attr_int("state", key));
    }
    *cfg = c;
    *params = std::move(p);
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(e.what());
  }
}

}  // namespace moerl
