// params.cpp — parameter layout (names and shapes of the checkpoint contract) and initialisation.
#include "models/params.h"

#include <stdexcept>

#include "kernels/rng.h"

namespace moerl {

namespace {
void add(std::vector<ParamInfo>* infos, int64_t* offset, std::string name,
         std::vector<int64_t> shape) {
  ParamInfo p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.size = 1;
  for (int64_t s : p.shape) p.size *= s;
  p.offset = *offset;
  *offset += p.size;
  infos->push_back(std::move(p));
}
bool is_norm(const std::string& name) {
  const std::string suffix = "norm";
  return name.size() >= suffix.size() && name.compare(name.size() - 4, 4, suffix) == 0;
}
}  // namespace

ParamStore::ParamStore(const ModelConfig& cfg) {
  const int64_t V = cfg.vocab_size, D = cfg.d_model, E = cfg.n_experts, F = cfg.mlp_width(),
                S = cfg.shared_expert_ff;
  int64_t off = 0;
  add(&infos_, &off, "embed", {V, D});
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(&infos_, &off, p + "attn_norm", {D});
    add(&infos_, &off, p + "attn.wq", {D, D});
    add(&infos_, &off, p + "attn.wk", {D, D});
    add(&infos_, &off, p + "attn.wv", {D, D});
    add(&infos_, &off, p + "attn.wo", {D, D});
    add(&infos_, &off, p + "mlp_norm", {D});
    if (cfg.is_moe()) {
      add(&infos_, &off, p + "moe.router", {E, D});
      add(&infos_, &off, p + "moe.w_gate", {E, F, D});
      add(&infos_, &off, p + "moe.w_up", {E, F, D});
      add(&infos_, &off, p + "moe.w_down", {E, D, F});
      if (S > 0) {
        add(&infos_, &off, p + "moe.shared.w_gate", {S, D});
        add(&infos_, &off, p + "moe.shared.w_up", {S, D});
        add(&infos_, &off, p + "moe.shared.w_down", {D, S});
      }
    } else {
      add(&infos_, &off, p + "mlp.w_gate", {F, D});
      add(&infos_, &off, p + "mlp.w_up", {F, D});
      add(&infos_, &off, p + "mlp.w_down", {D, F});
    }
  }
  add(&infos_, &off, "final_norm", {D});
  add(&infos_, &off, "lm_head", {V, D});
  data_.assign(static_cast<size_t>(off), 0.0f);
}

const ParamInfo& ParamStore::info(const std::string& name) const {
  for (const ParamInfo& p : infos_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named '" + name + "'");
}

bool ParamStore::has(const std::string& name) const {
  for (const ParamInfo& p : infos_)
    if (p.name == name) return true;
  return false;
}

float* ParamStore::get(const std::string& name) { return data_.data() + info(name).offset; }
const float* ParamStore::get(const std::string& name) const { return data_.data() + info(name).offset; }

void ParamStore::zero() { std::fill(data_.begin(), data_.end(), 0.0f); }

void params_init(ParamStore* params, const ModelConfig& cfg, uint64_t seed) {
  const auto& infos = params->infos();
  for (size_t i = 0; i < infos.size(); ++i) {
    const ParamInfo& p = infos[i];
    float* w = params->data().data() + p.offset;
    if (is_norm(p.name)) {
      std::fill(w, w + p.size, 1.0f);
      continue;
    }
    // One stream per parameter tensor: adding a tensor never shifts another's values.
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::init), {static_cast<uint64_t>(i)}));
    for (int64_t j = 0; j < p.size; ++j) w[j] = cfg.init_std * rng.normal();
  }
}

}  // namespace moerl
