// cmd_inspect.cpp — `moerl inspect FILE.h5 [FILE.h5]...`: a run's scenario, status and headline
// numbers without Python; with several files, one comparison table (one row per run). A sweep
// directory prints its index (assembled from its run files first when it has a plan), then its
// runs side by side.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "sim/io/results.h"
#include "sim/rl/registry.h"
#include "sim/sweep/sweep_assemble.h"
#include "store/h5io.h"
#include "sim/cli/cli.h"
#include "store/checkpoint.h"
#include "sim/sweep/sweep_index.h"

namespace po = boost::program_options;

namespace moerl {

namespace {
struct Headline {
  std::string file, algorithm, replay, status, rollout, train, correction;
  int64_t steps = 0, collapse_step = -1;
  double reward_first = NAN, reward_last = NAN, eval_last = NAN, kl = NAN, flip = NAN,
         extreme = NAN, clip = NAN, step_time = NAN;
  // rollout-correction diagnostics (means over all steps) and the first precursor firing
  double ess_token = NAN, ess_seq = NAN, chi2_seq = NAN, seq_mis = NAN, seq_k3 = NAN;
  // gradient bursts: the largest mini-batch norm and the largest negative-advantage ratio of the run
  double burst_norm = NAN, burst_ratio = NAN;
  std::string first_flag = "-";
  std::vector<std::string> nonfinite;  // "kl_rollout_train: inf in 1 of 3 steps", one per metric that has any
};

// The value of `key` in an effective scenario text ("key = value" lines), or "?".
std::string scenario_value(const std::string& text, const std::string& key) {
  const std::string head = key + " = ";
  for (size_t p = 0; p < text.size();) {
    const size_t e = text.find('\n', p);
    const std::string line = text.substr(p, e == std::string::npos ? std::string::npos : e - p);
    if (line.rfind(head, 0) == 0) return line.substr(head.size());
    if (e == std::string::npos) break;
    p = e + 1;
  }
  return "?";
}

std::vector<double> series(const H5File& f, const std::string& name) {
  if (!f.is_dataset("metrics/" + name)) return {};
  const auto shape = f.shape("metrics/" + name);
  if (shape.size() != 1) return {};
  std::vector<double> v(static_cast<size_t>(shape[0]));
  f.read("metrics/" + name, shape, v.data());
  return v;
}

// Mean of the finite values among the last n (n = 0: all).
double tail_mean(const std::vector<double>& v, size_t n) {
  double s = 0.0;
  int k = 0;
  for (size_t i = (n && v.size() > n) ? v.size() - n : 0; i < v.size(); ++i)
    if (std::isfinite(v[i])) { s += v[i]; ++k; }
  return k ? s / k : NAN;
}

// The steps of a metric that hold +inf or -inf: "inf in 1 of 3 steps" (NaN is a step that did not
// set the metric; an infinite value is a value, so it is counted, never averaged away); "" for none.
std::string infinite_steps(const std::vector<double>& v) {
  int pos = 0, neg = 0, set = 0;
  for (double x : v) {
    set += !std::isnan(x);
    pos += x == INFINITY;
    neg += x == -INFINITY;
  }
  std::string out;
  if (pos) out += "inf in " + std::to_string(pos);
  if (neg) out += std::string(pos ? ", " : "") + "-inf in " + std::to_string(neg);
  return out.empty() ? "" : out + " of " + std::to_string(set) + " steps";
}

// Mean over the steps that set the metric (NaN: not set), infinite values included: +inf or -inf
// when some step holds one, NaN when both occur. Summed in long double, so that finite values near
// DBL_MAX do not overflow into a false inf. `notes` gets "name: inf in k of n steps".
double step_mean(const std::vector<double>& v, const char* name, std::vector<std::string>* notes) {
  long double s = 0.0L;
  int k = 0;
  for (double x : v)
    if (!std::isnan(x)) { s += x; ++k; }
  const std::string inf = infinite_steps(v);
  if (!inf.empty()) notes->push_back(std::string(name) + ": " + inf);
  return k ? static_cast<double>(s / k) : NAN;
}

// The largest value a step set (+inf included, with a note as step_mean's).
double step_max(const std::vector<double>& v, const char* name, std::vector<std::string>* notes) {
  double m = NAN;
  for (double x : v)
    if (!std::isnan(x) && !(x <= m)) m = x;
  const std::string inf = infinite_steps(v);
  if (!inf.empty()) notes->push_back(std::string(name) + ": " + inf);
  return m;
}

double last_finite(const std::vector<double>& v) {
  for (size_t i = v.size(); i-- > 0;)
    if (std::isfinite(v[i])) return v[i];
  return NAN;
}

// A results file from before the `correction` attribute: the algorithm row's forced correction,
// else the scenario's rl.correction.
std::string correction_of_old_file(const std::string& algorithm, const std::string& scenario) {
  const AlgorithmInfo* a = algorithm_find(algorithm);
  return a && a->correction ? correction_name(*a->correction) : scenario_value(scenario, "rl.correction");
}

Headline read(const std::string& path, std::string* scenario) {
  const H5File f = H5File::open(path);
  Headline h;
  h.file = path;
  auto str = [&](const char* k) { return f.has_attr("/", k) ? f.attr_string("/", k) : std::string("?"); };
  h.algorithm = str("algorithm");
  h.replay = str("routing_replay");
  h.status = str("status");
  h.rollout = str("profile_rollout");
  h.train = str("profile_train");
  const std::string text = str("scenario");
  if (scenario) *scenario = text;
  h.correction = f.has_attr("/", "correction") ? f.attr_string("/", "correction") : correction_of_old_file(h.algorithm, text);
  h.steps = f.has_attr("/", "steps") ? f.attr_int("/", "steps") : 0;
  h.collapse_step = sweep_collapse_step_of(f);  // counted from 1, as steps are
  const auto reward = series(f, "reward_mean");
  h.reward_first = tail_mean(std::vector<double>(reward.begin(), reward.begin() + std::min<size_t>(reward.size(), 10)), 0);
  h.reward_last = final_reward_of(reward);  // the one "final reward" (sim/io/results.h)
  h.eval_last = last_finite(series(f, "eval_accuracy"));
  // means over all steps, with every infinite value counted in h.nonfinite
  const auto mean_of = [&](const char* name) { return step_mean(series(f, name), name, &h.nonfinite); };
  const auto max_of = [&](const char* name) { return step_max(series(f, name), name, &h.nonfinite); };
  h.kl = mean_of("kl_rollout_train");
  h.flip = mean_of("flip_rate_mean");
  h.extreme = mean_of("extreme_token_frac");
  h.clip = mean_of("clip_frac");
  h.step_time = mean_of("time_step");
  h.ess_token = mean_of("rc_ess_token");
  h.ess_seq = mean_of("rc_ess_seq");
  h.chi2_seq = mean_of("rc_chi2_seq");
  h.seq_mis = mean_of("rc_seq_mis_masked_frac");
  h.seq_k3 = mean_of("rc_seq_max_k3_masked_frac");
  h.burst_norm = max_of("grad_norm_max");
  h.burst_ratio = max_of("ratio_max_neg_adv");
  int64_t first = -1;
  for (const char* flag : {"pre_k3_rise", "pre_grad_norm_spike", "pre_grad_norm_drop", "pre_entropy_spike",
                           "pre_clip_burst", "pre_ess_drop", "pre_length_surge"}) {
    const auto v = series(f, flag);
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] > 0.5) {
        if (first < 0 || static_cast<int64_t>(i) < first) {
          first = static_cast<int64_t>(i);
          h.first_flag = std::string(flag + 4) + "@" + std::to_string(i);
        }
        break;
      }
  }
  return h;
}
// The "format" attribute of a file that is not a run's results ("" for results files).
std::string other_format(const std::string& path) {
  const H5File f = H5File::open(path);
  if (f.has_attr("/", "format")) return f.attr_string("/", "format");
  if (!f.has_attr("/", "steps") || !f.has_attr("/", "status"))
    throw std::runtime_error(path + ": not a moerl file (no 'format' attribute, and not a run's results: "
                             "no 'steps' and 'status' attributes)");
  return "";
}
bool is_other(const std::string& path) { return !other_format(path).empty(); }

