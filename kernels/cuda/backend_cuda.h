// backend_cuda.h — the CUDA backend (kernels/backend.h) over kernels/cuda/ops.h and gemm.h.
#pragma once

#include "kernels/backend.h"

namespace moerl::cuda {

// The CUDA backend on device 0 of this process (sim/ picks the device per rank first).
// Throws std::runtime_error when no device is present.
const Backend& cuda_backend();
// Whether the backend records op graphs (Backend::graphs; on unless MOERL_CUDA_GRAPHS=0): a test
// compares a run with them against one without.
void set_cuda_graphs(bool on);

}  // namespace moerl::cuda
