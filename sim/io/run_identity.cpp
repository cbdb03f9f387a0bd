// run_identity.cpp — see run_identity.h.
#include "sim/io/run_identity.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "store/h5io.h"

namespace moerl {

namespace {
int64_t hash_bits(const std::string& hex) {
  return static_cast<int64_t>(std::strtoull(hex.c_str(), nullptr, 16));
}
std::string hash_hex(int64_t bits) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(bits));
  return buf;
}
const char* kIdentity[] = {"step", "seed", "ranks", "scenario_hash"};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
  return h;
}

std::map<std::string, std::string> scenario_keys(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(run_scenario_body(text));
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) kv[line] = "";
    else kv[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return kv;
}

// Refuses a resume whose scenario is not the one the results record.
void check_same_scenario(const std::string& results, const H5File& r, const Scenario& s) {
  const std::vector<std::string> d = run_scenario_diff(r.attr_string("/", "scenario"), s.effective_text());
  if (d.empty()) return;
  std::string msg = results + ": --resume with a different scenario (" + std::to_string(d.size()) + " key" +
                    (d.size() == 1 ? "" : "s") + " differ: ";
  for (size_t i = 0; i < d.size() && i < 8; ++i) msg += (i ? "; " : "") + d[i];
  if (d.size() > 8) msg += "; …";
  throw std::invalid_argument(msg + "); a resumed run must continue the run it started as");
}
}  // namespace

std::string run_scenario_body(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') out += line + "\n";
  return out;
}

std::string run_scenario_hash(const std::string& effective_text) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(run_scenario_body(effective_text))));
  return buf;
}

std::vector<std::string> run_scenario_diff(const std::string& before, const std::string& now) {
  const auto a = scenario_keys(before), b = scenario_keys(now);
  std::vector<std::string> out;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) out.push_back(k + ": " + v + " → (unset)");
    else if (it->second != v) out.push_back(k + ": " + v + " → " + it->second);
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back(k + ": (unset) → " + v);
  return out;
}

void run_identity_scalars(const Scenario& s, int ranks, int64_t step, CheckpointExtras* ex) {
  ex->scalars.push_back({"step", step});
  // run.seed is a uint64; the int64 scalar holds its bit pattern.
  ex->scalars.push_back({"seed", static_cast<int64_t>(s.run.seed)});
  ex->scalars.push_back({"ranks", ranks});
  ex->scalars.push_back({"scenario_hash", hash_bits(run_scenario_hash(s.effective_text()))});
}

std::string run_resume_format_problem(const std::string& results, const std::string& ckpt) {
  const H5File r = H5File::open(results);
  const int64_t version = r.has_attr("/", "version") ? r.attr_int("/", "version") : 0;
  if (!r.has_attr("/", "scenario"))
    return results + ": has no 'scenario' attribute (a results file of the format before runs recorded their "
                     "scenario), so --resume cannot tell whether it is this run";
  if (version != kResultsVersion)
    return results + ": results format version " + std::to_string(version) + "; this build resumes version " +
           std::to_string(kResultsVersion) + " only (older files do not record the run's identity: rank layout)";
  for (const char* key : {"seed", "ranks", "scenario_hash", "steps"})
    if (!r.has_attr("/", key))
      return results + ": has no '" + key + "' attribute, part of the run's identity in format version " +
             std::to_string(kResultsVersion);
  const H5File c = H5File::open(ckpt);
  for (const char* key : kIdentity)
    if (!c.exists("state") || !c.has_attr("state", key))
      return ckpt + ": has no state/" + key + " attribute (a checkpoint of an older format, which does not "
                    "record the run's identity)";
  return "";
}

void run_check_identity(const std::string& results, const std::string& ckpt, const Scenario& s, int ranks) {
  const H5File r = H5File::open(results), c = H5File::open(ckpt);
  check_same_scenario(results, r, s);
  const std::string hash = run_scenario_hash(s.effective_text());
  const int64_t seed = static_cast<int64_t>(s.run.seed);
  std::vector<std::string> d;
  const auto num = [](int64_t v) { return std::to_string(v); };
  const auto useed = [](int64_t v) { return std::to_string(static_cast<uint64_t>(v)); };
  // the results against the run
  if (r.attr_string("/", "scenario_hash") != hash)
    d.push_back("scenario_hash = " + r.attr_string("/", "scenario_hash") + " in " + results + ", " + hash +
                " for the scenario (the file was edited?)");
  if (r.attr_int("/", "seed") != seed)
    d.push_back("seed = " + useed(r.attr_int("/", "seed")) + " in " + results + ", " + useed(seed) + " in the scenario");
  if (r.attr_int("/", "ranks") != ranks)
    d.push_back("ranks = " + num(r.attr_int("/", "ranks")) + " in " + results + ", " + num(ranks) +
                " now (resume on the ranks the run started on)");
  // the checkpoint against the run
  const int64_t c_hash = c.attr_int("state", "scenario_hash"), c_seed = c.attr_int("state", "seed"),
                c_ranks = c.attr_int("state", "ranks"), c_step = c.attr_int("state", "step");
  if (hash_hex(c_hash) != hash)
    d.push_back("scenario_hash = " + hash_hex(c_hash) + " in " + ckpt + ", " + hash + " in " + results +
                " and the scenario (the checkpoint is another run's)");
  if (c_seed != seed)
    d.push_back("seed = " + useed(c_seed) + " in " + ckpt + ", " + useed(seed) + " in " + results +
                " and the scenario (the checkpoint is another run's)");
  if (c_ranks != ranks)
    d.push_back("ranks = " + num(c_ranks) + " in " + ckpt + ", " + num(ranks) +
                " now (resume on the ranks the run started on)");
  const int64_t steps = r.attr_int("/", "steps");
  if (c_step < 0 || c_step > steps)
    d.push_back("step = " + num(c_step) + " in " + ckpt + ", but " + results + " holds " + num(steps) +
                " steps (the checkpoint is not this run's)");
  if (d.empty()) return;
  std::string msg = results + ": --resume of files that are not one run (" + std::to_string(d.size()) + " field" +
                    (d.size() == 1 ? "" : "s") + " differ: ";
  for (size_t i = 0; i < d.size(); ++i) msg += (i ? "; " : "") + d[i];
  throw std::invalid_argument(msg + ")");
}

}  // namespace moerl
