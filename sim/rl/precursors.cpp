// precursors.cpp — see precursors.h.
#include "sim/rl/precursors.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "sim/io/results.h"

namespace moerl {

void PrecursorConfig::validate() const {
  auto bad = [](const std::string& key, float v, const std::string& allowed) {
    throw std::invalid_argument("precursors." + key + " = " + std::to_string(v) + ": " + allowed);
  };
  if (window < 1) throw std::invalid_argument("precursors.window = " + std::to_string(window) + ": must be >= 1");
  if (!(k3_rise > 1.0f)) bad("k3_rise", k3_rise, "must be > 1");
  if (!(grad_norm_spike > 1.0f)) bad("grad_norm_spike", grad_norm_spike, "must be > 1");
  if (!(grad_norm_drop > 0.0f && grad_norm_drop < 1.0f)) bad("grad_norm_drop", grad_norm_drop, "must be in (0, 1)");
  if (!(entropy_spike > 1.0f)) bad("entropy_spike", entropy_spike, "must be > 1");
  if (!(clip_burst > 1.0f)) bad("clip_burst", clip_burst, "must be > 1");
  if (!(clip_burst_floor >= 0.0f)) bad("clip_burst_floor", clip_burst_floor, "must be >= 0");
  if (!(ess_drop > 0.0f && ess_drop < 1.0f)) bad("ess_drop", ess_drop, "must be in (0, 1)");
  if (!(length_surge > 1.0f)) bad("length_surge", length_surge, "must be > 1");
}

const std::vector<PrecursorFlag>& precursor_flags() {
  // one row per flag, in the order of precursors.h; the rules of PrecursorConfig's fields
  static const std::vector<PrecursorFlag> flags = {
      {"pre_k3_rise", "rc_k3", [](const PrecursorConfig& c, double x, double m) { return x > c.k3_rise * m; }},
      {"pre_grad_norm_spike", "grad_norm",
       [](const PrecursorConfig& c, double x, double m) { return x > c.grad_norm_spike * m; }},
      {"pre_grad_norm_drop", "grad_norm",
       [](const PrecursorConfig& c, double x, double m) { return x < c.grad_norm_drop * m; }},
      {"pre_entropy_spike", "entropy",
       [](const PrecursorConfig& c, double x, double m) { return x > c.entropy_spike * m; }},
      {"pre_clip_burst", "clip_frac",
       [](const PrecursorConfig& c, double x, double m) { return x > std::max(c.clip_burst * m, m + c.clip_burst_floor); }},
      {"pre_ess_drop", "rc_ess_token", [](const PrecursorConfig& c, double x, double m) { return x < c.ess_drop * m; }},
      {"pre_length_surge", "response_length_mean",
       [](const PrecursorConfig& c, double x, double m) { return x > c.length_surge * m; }}};
  return flags;
}

namespace {
// Median of the last `w` finite values before the last element; false when there are fewer.
bool trailing_median(const std::vector<double>& x, int w, double* median) {
  if (x.size() < 2) return false;
  std::vector<double> h;
  for (size_t i = x.size() - 1; i-- > 0 && static_cast<int>(h.size()) < w;)
    if (std::isfinite(x[i])) h.push_back(x[i]);
  if (static_cast<int>(h.size()) < w) return false;
  std::sort(h.begin(), h.end());
  *median = h.size() % 2 ? h[h.size() / 2] : 0.5 * (h[h.size() / 2 - 1] + h[h.size() / 2]);
  return true;
}
}  // namespace

namespace {
const PrecursorFlag& precursor_find(const std::string& flag) {
  for (const PrecursorFlag& f : precursor_flags())
    if (flag == f.name) return f;
  throw std::invalid_argument("unknown precursor flag " + flag);
}

double flag_fires(const PrecursorConfig& c, const PrecursorFlag& f, const std::vector<double>& series) {
  if (series.empty() || !std::isfinite(series.back())) return 0.0;
  double m = 0.0;
  if (!trailing_median(series, c.window, &m)) return 0.0;
  return f.fires(c, series.back(), m) ? 1.0 : 0.0;
}
}  // namespace

double precursor_fires(const PrecursorConfig& c, const std::string& flag, const std::vector<double>& series) {
  return flag_fires(c, precursor_find(flag), series);
}

void precursors_record(RunResults* res, const PrecursorConfig& c) {
  for (const PrecursorFlag& f : precursor_flags()) {
    const std::vector<double>* s = res->series(f.source);
    res->set(f.name, s ? flag_fires(c, f, *s) : 0.0);
  }
}

}  // namespace moerl
