// buffer.h — device memory for the CUDA backend: an owning buffer, host↔device copies, and the
// error check every CUDA call goes through (a failed call throws std::runtime_error naming the
// call, file and line; nothing in moerl calls exit() on a CUDA error).
//
// An op's array argument may be a host pointer (uploaded, or downloaded after the op) or the
// backend's own device memory (used where it lies: dev_in / finish_out; kernels/backend.h). Buffers are cached per thread and grow only
// (DeviceScratch), so a decode loop does not call cudaMalloc per op. Every copy here is
// cudaMemcpyDefault (unified addressing): an op that stages an operand through scratch is correct
// for a resident (device) argument too — a copy within the device, no crossing — where it has not
// yet been taught to use it in place.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace moerl::cuda {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cudaGetErrorString(e));
}
#define MOERL_CUDA_CHECK(call)                                                   \
  do {                                                                           \
    const cudaError_t moerl_err_ = (call);                                       \
    if (moerl_err_ != cudaSuccess) ::moerl::cuda::cuda_fail(moerl_err_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: launch-configuration errors now, execution errors at the next sync.
#define MOERL_CUDA_LAUNCHED() MOERL_CUDA_CHECK(cudaGetLastError())

// An owning device allocation of n elements of T (uninitialised). Move-only.
// Bumped whenever device memory is allocated or freed here (a DeviceBuffer: the ops' scratch, the
// packed weights) or by the backend (mem_alloc / mem_free): a recorded graph holds addresses, and
// one recorded before a bump may point at memory that has moved (CudaBackend::graph_launch).
uint64_t device_memory_epoch();
void device_memory_moved();

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { release(); p_ = o.p_; n_ = o.n_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  // Reallocates (contents lost) only when n exceeds the capacity.
  void resize(size_t n) {
    if (n <= n_) return;
    release();
    MOERL_CUDA_CHECK(cudaMalloc(&p_, (n ? n : 1) * sizeof(T)));
    n_ = n;
    device_memory_moved();
  }
  T* get() const { return p_; }
  size_t capacity() const { return n_; }
  // n elements from host memory or device memory (the backend's resident parameters: unified
  // addressing tells them apart)
  void upload(const T* src, size_t n) {
    resize(n);
    if (n) MOERL_CUDA_CHECK(cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyDefault));
  }
  void download(T* dst, size_t n) const {  // to host memory or device memory (cudaMemcpyDefault)
    if (n) MOERL_CUDA_CHECK(cudaMemcpy(dst, p_, n * sizeof(T), cudaMemcpyDefault));
  }
  void zero(size_t n) {
    resize(n);
    if (n) MOERL_CUDA_CHECK(cudaMemsetAsync(p_, 0, n * sizeof(T), cudaStreamPerThread));
  }

 private:
  void release() {
    if (p_) {
      cudaFree(p_);
      device_memory_moved();
    }
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Numbered per-thread scratch buffers (slot 0..15) that only grow: ops take their operands'
// device copies from here. Two live operands of one op must use different slots.
void* device_scratch(int slot, size_t bytes);
template <class T>
T* scratch_upload(int slot, const T* host, size_t n) {
  T* d = static_cast<T*>(device_scratch(slot, n * sizeof(T)));
  if (n && host) MOERL_CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyDefault));
  return d;
}
template <class T>
T* scratch_zeroed(int slot, size_t n) {
  T* d = static_cast<T*>(device_scratch(slot, n * sizeof(T)));
  if (n) MOERL_CUDA_CHECK(cudaMemsetAsync(d, 0, n * sizeof(T), cudaStreamPerThread));
  return d;
}
template <class T>
void download(T* host, const T* dev, size_t n) {
  if (n) MOERL_CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDefault));
}

// True when p lies in a block of the backend's own memory (Backend::mem_alloc, registered with
// device_block_register), which ops use where it lies instead of uploading it; false for host
// memory and for the ops' own scratch. Never throws.
bool is_device_pointer(const void* p);
void device_block_register(const void* p, size_t bytes);
void device_block_unregister(const void* p);

// An op's array argument on the device: p itself when it is device memory (resident), else its
// upload into scratch `slot`. The output counterpart: write to dev_out's pointer, then finish_out.
template <class T>
T* dev_in(int slot, T* p, size_t n) {
  if (!p || is_device_pointer(p)) return p;
  return scratch_upload(slot, static_cast<const T*>(p), n);
}
template <class T>
const T* dev_in(int slot, const T* p, size_t n) {
  if (!p || is_device_pointer(p)) return p;
  return scratch_upload(slot, p, n);
}
// Where an op writes an output of n elements: p itself when it is device memory, else scratch
// `slot`, which finish_out then downloads into p.
template <class T>
T* dev_out(int slot, T* p, size_t n) {
  return is_device_pointer(p) ? p : static_cast<T*>(device_scratch(slot, n * sizeof(T)));
}
template <class T>
void finish_out(T* host_or_dev, const T* dev, size_t n) {
  if (host_or_dev != dev) download(host_or_dev, dev, n);
}

// Blocks of `threads` covering n elements.
inline unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace moerl::cuda
