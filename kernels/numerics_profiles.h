// numerics_profiles.h — the built-in numerics profiles, one row each (kernels/numerics.cpp): the
// name a scenario's [engines] or a [profile.NAME] section's `base` names, a doc line, and what
// the profile changes from NumericsProfile's defaults (which are fp32-ref). profile_builtin and
// profile_builtin_names (numerics.h) read this table. Adding a profile: one row.
#pragma once

#include <vector>

#include "kernels/numerics.h"

namespace moerl {

struct ProfileInfo {
  const char* name;
  const char* doc;
  void (*make)(NumericsProfile* p);
};
const std::vector<ProfileInfo>& profile_registry();  // fp32-ref, bf16-train, fp16, fp8-rollout

}  // namespace moerl
