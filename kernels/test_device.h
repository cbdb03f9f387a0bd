// test_device.h — TestDeviceBackend: the CPU backend with a "device" of its own, for testing on
// any machine what a GPU run moves between host and device (kernels/transfers.h).
//
// Its memory (mem_alloc) is a region of the address space that the host cannot touch: it is
// mapped PROT_NONE except while one of the backend's ops or copies runs, so model code that reads
// or writes device memory directly — instead of through an op or mem_copy_2d — dies with SIGSEGV
// in the test instead of passing. Its ops are the CPU backend's kernels (the same bits as
// cpu_backend(), on either kind of pointer), and each call counts its crossings with OpCrossings
// exactly as the CUDA backend does, so a test here asserts what a GPU run would move.
//
// With set_graphs(true) it also records op graphs as a GPU's stream capture does (Backend::
// graph_begin): a recorded op or copy does not run, a launch runs the recording with the arguments
// it was recorded with (crossings counted at each launch), a recorded copy must use host_alloc
// memory on the host side, an op with a host array (one it would upload or download: OpCrossings
// counts a crossing) throws while recording, as do allocating and freeing, and a launch after an
// allocation or a free since the recording runs nothing and returns false. A model whose graph
// replays give the CPU's bits therefore takes every changing value from memory, as CUDA Graphs
// need.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/backend.h"
#include "kernels/op_crossings.h"

namespace moerl {

class TestDeviceBackend final : public Backend {
 public:
  // `reserve` bytes of address space for the device (mapped lazily); `fence`: the PROT_NONE guard.
  explicit TestDeviceBackend(size_t reserve = size_t{1} << 30, bool fence = true);
  ~TestDeviceBackend() override;
  TestDeviceBackend(const TestDeviceBackend&) = delete;
  TestDeviceBackend& operator=(const TestDeviceBackend&) = delete;

  BackendKind kind() const override { return BackendKind::cpu; }
  std::string describe() const override { return "test device (" + cpu_.describe() + "; device memory kept apart)"; }

  MemorySpace memory_space() const override { return MemorySpace::device; }
  void* mem_alloc(size_t bytes) const override;
  void mem_free(void* p) const override;
  void mem_zero(void* p, size_t bytes) const override;
  void mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   CopyDir dir, CrossKind kind) const override;
  bool is_device_pointer(const void* p) const override;
  TransferLog* transfers() const override { return &log_; }

  size_t device_bytes_in_use() const;

  bool graphs() const override { return graphs_; }
  void set_graphs(bool on) { graphs_ = on; }
  void graph_begin() const override;
  std::unique_ptr<Graph> graph_end() const override;
  bool graph_launch(const Graph& g) const override;
  void* host_alloc(size_t bytes) const override;
  void host_free(void* p) const override;
  int64_t graph_launches() const override { return launches_; }
  int64_t graphs_recorded() const override { return recorded_; }

  // An op runs (run_<op>), or, while recording, is kept with copies of its arguments — if nothing
  // of it would cross: an op that stages host memory does so with a copy a capture cannot take.
#define MOERL_OP(name, params, args)                                                  \
  void name params const override {                                                   \
    if (!recording_) return run_##name args;                                          \
    TransferLog would;                                                                \
    OpCrossings(*this, would).name args;                                              \
    if (would.total() > 0) refuse_recording(#name);                                   \
    recording_->steps.push_back([=, this] { run_##name args; });                      \
  }                                                                                   \
  void run_##name params const {                                           \
    OpCrossings(*this, log_).name args;                                    \
    Open open(*this);                                                      \
    cpu_.name args;                                                        \
  }
#include "kernels/ops.def"

 private:
  // Opens the device memory to the host for the scope (nested scopes: the outermost closes it).
  class Open {
   public:
    explicit Open(const TestDeviceBackend& b);
    ~Open();

   private:
    const TestDeviceBackend& b_;
  };
  void protect(bool open) const;
  void copy_now(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height, CopyDir dir,
                CrossKind kind) const;
  void not_recording(const char* what) const;
  [[noreturn]] void refuse_recording(const char* op) const;
  bool host_allocated(const void* p, size_t bytes) const;

  struct Recording final : Graph {
    std::vector<std::function<void()>> steps;
    int64_t epoch = 0;  // epoch_ when recorded
  };

  const Backend& cpu_ = cpu_backend();
  mutable TransferLog log_;
  char* base_ = nullptr;
  size_t reserve_ = 0;
  bool fence_ = true;
  mutable std::recursive_mutex mu_;
  mutable size_t top_ = 0;                          // bytes handed out from base_ (page-rounded)
  mutable std::multimap<size_t, size_t> free_;     // size → offset of freed blocks
  mutable std::map<size_t, size_t> live_;          // offset → size
  mutable int open_ = 0;
  bool graphs_ = false;
  mutable std::unique_ptr<Recording> recording_;
  mutable std::map<const char*, size_t> host_blocks_;  // host_alloc's blocks: start → bytes
  mutable int64_t launches_ = 0, recorded_ = 0;
  mutable int64_t epoch_ = 0;  // bumped by every mem_alloc and mem_free (graph_launch: stale graphs)
};

}  // namespace moerl
