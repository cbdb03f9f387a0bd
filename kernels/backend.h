// backend.h — where the model's ops run. A Backend is the set of ops the model calls (every kernel
// of kernels/cpu/ops.h and every linear-layer entry of kernels/linear.h), behind one interface, so
// the same model, scenario and RL loop run on the CPU or on a GPU, selected at run time
// (`run.backend = cpu | cuda`).
//
// Contract: every op has the semantics, argument order and '=' / '+=' conventions of its
// kernels/cpu counterpart, on host pointers or the backend's own memory (below). The CPU backend
// is those kernels; the CUDA backend (kernels/cuda/) uploads the host operands, computes on the
// device with the hardware's own arithmetic (cuBLAS/cuBLASLt BF16/FP16/FP8 GEMMs, device
// reductions) and downloads the host results — so its numbers are what a GPU really computes, and
// it is checked against the CPU backend per op within each format's tolerance (tests/gpu), not
// bit for bit.
//
// The ops, their signatures and their order are the list in kernels/ops.def; the Op enum, the
// op_name table and the pure virtuals below are generated from it (docs/architecture.md, "Adding
// an op").
//
// Where memory lives. A backend also owns memory (mem_*): on the CPU backend it is host memory and
// a copy is a memcpy; on a backend whose memory_space() is `device` (CUDA; the CPU-only
// TestDeviceBackend of kernels/test_device.h, whose "device" the host cannot read) it is the
// device's, and the host reaches it only through mem_copy_2d. Every op accepts either kind of
// pointer for its array arguments: one in the backend's memory is used where it lies (resident),
// a host one is uploaded / downloaded around the op. Such a backend counts every host↔device
// crossing in its transfers() log (kernels/transfers.h), per RL-step phase and kind of data. The
// model keeps in the backend's memory what it has moved there (today: the KV cache,
// models/generation.cpp); the rest of its arrays are host memory (docs/gpu.md says what crosses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/enum_names.h"
#include "kernels/linear.h"
#include "kernels/numerics.h"
#include "kernels/policy_loss_params.h"
#include "kernels/transfers.h"

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

// Where a backend's own memory (Backend::mem_alloc) lives.
enum class MemorySpace : uint8_t { host = 0, device };
// A copy's direction: host → backend memory, backend memory → host, within backend memory.
enum class CopyDir : uint8_t { to_device = 0, to_host, on_device };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // "cpu (2 threads, OpenBLAS ...)" / "cuda: NVIDIA H200 (sm_90, 139 GiB)".
  virtual std::string describe() const = 0;

  // ---- memory (the defaults: host memory, the CPU backend's) ----
  virtual MemorySpace memory_space() const { return MemorySpace::host; }
  // `bytes` of the backend's memory (uninitialised; 64-byte aligned); mem_free(nullptr) is a no-op.
  virtual void* mem_alloc(size_t bytes) const;
  virtual void mem_free(void* p) const;
  virtual void mem_zero(void* p, size_t bytes) const;  // p in the backend's memory
  // `height` rows of `width` bytes, row i from src + i·spitch to dst + i·dpitch (cudaMemcpy2D).
  // to_device / to_host count as crossings of `kind` in transfers() where the backend has a
  // device; on_device never does.
  virtual void mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                           size_t height, CopyDir dir, CrossKind kind) const;
  // True when p lies in the backend's own memory on a device (never on the CPU backend).
  virtual bool is_device_pointer(const void* p) const { (void)p; return false; }
  // The crossings counted so far (null: the backend has no device, nothing crosses).
  virtual TransferLog* transfers() const { return nullptr; }

  void mem_copy(void* dst, const void* src, size_t bytes, CopyDir dir, CrossKind kind) const {
    mem_copy_2d(dst, bytes, src, bytes, bytes, 1, dir, kind);
  }

  // ---- op graphs (CUDA Graphs on a GPU; the CPU backend has none) ----
  // A recording of the ops and copies issued between graph_begin() and graph_end(), run again by
  // graph_launch() with the arguments they were recorded with. While recording nothing runs, no
  // memory is allocated or freed and no result may be read. A copy from the host reads its source
  // again at each launch, so it must lie in host_alloc memory (pinned on a GPU) that the caller
  // refills before launching; a copy to the host lands at each launch, in host_alloc memory, to be
  // read after sync(). Every value that changes from one launch to the next must come in that way
  // (a decode step's tokens, positions and lengths; its call, NoiseKey::call_at). graph_end
  // returns null where the backend could not record what was issued (graph_failure() says why;
  // the caller then issues it again, eagerly). graph_launch returns false, running nothing, where
  // the backend's memory was allocated or freed since the recording (an address it holds may have
  // moved): the caller issues the work eagerly and records it again.
  class Graph {
   public:
    virtual ~Graph() = default;
  };
  virtual bool graphs() const { return false; }
  virtual void graph_begin() const;
  virtual std::unique_ptr<Graph> graph_end() const;
  [[nodiscard]] virtual bool graph_launch(const Graph& g) const;
  virtual std::string graph_failure() const { return {}; }
  virtual int64_t graph_launches() const { return 0; }   // launches so far
  virtual int64_t graphs_recorded() const { return 0; }  // graphs recorded so far
  virtual void sync() const {}  // waits for what was launched (a GPU's stream)
  // Host memory for a graph's copies (pinned on a GPU; 64-byte aligned); host_free(nullptr): no-op.
  virtual void* host_alloc(size_t bytes) const;
  virtual void host_free(void* p) const;

  // One pure virtual per op of kernels/ops.def: virtual void name(parameters) const = 0;
