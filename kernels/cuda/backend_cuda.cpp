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
  static constexpr auto embedding_forward = &cuda::embedding_forward;
  static constexpr auto embedding_backward = &cuda::embedding_backward;
  static constexpr auto rmsnorm_forward = &cuda::rmsnorm_forward;
  static constexpr auto rmsnorm_backward = &cuda::rmsnorm_backward;
  static constexpr auto rope_forward = &cuda::rope_forward;
  static constexpr auto rope_backward = &cuda::rope_backward;
  static constexpr auto attention_forward = &cuda::attention_forward;
  static constexpr auto attention_backward = &cuda::attention_backward;
  static constexpr auto attention_decode = &cuda::attention_decode;
  static constexpr auto softmax_forward = &cuda::softmax_forward;
  static constexpr auto log_softmax_forward = &cuda::log_softmax_forward;
  static constexpr auto softmax_backward = &cuda::softmax_backward;
  static constexpr auto swiglu_forward = &cuda::swiglu_forward;
  static constexpr auto swiglu_backward = &cuda::swiglu_backward;
  static constexpr auto topk_forward = &cuda::topk_forward;
  static constexpr auto logprob_forward = &cuda::logprob_forward;
  static constexpr auto logprob_backward = &cuda::logprob_backward;
  static constexpr auto adamw_update = &cuda::adamw_update;
  static constexpr auto linear_pack_weight = &cuda::linear_pack_weight;
  static constexpr auto linear_forward = &cuda::linear_forward;
  static constexpr auto linear_forward_grouped = &cuda::linear_forward_grouped;
  static constexpr auto linear_backward = &cuda::linear_backward;
  static constexpr auto linear_backward_grouped = &cuda::linear_backward_grouped;
};
}  // namespace

const Backend& cuda_backend() {
  if (device_count() == 0)
    throw std::runtime_error("cuda backend: " + device_description());
  static const OpsBackend<CudaOps> b;
  return b;
}

}  // namespace moerl::cuda
