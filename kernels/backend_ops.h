// backend_ops.h — OpsBackend<Ops>: the Backend whose every op calls Ops::op, for backends whose
// ops are free functions with the Backend's signatures (the CPU's kernels/cpu, the CUDA backend's
// kernels/cuda). Ops names kind, describe() and one function pointer per op of kernels/ops.def,
// each typed by the list, so a missing or mistyped op fails to compile:
//   struct CpuOps {
//     static constexpr BackendKind kind = BackendKind::cpu;
//     static std::string describe();
//   #define MOERL_OP(name, params, args) static constexpr void (*name) params = &cpu::name;
//   #include "kernels/ops.def"
//   };
#pragma once

#include <string>

#include "kernels/backend.h"

namespace moerl {

template <class Ops>
class OpsBackend final : public Backend {
 public:
  BackendKind kind() const override { return Ops::kind; }
  std::string describe() const override { return Ops::describe(); }
#define MOERL_OP(name, params, args) \
  void name params const override { Ops::name args; }
#include "kernels/ops.def"
};

}  // namespace moerl
