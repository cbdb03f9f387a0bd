// r3.cpp — R3, rollout routing replay (arXiv 2510.11370): GRPO's loss (grpo.cpp) with the train
// engine replaying the rollout engine's expert choices, in the π_old recompute and in every
// mini-batch. A routing choice, not a loss: a row alone that runs grpo's loss and forces
// rl.routing_replay = rollout.
#include "sim/rl/registry.h"

namespace moerl::rl {

MOERL_REGISTER_ALGORITHM(r3, {.doc = "grpo + rollout routing replay (arXiv 2510.11370)",
                              .loss_of = "grpo",
                              .routing_replay = RoutingReplay::rollout});

}  // namespace moerl::rl