// Describes a checkpoint or score file in a line or two; false for a run's results.
bool describe_other(const std::string& path) {
  const std::string format = other_format(path);
  if (format.empty()) return false;
  if (format == "moerl-checkpoint") {
    ModelConfig c;
    ParamStore p;
    CheckpointExtras ex;
    checkpoint_load(path, &c, &p, &ex);  // checks it whole: integrity, config, every parameter
    std::string state, extras;
    for (const auto& [k, v] : ex.scalars) state += (state.empty() ? "" : ", ") + k + " " + std::to_string(v);
    for (const auto& [k, v] : ex.arrays) extras += (extras.empty() ? "" : ", ") + k;
    std::printf("%s: moerl checkpoint (version 1), %lld parameters: %s, vocab %d, d_model %d, %d layers, %d heads, "
                "%s, d_ff %d%s\n  state: %s%s%s\n",
                path.c_str(), static_cast<long long>(p.size()), c.is_moe() ? "MoE" : "dense", c.vocab_size,
                c.d_model, c.n_layers, c.n_heads,
                c.is_moe() ? (std::to_string(c.n_experts) + " experts top-" + std::to_string(c.top_k)).c_str() : "no experts",
                c.d_ff, c.shared_expert_ff ? (", shared expert " + std::to_string(c.shared_expert_ff)).c_str() : "",
                state.empty() ? "-" : state.c_str(), extras.empty() ? "" : "; also ", extras.c_str());
    return true;
  }
  const H5File f = H5File::open(path);
  std::printf("%s: a %s file (not a run's results; datasets: %s)\n", path.c_str(), format.c_str(),
              cli_join(f.datasets_below("/"), ", ").c_str());
  return true;
}
// The run files of the arguments: a file as given; a sweep directory's index is printed, then
// its runs' files join the list. `flagged`: the files the index says are not the run their name
// says (mismatched, unplanned), with that state, which the per-run table shows instead of theirs.
std::vector<std::string> inspect_run_files(const std::vector<std::string>& args,
                                           std::map<std::string, std::string>* flagged) {
  std::vector<std::string> run_files;
  for (const std::string& path : args) {
    if (!std::filesystem::is_directory(path)) {
      run_files.push_back(path);
      continue;
    }
    // Array tasks write no index: it is assembled here from the plan and the run files, unless a
    // sweep is running there and keeps it itself (sim/sweep/sweep_assemble.h).
    const SweepIndexView view = sweep_index_refresh(path);
    if (!view.unsaved.empty())
      std::fprintf(stderr, "moerl: warning: inspect: %s: the index is assembled in memory, not saved: %s\n",
                   path.c_str(), view.unsaved.c_str());
    const SweepIndex index = view.sweep ? view.index : sweep_index_read(path);
    for (const std::string& w : sweep_index_warnings(path, index))
      std::fprintf(stderr, "moerl: warning: inspect: %s\n", w.c_str());
    std::fflush(stderr);
    std::printf("== sweep %s ==\n%s\n", path.c_str(), sweep_index_table(index).c_str());
    for (const SweepIndexRow& r : index.rows)
      if (std::filesystem::exists(std::filesystem::path(path) / r.file)) {
        run_files.push_back((std::filesystem::path(path) / r.file).string());
        if (r.status == "mismatched" || r.status == "unplanned") (*flagged)[run_files.back()] = r.status;
      }
  }
  return run_files;
}

