// backend.cpp — backend names, the Op name table, and the CPU backend (kernels/cpu + kernels/linear).
#include "kernels/backend.h"

#include <tbb/info.h>

#include "kernels/backend_ops.h"
#include "kernels/cpu/ops.h"

namespace moerl {

namespace {
constexpr const char* kOpNames[] = {
    "embedding_forward", "embedding_backward", "rmsnorm_forward", "rmsnorm_backward",
    "rope_forward", "rope_backward", "attention_forward", "attention_backward",
    "attention_decode", "softmax_forward", "log_softmax_forward", "softmax_backward",
    "swiglu_forward", "swiglu_backward", "topk_forward", "logprob_forward", "logprob_backward",
    "adamw_update", "linear_pack_weight", "linear_forward", "linear_forward_grouped",
    "linear_backward", "linear_backward_grouped"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOpCount,
              "every Op needs its name in kOpNames");

// The CPU backend: kernels/cpu and the linear layer of kernels/linear.h.
struct CpuOps {
  static constexpr BackendKind kind = BackendKind::cpu;
  static std::string describe() {
    return "cpu (" + std::to_string(tbb::info::default_concurrency()) + " threads, " +
           blas_kernel_name() + ")";
  }
  static constexpr auto embedding_forward = &cpu::embedding_forward;
  static constexpr auto embedding_backward = &cpu::embedding_backward;
  static constexpr auto rmsnorm_forward = &cpu::rmsnorm_forward;
  static constexpr auto rmsnorm_backward = &cpu::rmsnorm_backward;
  static constexpr auto rope_forward = &cpu::rope_forward;
  static constexpr auto rope_backward = &cpu::rope_backward;
  static constexpr auto attention_forward = &cpu::attention_forward;
  static constexpr auto attention_backward = &cpu::attention_backward;
  static constexpr auto attention_decode = &cpu::attention_decode;
  static constexpr auto softmax_forward = &cpu::softmax_forward;
  static constexpr auto log_softmax_forward = &cpu::log_softmax_forward;
  static constexpr auto softmax_backward = &cpu::softmax_backward;
  static constexpr auto swiglu_forward = &cpu::swiglu_forward;
  static constexpr auto swiglu_backward = &cpu::swiglu_backward;
  static constexpr auto topk_forward = &cpu::topk_forward;
  static constexpr auto logprob_forward = &cpu::logprob_forward;
  static constexpr auto logprob_backward = &cpu::logprob_backward;
  static constexpr auto adamw_update = &cpu::adamw_update;
  static constexpr auto linear_pack_weight = &moerl::linear_pack_weight;
  static constexpr auto linear_forward = &moerl::linear_forward;
  static constexpr auto linear_forward_grouped = &moerl::linear_forward_grouped;
  static constexpr auto linear_backward = &moerl::linear_backward;
  static constexpr auto linear_backward_grouped = &moerl::linear_backward_grouped;
};
}  // namespace

const char* op_name(Op op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kOpCount ? kOpNames[i] : "?";
}

const Backend& cpu_backend() {
  static const OpsBackend<CpuOps> b;
  return b;
}

}  // namespace moerl
