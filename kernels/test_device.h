// test_device.h — TestDeviceBackend: the CPU backend with a "device" of its own, for testing on
// any machine what a GPU run moves between host and device (kernels/transfers.h).
//
// Its memory (mem_alloc) is a region of the address space that the host cannot touch: it is
// mapped PROT_NONE except while one of the backend's ops or copies runs, so model code that reads
// or writes device memory directly — instead of through an op or mem_copy_2d — dies with SIGSEGV
// in the test instead of passing. Its ops are the CPU backend's kernels (the same bits as
// cpu_backend(), on either kind of pointer), and each call counts its crossings with OpCrossings
// exactly as the CUDA backend does, so a test here asserts what a GPU run would move.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

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

#define MOERL_OP(name, params, args)         \
  void name params const override {          \
    OpCrossings(*this, log_).name args;      \
    Open open(*this);                        \
    cpu_.name args;                          \
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
};

}  // namespace moerl
