// test_hd_round.cpp — the device's storage rounding (kernels/cuda/hd/round.h) run on the CPU:
// round_to_format's bits (kernels/precision.h) for every format, on every value the format can
// hold, both FP32 neighbours of each and the midpoint between consecutive values (the ties), and
// on a sweep of the whole FP32 bit space (every 997th pattern: subnormals, infinities and NaNs
// included). The GPU runs this very function (tests/gpu, round_format and add_round: bits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/cuda/hd/round.h"
#include "kernels/precision.h"

namespace moerl {
namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Counts the values where the device function's bits differ from round_to_format's, naming the first.
struct Diff {
  int64_t n = 0, bad = 0;
  std::string first;
  void check(float x, Format f) {
    ++n;
    const uint32_t want = bits(round_to_format(x, f)), got = bits(cuda::hd_round_to_format(x, f));
    if (want == got) return;
    if (bad++ == 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: x = %a (0x%08x): want 0x%08x, got 0x%08x", format_name(f), x, bits(x), want, got);
      first = buf;
    }
  }
};

constexpr Format kFormats[] = {Format::fp32, Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2};

TEST(HdRound, EveryValueItsNeighboursAndTheTies) {
  for (Format f : kFormats) {
    if (f == Format::fp32) continue;
    Diff d;
    const uint32_t codes = f == Format::bf16 || f == Format::fp16 ? 65536u : 256u;
    for (uint32_t c = 0; c < codes; ++c) {
      const float x = format_decode(c, f), next = format_decode(c + 1 < codes ? c + 1 : c, f);
      d.check(x, f);
      d.check(std::nextafter(x, INFINITY), f);
      d.check(std::nextafter(x, -INFINITY), f);
      if (std::isfinite(x) && std::isfinite(next)) {
        const float mid = x + (next - x) / 2;  // the tie (exact: one more bit than the format)
        d.check(mid, f);
        d.check(std::nextafter(mid, INFINITY), f);
        d.check(std::nextafter(mid, -INFINITY), f);
      }
    }
    EXPECT_EQ(d.bad, 0) << d.bad << " of " << d.n << "; first " << d.first;
    EXPECT_GT(d.n, 5 * static_cast<int64_t>(codes));
  }
}

TEST(HdRound, SweepOfTheFp32BitSpace) {
  for (Format f : kFormats) {
    Diff d;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 997) {
      float x;
      const uint32_t u32 = static_cast<uint32_t>(u);
      std::memcpy(&x, &u32, 4);
      d.check(x, f);
    }
    for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f, 448.0f, 449.0f, 464.0f, 65504.0f, 65520.0f,
                    57344.0f, 61440.0f, 3.3895314e38f, 3.4e38f})
      d.check(x, f);
    EXPECT_EQ(d.bad, 0) << d.bad << " of " << d.n << "; first " << d.first;
  }
}

}  // namespace
}  // namespace moerl
