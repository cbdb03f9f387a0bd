// algorithm_registry.cpp — the algorithm table (registry.h). One row per rl.algorithm name; its
// factory is defined in sim/rl/<name>.cpp and declared beside the row; a row without a class of
// its own names the row whose loss it runs (loss_of).
#include <cstdio>
#include <stdexcept>

#include "sim/rl/registry.h"

#include "sim/io/results.h"

namespace moerl {

namespace rl {
std::unique_ptr<Algorithm> make_grpo(const LossConfig& cfg);
std::unique_ptr<Algorithm> make_gspo(const LossConfig& cfg);
std::unique_ptr<Algorithm> make_rspo(const LossConfig& cfg);
std::unique_ptr<Algorithm> make_icepop(const LossConfig& cfg);
}  // namespace rl

const std::vector<AlgorithmInfo>& algorithm_registry() {
  // in alphabetical order: the order of every list derived from the table
  static const std::vector<AlgorithmInfo> table = {
      {.name = "grpo",
       .doc = "token-level PPO clipped surrogate, group-normalised advantages (arXiv 2402.03300)",
       .create = rl::make_grpo},
      {.name = "gspo",
       .doc = "sequence-level ratio exp(mean log r), its own clip range (arXiv 2507.18071)",
       .create = rl::make_gspo,
       .clip_low = 3e-4f,  // GSPO paper §5.1: 3e-4 / 4e-4
       .clip_high = 4e-4f},
      {.name = "icepop",
       .doc = "grpo with tokens whose pi_old/pi_rollout leaves [alpha, beta] masked (arXiv 2510.18855)",
       .create = rl::make_icepop,
       .correction = Correction::icepop,
       .metrics = {{"icepop_masked_frac", 0.0, "share of tokens the IcePop band masked"}}},
      {.name = "r3",
       .doc = "grpo + rollout routing replay (arXiv 2510.11370)",
       .loss_of = "grpo",
       .routing_replay = RoutingReplay::rollout},
      {.name = "rspo",
       .doc = "token ratio rescaled by the router-shift weight gamma (arXiv 2510.23027)",
       .create = rl::make_rspo,
       .metrics = {{"rspo_gamma_mean", 1.0, "mean router-shift weight gamma over the step's tokens"},
                   {"rspo_gamma_min", 1.0, "smallest gamma of the step"}}},
  };
  return table;
}

const AlgorithmInfo* algorithm_find(const std::string& name) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (name == a.name) return &a;
  return nullptr;
}

std::vector<std::string> algorithm_names() {
  std::vector<std::string> names;
  for (const AlgorithmInfo& a : algorithm_registry()) names.emplace_back(a.name);
  return names;
}

std::string algorithm_key_doc() {
  std::string doc;
  for (const AlgorithmInfo& a : algorithm_registry()) doc += (doc.empty() ? "" : " | ") + std::string(a.name);
  for (const AlgorithmInfo& a : algorithm_registry()) doc += std::string("; ") + a.name + ": " + a.doc;
  return doc;
}

std::string algorithm_clip_doc(bool high) {
  std::string doc = high ? "epsilon_high" : "epsilon_low";
  doc += " (negative = the algorithm's default:";
  for (const AlgorithmInfo& a : algorithm_registry()) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", static_cast<double>(high ? a.clip_high : a.clip_low));
    doc += std::string(" ") + a.name + " " + v + ",";
  }
  doc.back() = ')';
  return doc;
}

std::string algorithm_must_be() {
  std::string list;
  for (const AlgorithmInfo& a : algorithm_registry()) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return "must be one of " + list;
}

std::unique_ptr<Algorithm> algorithm_create(const LossConfig& cfg) {
  const AlgorithmInfo* a = algorithm_find(cfg.algorithm);
  if (!a) throw std::invalid_argument("rl.algorithm = " + cfg.algorithm + ": " + algorithm_must_be());
  LossConfig c = cfg;
  if (a->correction) c.correction = *a->correction;  // the row's forced correction, resolved or not
  return algorithm_find(a->loss_of ? a->loss_of : a->name)->create(c);
}

void algorithm_record_attrs(RunResults* res, const RlConfig& rl) {
  res->attrs["algorithm"] = rl.loss.algorithm;
  res->attrs["routing_replay"] = routing_replay_name(rl.routing_replay);
  res->attrs["old_logprobs"] = old_logprobs_name(rl.old_logprobs);
  res->attrs["correction"] = correction_name(rl.loss.correction);
  res->float_attrs["clip_low"] = rl.loss.clip_low;
  res->float_attrs["clip_high"] = rl.loss.clip_high;
}

void algorithm_record_others_off(RunResults* res, const std::string& algorithm) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (algorithm != a.name)
      for (const ExtraMetric& x : a.metrics) res->set(x.name, x.off);
}

}  // namespace moerl
