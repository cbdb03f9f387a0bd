// backend_cuda.cpp — the CUDA backend: OpsBackend over kernels/cuda/ops.h and gemm.h.
#include "kernels/cuda/backend_cuda.h"

#include <stdexcept>

#include "kernels/backend_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"

namespace moerl::cuda {

namespace {
struct CudaOps {
  static constexpr BackendKind kind = BackendKind::cuda;
  static std::string describe() {
    return "cuda: " + device_description() + "; " + gemm_describe();
  }
#define MOERL_OP(name, params, args) static constexpr void(*name) params = &cuda::name;
#include "kernels/ops.def"
};
}  // namespace

const Backend& cuda_backend() {
  if (device_count() == 0)
    throw std::runtime_error("cuda backend: " + device_description());
  static const OpsBackend<CudaOps> b;
  return b;
}

}  // namespace moerl::cuda
