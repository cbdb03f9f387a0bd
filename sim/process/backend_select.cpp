// backend_select.cpp — see backend_select.h.
#include "sim/process/backend_select.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "sim/comm/comms.h"
#if MOERL_HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/device.h"
#endif
#if MOERL_HAVE_NCCL
#include <unistd.h>

#include <cstdio>

#include "sim/comm/device_sharing.h"
#include "sim/comm/nccl_collectives.h"
#endif

namespace moerl {

bool backend_cuda_built() {
#if MOERL_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int backend_cuda_devices() {
#if MOERL_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

const Backend& backend_select(BackendKind kind, int local_rank, const std::string& key) {
  if (kind == BackendKind::cpu) return cpu_backend();
#if MOERL_HAVE_CUDA
  if (cuda::device_count() == 0)
    throw std::invalid_argument(key + " = cuda: " + cuda::device_description() +
                                " on this node; allowed here: cpu");
  cuda::select_device(local_rank);
  return cuda::cuda_backend();
#else
  (void)local_rank;
  throw std::invalid_argument(
      key + " = cuda: this moerl was built without the CUDA backend (nvcc was not found at "
      "configure time; see docs/gpu.md); allowed here: cpu");
#endif
}

void backend_check_profiles(BackendKind kind, const std::vector<const NumericsProfile*>& profiles) {
  if (kind == BackendKind::cuda) return;
  for (const NumericsProfile* p : profiles)
    if (p && p->atomics)
      throw std::invalid_argument("profile." + p->name +
                                  ".atomics = true: needs run.backend = cuda (atomicAdd order is "
                                  "the GPU's; on the cpu backend use gemm_order = split_k:N, the "
                                  "seeded emulation of it)");
}

std::unique_ptr<Collectives> backend_ep_collectives(BackendKind kind, const RankGrid* grid,
                                                    Collectives* host) {
  if (kind != BackendKind::cuda || !grid || !host || host->size() < 2) return nullptr;
#if MOERL_HAVE_NCCL
  // Ranks sharing a GPU keep the MPI all-to-all (device_sharing.h): decided from one table that
  // every rank gathers, so all take the same path and none waits in a NCCL bootstrap.
  char node[256] = {};
  if (gethostname(node, sizeof(node) - 1) != 0) std::strcpy(node, "?");
  RankDevice mine{cuda::device_uuid(), cuda::device_label(), node};
  if (mine.key.empty()) mine.key = std::string(node) + "/" + mine.label;
  const std::vector<RankDevice> all = device_sharing_gather(grid->ep_comm(), mine);
  const std::vector<std::vector<int>> shared = device_sharing_groups(all);
  if (!shared.empty()) {
    if (host->rank() == 0) std::fprintf(stderr, "moerl: %s\n", device_sharing_line(shared, all).c_str());
    return nullptr;
  }
  return make_nccl_collectives(grid->ep_comm(), host);
#else
  return nullptr;
#endif
}

}  // namespace moerl
