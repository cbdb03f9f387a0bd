// backend.h — where the model's ops run. A Backend is the set of ops the model calls (every kernel
// of kernels/cpu/ops.h and every linear-layer entry of kernels/linear.h), behind one interface, so
// the same model, scenario and RL loop run on the CPU or on a GPU, selected at run time
// (`run.backend = cpu | cuda`).
//
// Contract: every op takes and returns HOST pointers and has the semantics, argument order and
// '=' / '+=' conventions of its kernels/cpu counterpart. The CPU backend is those kernels; the
// CUDA backend (kernels/cuda/) uploads the operands, computes on the device with the hardware's
// own arithmetic (cuBLAS/cuBLASLt BF16/FP16/FP8 GEMMs, device reductions) and downloads the
// results — so its numbers are what a GPU really computes, and it is checked against the CPU
// backend per op within each format's tolerance (tests/gpu), not bit for bit.
//
// The ops, their signatures and their order are the list in kernels/ops.def; the Op enum, the
// op_name table and the pure virtuals below are generated from it (docs/architecture.md, "Adding
// an op").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/enum_names.h"
#include "kernels/linear.h"
#include "kernels/numerics.h"

namespace moerl {

enum class BackendKind : uint8_t { cpu = 0, cuda };
inline constexpr EnumNames<BackendKind, 2> kBackendNames{{"cpu", "cuda"}};
static_assert(static_cast<int>(BackendKind::cuda) + 1 == kBackendNames.size());
inline const char* backend_name(BackendKind v) { return kBackendNames.name(v); }
inline bool backend_parse(std::string_view s, BackendKind* out) { return kBackendNames.parse(s, out); }

enum class Op : uint8_t {
#define MOERL_OP(name, params, args) name,
#include "kernels/ops.def"
  count
};
inline constexpr int kOpCount = static_cast<int>(Op::count);
const char* op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // "cpu (2 threads, OpenBLAS ...)" / "cuda: NVIDIA H200 (sm_90, 139 GiB)".
  virtual std::string describe() const = 0;

  // One pure virtual per op of kernels/ops.def: virtual void name(parameters) const = 0;
#define MOERL_OP(name, params, args) virtual void name params const = 0;
#include "kernels/ops.def"
};

// The CPU backend (kernels/cpu + kernels/linear.cpp): always available.
const Backend& cpu_backend();
// b, or the CPU backend when b is null (call structs default their backend pointer to null).
inline const Backend& backend_or_cpu(const Backend* b) { return b ? *b : cpu_backend(); }

}  // namespace moerl
