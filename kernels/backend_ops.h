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

namespace detail {
// An op's arguments as the host-side kernels take them: the noise keys with their call read
// (NoiseKey::call_at lies in this backend's memory, which the host reads here), the rest as given.
template <class T>
const T& host_side(const T& x) { return x; }
inline NoiseKey host_side(const NoiseKey& k) { return noise_resolved(k); }
inline ReduceCtx host_side(const ReduceCtx& c) { return noise_resolved(c); }
inline LinearNumerics host_side(const LinearNumerics& n) { return noise_resolved(n); }
template <class F, class... A>
void call_host_side(F f, const A&... a) { f(host_side(a)...); }
}  // namespace detail
#define MOERL_EXPAND_ARGS(...) __VA_ARGS__

template <class Ops>
class OpsBackend final : public Backend {
 public:
  BackendKind kind() const override { return Ops::kind; }
  std::string describe() const override { return Ops::describe(); }
#define MOERL_OP(name, params, args) \
  void name params const override { detail::call_host_side(Ops::name, MOERL_EXPAND_ARGS args); }
#include "kernels/ops.def"
};

}  // namespace moerl
