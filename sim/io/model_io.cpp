// model_io.cpp — checkpoint → Model, and tokens files.
#include "sim/io/model_io.h"

#include <algorithm>
#include <cstdio>
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

namespace {
std::string show(int v) { return std::to_string(v); }
std::string show(bool v) { return v ? "true" : "false"; }
std::string show(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}
std::string show(Scoring v) { return scoring_name(v); }
std::string show(LoadBalance v) { return load_balance_name(v); }
}  // namespace

std::vector<std::string> model_config_diff(const ModelConfig& a, const ModelConfig& b) {
  std::vector<std::string> out;
  const auto cmp = [&](const char* key, const auto& x, const auto& y) {
    if (!(x == y)) out.push_back(std::string("model.") + key + " = " + show(x) + " in the checkpoint, " + show(y) + " in the scenario");
  };
  cmp("vocab_size", a.vocab_size, b.vocab_size);
  cmp("d_model", a.d_model, b.d_model);
  cmp("n_layers", a.n_layers, b.n_layers);
  cmp("n_heads", a.n_heads, b.n_heads);
  cmp("n_experts", a.n_experts, b.n_experts);
  cmp("top_k", a.top_k, b.top_k);
  cmp("d_ff", a.d_ff, b.d_ff);
  cmp("shared_expert_ff", a.shared_expert_ff, b.shared_expert_ff);
  cmp("max_seq_len", a.max_seq_len, b.max_seq_len);
  cmp("rope_theta", a.rope_theta, b.rope_theta);
  cmp("norm_eps", a.norm_eps, b.norm_eps);
  cmp("norm_topk_prob", a.norm_topk_prob, b.norm_topk_prob);
  cmp("scoring", a.scoring, b.scoring);
  cmp("expert_bias", a.expert_bias, b.expert_bias);
  cmp("bias_update_rate", a.bias_update_rate, b.bias_update_rate);
  cmp("load_balance", a.load_balance, b.load_balance);
  cmp("aux_loss_coef", a.aux_loss_coef, b.aux_loss_coef);
  cmp("z_loss_coef", a.z_loss_coef, b.z_loss_coef);
  return out;
}

void model_check_matches(const std::string& path, const ModelConfig& ckpt, const ModelConfig& scenario) {
  const std::vector<std::string> d = model_config_diff(ckpt, scenario);
  if (d.empty()) return;
  std::string msg = path + ": the checkpoint's model is not the scenario's [model]: ";
  for (size_t i = 0; i < d.size(); ++i) msg += (i ? "; " : "") + d[i];
  throw CheckpointError(msg + " (use a base made for this scenario, or --set the model to match)");
}

std::vector<int32_t> tokens_read(const std::string& path, const ModelConfig& cfg, int64_t* N,
                                 int* T, std::vector<int32_t>* lengths) {
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
  if (lengths) {
    if (f.exists("lengths")) {
      std::vector<int64_t> lshape;
      *lengths = f.read_i32("lengths", &lshape);
      if (lshape != std::vector<int64_t>{*N})
        throw std::runtime_error(path + ": lengths: has shape " + h5_shape_str(lshape) + ", expected [" +
                                 std::to_string(*N) + "] (one per row of tokens)");
      for (size_t i = 0; i < lengths->size(); ++i)
        if ((*lengths)[i] < 2 || (*lengths)[i] > *T)
          throw std::runtime_error(path + ": lengths[" + std::to_string(i) + "] = " + std::to_string((*lengths)[i]) +
                                   ": must be in [2, T = " + std::to_string(*T) + "]");
    } else {
      lengths->assign(static_cast<size_t>(*N), *T);
    }
  }
  return tokens;
}

}  // namespace moerl
