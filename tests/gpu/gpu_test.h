// gpu_test.h — GPU tests skip, with the reason, where no CUDA device is present.
#pragma once

#include <gtest/gtest.h>

#include "kernels/cuda/device.h"

#define MOERL_REQUIRE_GPU()                                                        \
  do {                                                                             \
    if (moerl::cuda::device_count() == 0)                                          \
      GTEST_SKIP() << "GPU test skipped: " << moerl::cuda::device_description();     \
  } while (0)
