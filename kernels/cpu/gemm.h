// cpu/gemm.h — the forward GEMM behind linear.h: out[M,N] = inp[M,K] · Wᵀ with W pre-packed into
// K-major column panels, and every output's K-reduction carried out in an order fixed by a
// GemmReduce (not by the blocking, the thread count or M). Private to kernels/; the model calls
// linear.h. Outputs are written with '='.
//
// The reduction of one output element over k = 0..K-1:
//  * K is cut into `split` balanced contiguous chunks, chunk c = [c·K/split, (c+1)·K/split);
//  * each chunk is one sequential chain from 0.0f, ascending (fixed, split_k) or descending
//    (reversed): with accum_bits = 0 it is the FMA chain acc = fma(x_k, w_k, acc); with
//    accum_bits > 0 the chunk is walked in runs of promote_every products, each run summed in a
//    limited-precision accumulator p = round_to_bits(fma(x_k, w_k, p), accum_bits) from 0.0f and
//    then promoted: acc = acc + p (FP32);
//  * the chunks' partial sums are added left to right with no leading zero (as in
//    cpu/row_order.h), part[o_0] + part[o_1] + ..., in chunk order o = 0,1,.. (fixed),
//    split−1,..,0 (reversed) or a permutation drawn per row (split_k): row m shuffles its chunks
//    with Rng(rng_derive(key.seed, Stream::gemm_order, {key.layer, key.site, key.call, m})).
//    Per row, so different tokens see different orders (like different output tiles of a GPU
//    split-K kernel), and nothing depends on the thread count or on the other rows of the call.
// With split = 1, fixed order and accum_bits = 0 the result is bit-identical to
// ref::matmul_forward whatever M is.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"

namespace moerl::cpu {

// Panel layout: columns n0..n0+31 of W form a panel stored [K][32] (k-major) at offset n0·K; the
// last panel is 16 wide ([K][16]) when at most 16 columns remain; missing columns are zero.
inline constexpr int kGemmPanel = 32;
int64_t gemm_packed_size(int N, int K);
// packed[gemm_packed_size(N,K)] ← w[N,K]
void gemm_pack(float* packed, const float* w, int N, int K);

struct GemmReduce {
  int split = 1;                      // chunks of K actually used (reduce_effective_split)
  OrderKind kind = OrderKind::fixed;  // chunk direction and combine order (see above)
  NoiseKey key;                       // draws of the split_k combine order
  int accum_bits = 0;                 // 0: FP32 chains; 1..23: limited-precision runs
  int promote_every = 128;            // run length of the limited accumulator
  bool operands_nan_free = false;     // promise: no NaN in inp or W (enables the faster limited
                                      // kernel; results are identical either way)
  // FP32 exponent fields of W's nonzero entries (lowest) and of all entries (highest), from
  // gemm_exp_range at pack time; -1 = unknown. With accum_bits in 1..22 and operand ranges for
  // which no intermediate can be subnormal or overflow (checked per block of rows), the limited
  // accumulator rounds with Veltkamp's splitting instead of integer operations: the same bits
  // (see gemm.cpp), half the cost.
  int w_exp_lo = -1, w_exp_hi = -1;
  // Fake-quantisation of inp applied on the fly, one cache block of rows at a time, exactly as
  // quantize_matrix(·, act_format, act_scaling, 1, act_block) on the whole matrix would do it.
  // Row-local groups only (none | row | block); tensor scaling is the caller's job.
  Format act_format = Format::fp32;
  Scaling act_scaling = Scaling::none;
  int act_block = 128;
};

// True when no element of x[0..n) is NaN.
bool gemm_nan_free(const float* x, int64_t n);
// *lo = lowest FP32 exponent field (bits 23..30) of the nonzero elements of x[0..n) (255 when all
// are zero), *hi = highest over all elements (255 for inf / NaN).
void gemm_exp_range(const float* x, int64_t n, int* lo, int* hi);

// Rows m0..m1-1 of the call, computed on the calling thread.
// out[M,N], inp[M,K] (row m at inp + m·K), packed = gemm_pack of W[N,K].
void gemm_rows(float* out, const float* inp, const float* packed, int m0, int m1, int N, int K,
               const GemmReduce& red);
// All M rows, in parallel (oneTBB) over row tiles and column panels.
void gemm_forward(float* out, const float* inp, const float* packed, int M, int N, int K,
                  const GemmReduce& red);

// The chunk combine order of row m: order[0..red.split) is a permutation of 0..split-1.
void gemm_chunk_order(int* order, const GemmReduce& red, int64_t m);
// Rows m0..m1-1's orders of `split` chunks (the call's plan: red.split, or fewer when K is
// shorter) at orders + (m − m0)·split, gemm_chunk_order's values at split = red.split, with the
// call's part of each row's stream derived once.
void gemm_chunk_orders(int* orders, const GemmReduce& red, int split, int64_t m0, int64_t m1);

// Rows per register tile of the kernel: callers that hand out row ranges (grouped experts) align
// them to this so that tiles stay full.
int gemm_row_tile();

}  // namespace moerl::cpu
