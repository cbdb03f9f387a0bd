// router_stabilisers.cpp — see router_stabilisers.h.
#include "sim/rl/router_stabilisers.h"

#include <algorithm>
#include <cmath>

namespace moerl {

double ramp_weight(RampSchedule s, double lambda, int64_t step, int64_t steps) {
  const double x = steps > 0 ? static_cast<double>(step) / static_cast<double>(steps) : 1.0;
  switch (s) {
    case RampSchedule::constant: return lambda;
    case RampSchedule::linear: return lambda * x;
    case RampSchedule::sigmoid: return lambda / (1.0 + std::exp(-10.0 * (x - 0.5)));
  }
  return lambda;
}

bool surgery_project(float* g_reg, const float* g_pol, int64_t n) {
  double dot = 0.0, pp = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    dot += static_cast<double>(g_reg[i]) * g_pol[i];
    pp += static_cast<double>(g_pol[i]) * g_pol[i];
  }
  if (!(dot < 0.0) || pp == 0.0) return false;
  const double f = dot / pp;
  for (int64_t i = 0; i < n; ++i) g_reg[i] -= static_cast<float>(f * g_pol[i]);
  return true;
}

float router_temperature_update(float tau, const int64_t* load, int E, const RouterTemperatureRule& r) {
  int64_t total = 0, mx = 0;
  int used = 0;
  for (int e = 0; e < E; ++e) {
    total += load[e];
    mx = std::max(mx, load[e]);
    used += load[e] > 0;
  }
  if (total == 0) return tau;
  if (static_cast<double>(used) < r.min_utilisation * E) return static_cast<float>(tau * r.down);
  if (static_cast<double>(mx) > r.monopoly * static_cast<double>(total)) return static_cast<float>(tau * r.up);
  return tau;
}

}  // namespace moerl
