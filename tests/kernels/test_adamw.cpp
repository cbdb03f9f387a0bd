// cpu::adamw_update against ref::adamw_update: the same bits for every parameter (vector body and
// scalar tail, several blocks of the parallel loop), over a few steps so the moments grow from zero;
// and one step against the formula written out by hand in double. The clip's sum of squares
// (sum_squares): the serial FP64 sum of the reference, one accumulator or one per range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "kernels/rng.h"

namespace moerl {
namespace {

std::vector<float> draw(size_t n, uint64_t seed, float scale) {
  Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {n}));
  std::vector<float> v(n);
  for (float& x : v) x = rng.normal() * scale;
  return v;
}

TEST(AdamW, FastEqualsReferenceBitForBit) {
  const int64_t n = 3 * 16384 + 1000 + 7;  // several parallel blocks and a scalar tail
  auto w = draw(n, 1, 0.02f), w_ref = w;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), m_ref = m, v_ref = v;
  for (int step = 0; step < 3; ++step) {
    auto g = draw(n, 10 + step, 1e-3f);
    for (int64_t i = 0; i < n; i += 97) g[i] = 0.0f;
    const double bc1 = 1.0 - std::pow(0.9, step + 1), bc2 = 1.0 - std::pow(0.999, step + 1);
    const float clip = step == 1 ? 0.37f : 1.0f, decay = step == 2 ? 1e-5f : 0.0f;
    cpu::adamw_update(w.data(), m.data(), v.data(), g.data(), n, clip, 0.9f, 0.999f, bc1, bc2, 1e-4f, decay, 1e-8f);
    ref::adamw_update(w_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, clip, 0.9f, 0.999f, bc1, bc2, 1e-4f,
                      decay, 1e-8f);
    ASSERT_EQ(0, std::memcmp(w.data(), w_ref.data(), sizeof(float) * n)) << "step " << step;
    ASSERT_EQ(0, std::memcmp(m.data(), m_ref.data(), sizeof(float) * n));
    ASSERT_EQ(0, std::memcmp(v.data(), v_ref.data(), sizeof(float) * n));
  }
}

TEST(AdamW, FirstStepMovesByLearningRate) {
  // step 0 with bias correction: m̂ = g', v̂ = g'², so the step is lr·g'/(|g'| + eps) ≈ ±lr.
  std::vector<float> w{1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  const std::vector<float> g{0.3f, -0.01f, 0.0f};
  cpu::adamw_update(w.data(), m.data(), v.data(), g.data(), 3, 1.0f, 0.9f, 0.999f, 1.0 - 0.9, 1.0 - 0.999,
                    1e-3f, 0.0f, 1e-8f);
  EXPECT_NEAR(w[0], 1.0f - 1e-3f, 1e-6f);   // tolerance: one float ulp of the values involved
  EXPECT_NEAR(w[1], -2.0f + 1e-3f, 2e-6f);
  EXPECT_EQ(w[2], 0.5f);                    // zero gradient, zero moments: no step
}

TEST(AdamW, SumSquaresIsTheSerialSum) {
  const auto g = draw(10007, 3, 1e-2f);
  const std::vector<int64_t> begin = {0, 100, 5000, 9000, 9000}, end = {50, 4999, 9000, 10007, 9000};  // one empty
  const int R = static_cast<int>(begin.size());
  for (const bool per_range : {false, true}) {
    std::vector<double> a(R, -1.0), b(R, -2.0);
    cpu::sum_squares(a.data(), g.data(), begin.data(), end.data(), R, per_range);
    ref::sum_squares(b.data(), g.data(), begin.data(), end.data(), R, per_range);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), (per_range ? R : 1) * sizeof(double)), 0) << "per_range " << per_range;
    // the optimizer's serial sum, written out (one accumulator through the ranges in order)
    double acc = 0.0, want0 = 0.0;
    for (int r = 0; r < R; ++r) {
      double one = 0.0;
      for (int64_t j = begin[r]; j < end[r]; ++j) {
        acc += static_cast<double>(g[j]) * g[j];
        one += static_cast<double>(g[j]) * g[j];
      }
      if (per_range) EXPECT_EQ(a[r], one) << "range " << r;
    }
    want0 = acc;
    if (!per_range) EXPECT_EQ(a[0], want0);
  }
}

}  // namespace
}  // namespace moerl
