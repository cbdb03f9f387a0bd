// backend_cuda.cpp — the CUDA backend: kernels/cuda/ops.h and gemm.h behind the Backend seam, with
// device memory of its own (cudaMalloc; copies by cudaMemcpy2D) and the host↔device crossings of
// every op and copy counted in its transfer log (kernels/transfers.h, OpCrossings: the same
// accounting as the CPU-only TestDeviceBackend's, so the CI test of the contract speaks for it).
#include "kernels/cuda/backend_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/buffer.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/op_crossings.h"

namespace moerl::cuda {

namespace {

class CudaBackend final : public Backend {
  static constexpr size_t kNarrow = 512;  // bytes: narrower rows are staged (mem_copy_2d)
  static constexpr int kStageSlot = 15;   // device_scratch slot of the staging (the ops use 0..6)

 public:
  BackendKind kind() const override { return BackendKind::cuda; }
  std::string describe() const override { return "cuda: " + device_description() + "; " + gemm_describe(); }

  MemorySpace memory_space() const override { return MemorySpace::device; }
  // The model's activation buffers come and go per call (models/workspace.h, ActBuffer): from the
  // device's stream-ordered pool where it has one (cudaMallocAsync on the default stream every op
  // runs on: a freed block is reused without a device-wide synchronisation), else cudaMalloc.
  void* mem_alloc(size_t bytes) const override {
    void* p = nullptr;
    if (pools_) MOERL_CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, cudaStreamLegacy));
    else MOERL_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    device_block_register(p, bytes);
    return p;
  }
  void mem_free(void* p) const override {
    if (!p) return;
    device_block_unregister(p);
    // errors at teardown are ignored (the runtime may be shutting down)
    if (pools_) cudaFreeAsync(p, cudaStreamLegacy);
    else cudaFree(p);
  }
  void mem_zero(void* p, size_t bytes) const override {
    if (bytes) MOERL_CUDA_CHECK(cudaMemset(p, 0, bytes));
  }
  void mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   CopyDir dir, CrossKind kind) const override {
    if (!width || !height) return;
    const cudaMemcpyKind k = dir == CopyDir::to_device ? cudaMemcpyHostToDevice
                             : dir == CopyDir::to_host ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
    if (dir == CopyDir::to_device) log_.add(CrossDir::up, kind, static_cast<int64_t>(width * height));
    if (dir == CopyDir::to_host) log_.add(CrossDir::down, kind, static_cast<int64_t>(width * height));
    if (dir == CopyDir::to_device && width < kNarrow && height > 1) {
      // Narrow rows (a decode step's key column: 4-byte rows at the cache's pitch) cross as one
      // contiguous upload, then spread on the device: a host-to-device 2D copy of many tiny rows
      // is slow, a device-to-device one is a kernel.
      void* stage = device_scratch(kStageSlot, width * height);
      if (spitch == width) MOERL_CUDA_CHECK(cudaMemcpy(stage, src, width * height, cudaMemcpyHostToDevice));
      else MOERL_CUDA_CHECK(cudaMemcpy2D(stage, width, src, spitch, width, height, cudaMemcpyHostToDevice));
      MOERL_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, stage, width, width, height, cudaMemcpyDeviceToDevice));
      return;
    }
    MOERL_CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, height, k));
  }
  bool is_device_pointer(const void* p) const override { return cuda::is_device_pointer(p); }
  TransferLog* transfers() const override { return &log_; }

#define MOERL_OP(name, params, args)    \
  void name params const override {     \
    OpCrossings(*this, log_).name args; \
    cuda::name args;                    \
  }
#include "kernels/ops.def"

 private:
  // True where the device has a stream-ordered pool; its release threshold is then raised so that
  // the pool keeps what it holds across synchronisations (every cudaMemcpy is one) instead of
  // handing it back to the driver at each, which would make every allocation a cudaMalloc again.
  static bool memory_pools() {
    int dev = 0, on = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&on, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess || on == 0)
      return false;
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) return false;
    uint64_t keep = UINT64_MAX;
    return cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
  }
  const bool pools_ = memory_pools();
  mutable TransferLog log_;
};

}  // namespace

const Backend& cuda_backend() {
  if (device_count() == 0)
    throw std::runtime_error("cuda backend: " + device_description());
  static const CudaBackend b;
  return b;
}

}  // namespace moerl::cuda
