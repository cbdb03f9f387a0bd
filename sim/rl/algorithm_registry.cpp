// algorithm_registry.cpp — the algorithm rows (registry.h). Each row is registered by its own file,
// sim/rl/<name>.cpp; this file keeps them in name order and derives every list and message from
// them. It names no algorithm.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "sim/rl/registry.h"

#include "sim/io/results.h"

namespace moerl {

namespace {
// The rows as registered (static initialisation, any order); sorted and frozen on first use.
std::vector<AlgorithmInfo>& rows() {
  static std::vector<AlgorithmInfo> r;
  return r;
}
bool& frozen() {
  static bool f = false;
  return f;
}
}  // namespace

AlgorithmRegistrar::AlgorithmRegistrar(const char* name, AlgorithmInfo info) {
  // a registration after the first look-up would move rows that pointers already point at
  if (frozen()) {
    std::fprintf(stderr, "moerl: rl.algorithm %s registered after the registry was read\n", name);
    std::abort();
  }
  for (const AlgorithmInfo& a : rows())
    if (std::string(a.name) == name) {
      std::fprintf(stderr, "moerl: rl.algorithm %s is registered twice (two files under sim/rl/)\n", name);
      std::abort();
    }
  info.name = name;
  rows().push_back(std::move(info));
}

const std::vector<AlgorithmInfo>& algorithm_registry() {
  if (!frozen()) {
    std::sort(rows().begin(), rows().end(),
              [](const AlgorithmInfo& a, const AlgorithmInfo& b) { return std::string(a.name) < b.name; });
    frozen() = true;
  }
  return rows();
}

const AlgorithmInfo* algorithm_find(const std::string& name) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (name == a.name) return &a;
  return nullptr;
}

const AlgorithmInfo& algorithm_loss_row(const AlgorithmInfo& a) {
  if (!a.loss_of) return a;
  const AlgorithmInfo* base = algorithm_find(a.loss_of);
  if (!base || base->loss_of)
    throw std::logic_error(std::string("rl.algorithm ") + a.name + ": loss_of = " + a.loss_of +
                           " must name a row with a factory of its own");
  return *base;
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

const AlgorithmParam* algorithm_param_find(const std::string& key) {
  for (const AlgorithmInfo& a : algorithm_registry())
    for (const AlgorithmParam& p : a.params)
      if (key == p.key) return &p;
  return nullptr;
}

bool algorithm_reads_param(const std::string& name, const std::string& key) {
  const AlgorithmInfo* a = algorithm_find(name);
  if (!a) return false;
  const AlgorithmInfo& base = algorithm_loss_row(*a);
  return std::any_of(base.params.begin(), base.params.end(), [&](const AlgorithmParam& p) { return key == p.key; });
}

std::string algorithm_param_readers(const std::string& key) {
  std::string list;
  for (const AlgorithmInfo& a : algorithm_registry())
    if (algorithm_reads_param(a.name, key)) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

float LossConfig::param(const std::string& key) const {
  const auto it = params.find(key);
  if (it != params.end()) return it->second;
  const AlgorithmParam* p = algorithm_param_find(key);
  if (!p) throw std::logic_error("rl." + key + ": no algorithm registers this key");
  return p->value;
}

std::unique_ptr<Algorithm> algorithm_create(const LossConfig& cfg) {
  const AlgorithmInfo* a = algorithm_find(cfg.algorithm);
  if (!a) throw std::invalid_argument("rl.algorithm = " + cfg.algorithm + ": " + algorithm_must_be());
  LossConfig c = cfg;
  if (a->correction) c.correction = *a->correction;  // the row's forced correction, resolved or not
  return algorithm_loss_row(*a).create(c);
}

void algorithm_record_attrs(RunResults* res, const RlConfig& rl) {
  res->attrs["algorithm"] = rl.loss.algorithm;
  res->attrs["routing_replay"] = routing_replay_name(rl.routing_replay);
  res->attrs["old_logprobs"] = old_logprobs_name(rl.old_logprobs);
  res->attrs["correction"] = correction_name(rl.loss.correction);
  res->float_attrs["clip_low"] = rl.loss.clip_low;
  res->float_attrs["clip_high"] = rl.loss.clip_high;
  // the algorithm's own keys, resolved (only runs of an algorithm with keys of its own have them)
  if (const AlgorithmInfo* a = algorithm_find(rl.loss.algorithm))
    for (const AlgorithmParam& p : algorithm_loss_row(*a).params) res->float_attrs[p.key] = rl.loss.param(p.key);
}

void algorithm_record_others_off(RunResults* res, const std::string& algorithm) {
  for (const AlgorithmInfo& a : algorithm_registry())
    if (algorithm != a.name)
      for (const ExtraMetric& x : a.metrics) res->set(x.name, x.off);
}

}  // namespace moerl
