// cpu/norm.cpp — the gradient clip's sum of squares (kernels/ops.def: sum_squares), the serial FP64
// sum the optimizer always took on the host (one accumulator over the ranges in order, or one per
// range): bit-identical to kernels/ref. Ranges are independent when per_range, so they run over
// TBB threads; the one-accumulator sum stays serial (its order is its bits).
#include <tbb/parallel_for.h>

#include "kernels/cpu/ops.h"

namespace moerl::cpu {

namespace {
double range_sum(double acc, const float* x, int64_t b, int64_t e) {
  for (int64_t j = b; j < e; ++j) acc += static_cast<double>(x[j]) * x[j];
  return acc;
}
}  // namespace

void sum_squares(double* sq, const float* x, const int64_t* begin, const int64_t* end, int n_ranges, bool per_range) {
  if (per_range) {
    tbb::parallel_for(0, n_ranges, [&](int r) { sq[r] = range_sum(0.0, x, begin[r], end[r]); });
    return;
  }
  double acc = 0.0;
  for (int r = 0; r < n_ranges; ++r) acc = range_sum(acc, x, begin[r], end[r]);
  sq[0] = acc;
}

}  // namespace moerl::cpu