#define MOERL_OP(name, params, args) virtual void name params const = 0;
#include "kernels/ops.def"
};

// The memory members of a backend that wraps `inner` (a counting or timing backend), forwarded.
#define MOERL_BACKEND_FORWARD_MEMORY(inner)                                                         \
  MemorySpace memory_space() const override { return (inner).memory_space(); }                     \
  void* mem_alloc(size_t bytes) const override { return (inner).mem_alloc(bytes); }                \
  void mem_free(void* p) const override { (inner).mem_free(p); }                                   \
  void mem_zero(void* p, size_t bytes) const override { (inner).mem_zero(p, bytes); }              \
  void mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,         \
                   size_t height, CopyDir dir, CrossKind kind) const override {                    \
    (inner).mem_copy_2d(dst, dpitch, src, spitch, width, height, dir, kind);                       \
  }                                                                                                 \
  bool is_device_pointer(const void* p) const override { return (inner).is_device_pointer(p); }   \
  TransferLog* transfers() const override { return (inner).transfers(); }                          \
  bool graphs() const override { return (inner).graphs(); }                                         \
  void graph_begin() const override { (inner).graph_begin(); }                                      \
  std::unique_ptr<Graph> graph_end() const override { return (inner).graph_end(); }                 \
  bool graph_launch(const Graph& g) const override { return (inner).graph_launch(g); }              \
  std::string graph_failure() const override { return (inner).graph_failure(); }                    \
  int64_t graph_launches() const override { return (inner).graph_launches(); }                      \
  int64_t graphs_recorded() const override { return (inner).graphs_recorded(); }                    \
  void sync() const override { (inner).sync(); }                                                    \
  void* host_alloc(size_t bytes) const override { return (inner).host_alloc(bytes); }              \
  void host_free(void* p) const override { (inner).host_free(p); }

// The CPU backend (kernels/cpu + kernels/linear.cpp): always available.
const Backend& cpu_backend();
// b, or the CPU backend when b is null (call structs default their backend pointer to null).
inline const Backend& backend_or_cpu(const Backend* b) { return b ? *b : cpu_backend(); }

}  // namespace moerl
