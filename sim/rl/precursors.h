// precursors.h — collapse precursor flags (docs/metrics.md, "Collapse precursors"): per step, 0/1
// flags that fire when a metric of the step leaves the band of its own trailing history — the
// median of the previous `window` steps — in the direction the published collapse records
// report before a collapse (k3 rising, gradient norm spiking or dropping, entropy spiking,
// clipping bursting, effective sample size dropping, responses lengthening).
//
// Like RlTrainer::check_collapse they are recomputed from the results series, never from carried
// state, so a resumed run flags alike. A flag needs `window` finite earlier values; before that it
// is 0.
#pragma once

#include <string>
#include <vector>

namespace moerl {

class RunResults;

// The [precursors] section. Every rule compares x_t with m_t, the median of x over the previous
// `window` steps.
struct PrecursorConfig {
  int window = 10;               // W: steps of trailing history
  float k3_rise = 3.0f;          // rc_k3 > k3_rise · m
  float grad_norm_spike = 3.0f;  // grad_norm > grad_norm_spike · m
  float grad_norm_drop = 0.33f;  // grad_norm < grad_norm_drop · m (slime/Miles saw 0.07 → 0.02)
  float entropy_spike = 1.5f;    // entropy > entropy_spike · m
  float clip_burst = 3.0f;       // clip_frac > max(clip_burst · m, m + clip_burst_floor)
  float clip_burst_floor = 0.01f;
  float ess_drop = 0.9f;         // rc_ess_token < ess_drop · m
  float length_surge = 1.5f;     // response_length_mean > length_surge · m

  void validate() const;  // throws std::invalid_argument naming the key
};

// One flag: its metric name (pre_*), the series it reads and its rule, which compares the step's
// value x with m, the trailing median.
struct PrecursorFlag {
  const char* name;
  const char* source;
  bool (*fires)(const PrecursorConfig& c, double x, double m);
};
// Every flag, in a fixed order: pre_k3_rise, pre_grad_norm_spike, pre_grad_norm_drop,
// pre_entropy_spike, pre_clip_burst, pre_ess_drop, pre_length_surge.
const std::vector<PrecursorFlag>& precursor_flags();

// The flags of the last step in `series` (oldest first) for the named flag; 0 or 1.
double precursor_fires(const PrecursorConfig& c, const std::string& flag, const std::vector<double>& series);

// Sets every pre_* metric of the current step from the series already in `res`.
void precursors_record(RunResults* res, const PrecursorConfig& c);

}  // namespace moerl
