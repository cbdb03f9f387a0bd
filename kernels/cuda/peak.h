// peak.h — the FP32 peak a CUDA device can reach, from its properties: SMs × FP32 lanes per SM
// × 2 (an FMA is two FLOPs) × clock. `moerl bench` prints it beside the SGEMM it measures, so a
// ceiling above the hardware's peak (a timing that did not bracket the work) is seen as wrong at
// once. Host arithmetic only (no CUDA headers): tested on the CPU (tests/cuda_host).
#pragma once

namespace moerl::cuda {

// FP32 FMA lanes per SM of compute capability major.minor (the CUDA C++ Programming Guide's
// "Arithmetic Instructions" table): 64 on sm_60, sm_70/75 and sm_80; 128 on sm_61, sm_86/87/89,
// sm_90, sm_100 and sm_120. Unknown (later) capabilities are taken as 128.
inline int fp32_lanes_per_sm(int major, int minor) {
  if (major == 6) return minor == 0 ? 64 : 128;
  if (major == 7) return 64;
  if (major == 8) return minor == 0 ? 64 : 128;
  return 128;
}

// TFLOP/s of FP32 FMAs at `clock_khz` (the device's boost clock, cudaDevAttrClockRate).
inline double fp32_peak_tflops(int major, int minor, int sms, int clock_khz) {
  return 2.0 * fp32_lanes_per_sm(major, minor) * static_cast<double>(sms) * clock_khz * 1e3 * 1e-12;
}

}  // namespace moerl::cuda
