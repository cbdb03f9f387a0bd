// simd.cpp — the target names of simd.h over Highway's dispatch state (hwy/targets.h).
#include "kernels/simd_config.h"

#include "kernels/simd.h"

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include <hwy/highway.h>
#include <hwy/targets.h>

namespace moerl {

namespace {

struct Named {
  const char* name;
  int64_t bits;
};

// Our names for Highway's targets, best first (lower bit = better target in Highway).
std::vector<Named> compiled_targets() {
  std::vector<Named> out;
  for (int64_t rest = HWY_TARGETS; rest != 0; rest &= rest - 1) {
    const int64_t t = rest & -rest;
    const char* name = nullptr;
    switch (t) {
#if HWY_ARCH_X86
      case HWY_AVX3: name = "avx512"; break;
      case HWY_AVX2: name = "avx2"; break;
#endif
#if HWY_ARCH_ARM
      case HWY_SVE2: name = "sve2"; break;
      case HWY_SVE: name = "sve"; break;
      case HWY_SVE_256: name = "sve_256"; break;
      case HWY_SVE2_128: name = "sve2_128"; break;
      case HWY_NEON: name = "neon"; break;
#endif
      case HWY_EMU128: name = "scalar"; break;
      case HWY_SCALAR: name = "scalar"; break;
      default: break;
    }
    if (name) out.push_back({name, t});
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Supported by the CPU itself (not by the current restriction).
int64_t cpu_targets() {
  hwy::SetSupportedTargetsForTest(0);  // 0: back to the real CPU detection
  return hwy::SupportedTargets();
}

int64_t g_restriction = 0;  // 0 = none

}  // namespace

std::string simd_target() {
  const int64_t supported = hwy::SupportedTargets();
  for (const Named& t : compiled_targets())
    if (supported & t.bits) return t.name;
  return "scalar";
}

std::vector<std::string> simd_targets_available() {
  const int64_t saved = g_restriction;
  const int64_t cpu = cpu_targets();
  if (saved) hwy::SetSupportedTargetsForTest(saved);
  std::vector<std::string> out;
  for (const Named& t : compiled_targets())
    if (cpu & t.bits) out.push_back(t.name);
  return out;
}

std::vector<std::string> simd_target_names() {
  std::vector<std::string> out;
  for (const Named& t : compiled_targets()) out.push_back(t.name);
  out.push_back("best");
  return out;
}

void simd_select(const std::string& name, const std::string& key) {
  if (name == "best") {
    g_restriction = 0;
    hwy::SetSupportedTargetsForTest(0);
    return;
  }
  for (const Named& t : compiled_targets()) {
    if (name != t.name) continue;
    const int64_t cpu = cpu_targets();
    if (g_restriction) hwy::SetSupportedTargetsForTest(g_restriction);
    if (!(cpu & t.bits))
      throw std::invalid_argument(key + " = " + name + ": this CPU does not support it; allowed here: " +
                                  join(simd_targets_available()) + ", best");
    g_restriction = t.bits;
    hwy::SetSupportedTargetsForTest(t.bits);
    return;
  }
  throw std::invalid_argument(key + " = " + name + ": unknown SIMD target; allowed: " +
                              join(simd_target_names()));
}

void simd_select_from_env() {
  const char* v = std::getenv("MOERL_SIMD");
  if (v && *v) simd_select(v, "MOERL_SIMD");
}

}  // namespace moerl