// The two tables of the runs side by side: headline numbers, then the correction diagnostics.
void inspect_print_tables(const std::vector<Headline>& rows) {
  std::printf("%-28s %-7s %-7s %-10s %6s %9s %9s %7s %9s %7s %8s %7s %7s\n", "run", "algo", "replay",
              "status", "steps", "reward0", "reward", "eval", "KL(k3)", "flip%", "extreme", "clip", "s/step");
  for (const Headline& h : rows) {
    std::string name = h.file.size() > 28 ? "…" + h.file.substr(h.file.size() - 27) : h.file;
    std::printf("%-28s %-7s %-7s %-10s %6lld %9.3f %9.3f %7.3f %9.2e %7.2f %8.1e %7.4f %7.2f\n",
                name.c_str(), h.algorithm.c_str(), h.replay.c_str(),
                (h.status + (h.collapse_step >= 0 ? "@" + std::to_string(h.collapse_step) : "")).c_str(),
                static_cast<long long>(h.steps), h.reward_first, h.reward_last, h.eval_last, h.kl,
                100.0 * h.flip, h.extreme, h.clip, h.step_time);
  }
  std::printf("reward0/reward: mean over the first/last 10 steps; eval: last greedy held-out accuracy; "
              "KL, flip%%, extreme, clip: means over all steps\n\n");
  std::printf("%-28s %-12s %8s %8s %9s %8s %8s %9s %9s  %s\n", "run", "correction", "ESS_tok", "ESS_seq", "chi2_seq",
              "seqmis%", "seqk3%", "burst|g|", "burst_r", "first precursor");
  for (const Headline& h : rows) {
    std::string name = h.file.size() > 28 ? "…" + h.file.substr(h.file.size() - 27) : h.file;
    std::printf("%-28s %-12s %8.4f %8.4f %9.2e %8.2f %8.2f %9.1f %9.1f  %s\n", name.c_str(), h.correction.c_str(),
                h.ess_token, h.ess_seq, h.chi2_seq, 100.0 * h.seq_mis, 100.0 * h.seq_k3, h.burst_norm, h.burst_ratio,
                h.first_flag.c_str());
  }
  std::printf("ESS, chi2 (token / sequence IS weights pi_old/mu), seqmis%%, seqk3%% (sequences seq-mis / seq-max-k3 "
              "would drop, active or not): means over all steps; burst|g|, burst_r: the run's largest mini-batch gradient "
              "norm and negative-advantage ratio (grad_norm_max, ratio_max_neg_adv); first precursor: flag@step "
              "(docs/metrics.md)\n");
  // infinite values are values: each mean above that met one shows inf (nan: both signs), and says where
  bool any = false;
  for (const Headline& h : rows)
    if (!h.nonfinite.empty()) {
      if (!any) std::printf("\nnon-finite values (counted in the means above, never averaged away):\n");
      any = true;
      std::string what;
      for (const std::string& n : h.nonfinite) what += (what.empty() ? "" : "; ") + n;
      std::printf("  %s: %s\n", h.file.c_str(), what.c_str());
    }
}

}  // namespace

