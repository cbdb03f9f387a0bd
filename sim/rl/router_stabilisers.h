// router_stabilisers.h — the router-side stabilisers compared beside the headline algorithms
// (docs/stabilisers.md): the calibration weight schedule, gradient surgery, and router
// temperature control. Pure functions; sim/rl/trainer.cpp applies them.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/enum_names.h"

namespace moerl {

// λ of the routing-calibration loss at `step` of `steps`: constant λ; linear λ·step/steps;
// sigmoid λ·σ(10·(step/steps − 1/2)) (a smooth ramp centred mid-run).
enum class RampSchedule : uint8_t { constant = 0, linear, sigmoid };
inline constexpr EnumNames<RampSchedule, 3> kRampScheduleNames{{"constant", "linear", "sigmoid"}};
static_assert(static_cast<int>(RampSchedule::sigmoid) + 1 == kRampScheduleNames.size());
inline const char* ramp_schedule_name(RampSchedule v) { return kRampScheduleNames.name(v); }
inline bool ramp_schedule_parse(std::string_view s, RampSchedule* out) { return kRampScheduleNames.parse(s, out); }
double ramp_weight(RampSchedule s, double lambda, int64_t step, int64_t steps);

// Gradient surgery (PCGrad-style projection) on one tensor: when the regulariser gradient g_reg
// conflicts with the policy gradient g_pol (cosine < 0), remove from g_reg its component along
// g_pol: g_reg ← g_reg − (g_reg·g_pol / |g_pol|²)·g_pol. Returns true when it fired.
bool surgery_project(float* g_reg, const float* g_pol, int64_t n);

// Router temperature control of one layer from its expert load [E] ((token, slot) counts):
// if fewer than min_utilisation of the experts receive tokens, τ ← τ·down; otherwise, if one
// expert takes more than monopoly of all assignments, τ ← τ·up; else τ is unchanged.
struct RouterTemperatureRule {
  float min_utilisation = 0.75f;
  float monopoly = 0.5f;
  float down = 0.9f;
  float up = 1.1f;
};
float router_temperature_update(float tau, const int64_t* load, int E, const RouterTemperatureRule& r);

}  // namespace moerl
