// device.h — the CUDA backend's entry points that the rest of the build may call. Compiled only
// when nvcc is found (MOERL_HAVE_CUDA); every caller guards on that macro.
#pragma once

#include <cstdint>
#include <string>

namespace moerl::cuda {

// Number of usable CUDA devices (0 when there is no driver or device); never throws.
int device_count();
// "NVIDIA H200 (sm_90, 139 GiB)" or the reason there is none.
std::string device_description();

// Rounds x[n] to bfloat16 and back on the device with the hardware conversion
// (__float2bfloat16_rn): the ground truth that the CPU emulation is checked against on a GPU.
// Returns false (and leaves out untouched) when there is no device.
bool round_bf16_on_device(float* out, const float* x, int64_t n);

}  // namespace moerl::cuda

namespace moerl::cuda {

// Binds this process (its calling thread) to device local_rank % device_count(): one GPU per rank
// on a node. Returns the device index; throws std::runtime_error when there is no device.
int select_device(int local_rank);

}  // namespace moerl::cuda

namespace moerl::cuda {

// The current device, for telling ranks' GPUs apart (sim/comm/device_sharing.h): its UUID
// ("GPU-3b1f…", unique across nodes; "" when unreadable) and a label for people
// ("GPU 0, NVIDIA H200, PCI 0000:19:00.0"). Never throw.
std::string device_uuid();
std::string device_label();

}  // namespace moerl::cuda
