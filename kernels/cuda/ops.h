// ops.h — the CUDA backend's non-GEMM ops: same semantics, argument order and '=' / '+='
// conventions as kernels/cpu/ops.h. Host array arguments are uploaded to per-thread device scratch
// and host outputs downloaded (see buffer.h); arrays in device memory are used where they lie
// where an op takes them so (adamw_update; attention_decode over the resident KV cache). FP32 arithmetic on the
// device; the per-element and per-row math is in kernels/cuda/hd/*.h (MOERL_HD), shared with the
// host tests.
//
// Numerics on the device, against the CPU kernels:
//  * reductions (RMSNorm sum of squares, softmax denominators, P·V, dot products) are done by one
//    thread block per row with a fixed tree order: deterministic run to run and batch-invariant,
//    but not the sequential order of the CPU reference, so results agree within FP32 rounding
//    (tolerance abs + |ref|·D·eps(fp32)), not bit for bit. ctx.order / ctx.key are accepted for
//    interface parity; only the key's seed-driven parts that decide *which* element wins (top-k
//    random tie-break) are honoured exactly, through the same counter-based stream as the CPU.
//  * expf / logf are the device's IEEE-accurate expf/logf (not --use_fast_math).
// Throws std::runtime_error on any CUDA error.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"
#include "kernels/policy_loss_params.h"

namespace moerl::cuda {

// The kernels of kernels/ops.def: void name(parameters);
#define MOERL_OP(name, params, args) void name params;
#define MOERL_LINEAR_OP(name, params, args)
#include "kernels/ops.def"

}  // namespace moerl::cuda
