// results.h — the results file of one run (docs/hdf5-schema.md, "Run results"): per-step metric
// series under metrics/, optional per-token dumps under dump/step_{s}/, and root attributes
// (scenario text, algorithm, routing_replay, seed, version, status).
//
// Kept in memory and rewritten whole through H5File's temporary-name-then-rename, so the file on
// disk is always complete: a run stopped at any point leaves its last written state intact.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moerl {

// The results format this build writes and resumes: version 2 adds `ranks`, and with it a results
// file records the whole run identity (sim/io/run_identity.h); version 1 files are read by inspect
// and report, but --resume refuses them.
inline constexpr int64_t kResultsVersion = 2;

// moerl's one meaning of "final reward" (index.csv, the sweep table, `moerl inspect`, the end-of-run
// line of `moerl run`, the report and summary.csv; analysis/summary.py computes the same): the mean
// of reward_mean over the last kFinalRewardSteps steps that set it (fewer when the run is
// shorter; NaN when none did). A mean, not the last step: one step's sampled reward is noisy.
inline constexpr int kFinalRewardSteps = 10;
double final_reward_of(const std::vector<double>& reward_mean);

class RunResults {
 public:
  // Starts the row of step `step` (0-based, consecutive).
  void begin_step(int64_t step);
  int64_t steps() const { return steps_; }

  // A scalar of the current step (float64 dataset metrics/<name> [steps]; steps that did not set
  // it hold NaN, e.g. eval_accuracy between evaluations).
  void set(const std::string& name, double value);
  // A row of the current step (dataset metrics/<name> [steps, row_shape...]).
  void set_row(const std::string& name, const std::vector<int64_t>& row_shape,
               const std::vector<double>& row);
  // Per-token tensor of a step's dump (dump/step_{s}/<name>, float32, given shape).
  void dump(int64_t step, const std::string& name, const std::vector<int64_t>& shape,
            const std::vector<float>& data);

  // Last value of a scalar series (NaN when never set).
  double last(const std::string& name) const;
  // The run's "final reward" (final_reward_of reward_mean).
  double final_reward() const;
  const std::vector<double>* series(const std::string& name) const;

  std::map<std::string, std::string> attrs;     // string root attributes
  std::map<std::string, int64_t> int_attrs;     // integer root attributes
  std::map<std::string, double> float_attrs;    // float64 root attributes

  // Writes the whole file atomically.
  void write(const std::string& path) const;
  // Reads a results file back (metrics only), keeping the first `steps` rows (resume).
  void load(const std::string& path, int64_t steps);

 private:
  struct Series {
    std::vector<int64_t> row_shape;  // empty for scalars
    std::vector<double> data;        // steps × row size
  };
  int64_t row_size(const Series& s) const;
  void pad(Series* s) const;  // grows a series to the current number of rows (NaN fill)
  int64_t steps_ = 0;
  std::map<std::string, Series> series_;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> dumps_;
};

}  // namespace moerl