int cmd_inspect(const Comms& comms, const std::vector<std::string>& args) {
  std::vector<std::string> files;
  bool show_scenario = false;
  po::options_description desc("moerl inspect options");
  desc.add_options()
      ("files", po::value(&files)->multitoken()->required(), "results files or sweep directories (positional)")
      ("show-scenario", po::bool_switch(&show_scenario),
       "also print the effective scenario of each run (--scenario FILE is an input in score, audit and bench)");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!cli_parse(comms, "inspect", "FILE.h5|SWEEP_DIR [FILE.h5]... [--show-scenario]", desc, pos, args, &vm)) return 0;
  if (!comms.is_root) return 0;
  std::map<std::string, std::string> flagged;
  files = inspect_run_files(files, &flagged);
  if (files.empty()) return 0;
  bool any_run = false;
  for (const std::string& path : files) any_run = any_run || !is_other(path);
  std::vector<Headline> rows;
  for (const std::string& path : files) {
    if (describe_other(path)) continue;  // a checkpoint or score file: described alone
    std::string scenario;
    rows.push_back(read(path, &scenario));
    if (flagged.count(path)) rows.back().status = flagged[path];  // not the run its name says (the index says why)
    if (show_scenario) std::printf("== %s ==\n%s\n", path.c_str(), scenario.c_str());
  }
  if (any_run) inspect_print_tables(rows);
  return 0;
}

}  // namespace moerl
