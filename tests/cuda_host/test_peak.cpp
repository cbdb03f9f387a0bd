// test_peak.cpp — the FP32 peak the bench prints beside the GPU's SGEMM (kernels/cuda/peak.h):
// the published FP32 rates of the GPUs moerl is run on, from their SMs and boost clocks.
#include <gtest/gtest.h>

#include "kernels/cuda/peak.h"

namespace moerl {
namespace {

using cuda::fp32_lanes_per_sm;
using cuda::fp32_peak_tflops;

TEST(CudaPeak, LanesPerSm) {
  EXPECT_EQ(fp32_lanes_per_sm(7, 0), 64);   // V100
  EXPECT_EQ(fp32_lanes_per_sm(8, 0), 64);   // A100
  EXPECT_EQ(fp32_lanes_per_sm(8, 6), 128);  // A10, RTX 30xx
  EXPECT_EQ(fp32_lanes_per_sm(8, 9), 128);  // L40S, RTX 40xx
  EXPECT_EQ(fp32_lanes_per_sm(9, 0), 128);  // H100, H200
  EXPECT_EQ(fp32_lanes_per_sm(10, 0), 128);
}

// Vendor figures (non-tensor FP32): H100/H200 SXM 66.9 TFLOP/s (132 SMs, 1980 MHz), A100 19.5
// (108 SMs, 1410 MHz), H100 PCIe 51.2 (114 SMs, 1755 MHz). The 185 TFLOP/s that an earlier bench
// printed as the H200's "FP32 ceiling" is nearly three times its peak.
TEST(CudaPeak, PublishedRates) {
  EXPECT_NEAR(fp32_peak_tflops(9, 0, 132, 1980000), 66.9, 0.1);
  EXPECT_NEAR(fp32_peak_tflops(8, 0, 108, 1410000), 19.5, 0.1);
  EXPECT_NEAR(fp32_peak_tflops(9, 0, 114, 1755000), 51.2, 0.1);
  EXPECT_LT(fp32_peak_tflops(9, 0, 132, 1980000), 185.0 / 2);
  EXPECT_EQ(fp32_peak_tflops(9, 0, 0, 1980000), 0.0);
}

}  // namespace
}  // namespace moerl
