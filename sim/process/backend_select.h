// backend_select.h — run.backend: the Backend a command's model runs on, bound to this rank's GPU,
// and the checks that a scenario asks nothing of it that it cannot do. Errors name run.backend (or
// the profile key) with the value and what is allowed; call inside a checked phase (sim/comm/comms.h)
// so every rank fails together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "models/collectives.h"

namespace moerl {

class RankGrid;

// True when this build has the CUDA backend (nvcc found at configure time).
bool backend_cuda_built();
// CUDA devices this process sees (0 without the CUDA backend, a driver or a GPU).
int backend_cuda_devices();

// The backend of `kind`. cuda: binds device local_rank % (devices on the node) first; throws
// std::invalid_argument naming `key` (the option that asked for it) when the build has no CUDA
// backend or the node has no device.
const Backend& backend_select(BackendKind kind, int local_rank,
                              const std::string& key = "run.backend");

// Profile switches that only one backend has: atomics (split-K combined by atomicAdd) needs cuda.
void backend_check_profiles(BackendKind kind, const std::vector<const NumericsProfile*>& profiles);

// The collectives of the EP group for the model's dispatcher: NCCL over the group's GPUs when the
// backend is cuda, the build has NCCL, the group has more than one rank and no two of its ranks
// share a GPU; else null (keep the MPI ones). Ranks sharing a GPU are found before NCCL is touched
// (sim/comm/device_sharing.h, collective over the group) and the group's root prints one line
// naming them and the device. `host` (the MPI collectives of the same group) serves the
// non-all-to-all collectives.
std::unique_ptr<Collectives> backend_ep_collectives(BackendKind kind, const RankGrid* grid,
                                                    Collectives* host);

}  // namespace moerl
