// device.cu — see device.h.
#include <atomic>
#include "kernels/cuda/device.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>

#include "kernels/cuda/buffer.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace moerl::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_description() {
  if (device_count() == 0) return "no CUDA device (driver or GPU absent)";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "CUDA device 0 unreadable";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

namespace {
__global__ void round_bf16_kernel(float* out, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}
}  // namespace

bool round_bf16_on_device(float* out, const float* x, int64_t n) {
  if (device_count() == 0 || n <= 0) return false;
  float *dx = nullptr, *dy = nullptr;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (cudaMalloc(&dx, bytes) != cudaSuccess) return false;
  if (cudaMalloc(&dy, bytes) != cudaSuccess) { cudaFree(dx); return false; }
  cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  const int threads = 256;
  round_bf16_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads>>>(dy, dx, n);
  const bool ok = cudaMemcpy(out, dy, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(dx);
  cudaFree(dy);
  return ok;
}

}  // namespace moerl::cuda

// ---- buffer.h ------------------------------------------------------------------------------------

namespace moerl::cuda {

namespace {
std::atomic<uint64_t> g_memory_epoch{0};
}
uint64_t device_memory_epoch() { return g_memory_epoch.load(); }
void device_memory_moved() { g_memory_epoch.fetch_add(1); }

void* device_scratch(int slot, size_t bytes) {
  constexpr int kSlots = 16;
  if (slot < 0 || slot >= kSlots) throw std::invalid_argument("device_scratch: slot out of range");
  thread_local DeviceBuffer<unsigned char> slots[kSlots];
  slots[slot].resize(bytes);
  return slots[slot].get();
}

}  // namespace moerl::cuda

namespace moerl::cuda {

int select_device(int local_rank) {
  const int n = device_count();
  if (n == 0) throw std::runtime_error(device_description());
  const int dev = (local_rank < 0 ? 0 : local_rank) % n;
  MOERL_CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}

}  // namespace moerl::cuda

namespace moerl::cuda {

std::string device_uuid() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    const unsigned char b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    s += hex[b >> 4];
    s += hex[b & 15];
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

std::string device_label() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    return "an unreadable CUDA device";
  }
  char bus[32] = {};
  std::string s = "GPU " + std::to_string(dev) + ", " + prop.name;
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) == cudaSuccess) s += std::string(", PCI ") + bus;
  else cudaGetLastError();
  return s;
}

}  // namespace moerl::cuda

namespace moerl::cuda {

namespace {
// The backend's own blocks (device_block_register): start → end address. An op's array argument
// is either one of them (or inside one) or host memory, so a lookup here answers without a CUDA
// call per argument (cudaPointerGetAttributes costs about a microsecond).
std::mutex& blocks_mutex() {
  static std::mutex m;
  return m;
}
std::map<uintptr_t, uintptr_t>& blocks() {
  static std::map<uintptr_t, uintptr_t> b;
  return b;
}
}  // namespace

void device_block_register(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(blocks_mutex());
  blocks()[a] = a + (bytes ? bytes : 1);
}

void device_block_unregister(const void* p) {
  std::lock_guard<std::mutex> lock(blocks_mutex());
  blocks().erase(reinterpret_cast<uintptr_t>(p));
}

bool is_device_pointer(const void* p) {
  if (!p) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(blocks_mutex());
  auto it = blocks().upper_bound(a);
  if (it == blocks().begin()) return false;
  --it;
  return a < it->second;
}

}  // namespace moerl::cuda
