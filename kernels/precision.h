// precision.h — emulated low-precision formats: rounding, scaled quantisation, and the emulated
// matmul that accumulates quantised products in FP32 or in a limited-precision accumulator.
//
// Values are kept in float after rounding ("fake quantisation"): a rounded value is exactly the
// float that the format would decode to. All rounding is round-to-nearest-even with subnormals.
// These are the instrument of the project: tests/test_precision.cpp checks every representable
// value and every midpoint against an independent table-driven reference.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace moerl {

// Rounds one float into format f (see numerics.h for overflow rules). fp32 is the identity.
float round_to_format(float x, Format f);
// In-place rounding of n values.
void round_array(float* x, int64_t n, Format f);

// Encodes to / decodes from the format's bit pattern (uint16 for bf16/fp16, low 8 bits for fp8).
// encode rounds first; decode(encode(x)) == round_to_format(x).
uint32_t format_encode(float x, Format f);
float format_decode(uint32_t bits, Format f);

// Scaled quantisation of a row-major matrix x[rows, cols] into out[rows, cols] (may alias x).
// Groups: tensor (one), row (one per row), block (block_rows × block_cols tiles; the last tile of
// a dimension may be partial). scale = amax(group) / format_max(f) (1 when amax is 0), and
// out = round_to_format(x / scale, f) * scale. Scales are written to `scales` if non-null, in
// row-major group order. fp32 or Scaling::none copies x through round_to_format unscaled.
// Returns the number of groups.
int quantize_matrix(float* out, float* scales, const float* x, int rows, int cols, Format f,
                    Scaling s, int block_rows, int block_cols);

// Number of scale groups quantize_matrix will use.
int quantize_group_count(int rows, int cols, Scaling s, int block_rows, int block_cols);

// Limited-precision accumulation (DeepSeek-V3's FP8 GEMM observation): a running partial sum held
// with `accum_bits` fraction bits (rounded to nearest even after every add), promoted (added) into
// an FP32 accumulator every `promote_every` products. accum_bits = 0 means plain FP32.
float round_to_bits(float x, int fraction_bits);

}  // namespace moerl
