// cpu/ops.h — fast CPU kernels (TBB threads; SIMD per target, kernels/simd.h), same
// semantics and argument order as kernels/ref/ops.h. Kernels whose reduction order the profile
// controls take a ReduceCtx: with ReduceCtx{} (fixed, batch-invariant) they give the same bits
// as the reference; with other orders they agree with it within abs + |ref|·K·eps(fp32).
//
// Batch invariance: the result of a row never depends on how many rows are in the call unless
// ctx.batch_invariant is false (then reduce_effective_split(ctx, rows, width) chunks are used).
// Full-sequence attention and KV-cache decoding share one per-row routine, so under the same
// ctx they give bit-identical outputs for the same query/keys.
#pragma once

#include <cstdint>

#include "kernels/numerics.h"
#include "kernels/policy_loss_params.h"

namespace moerl::cpu {

// The kernels of kernels/ops.def: void name(parameters);
#define MOERL_OP(name, params, args) void name params;
#define MOERL_LINEAR_OP(name, params, args)
#include "kernels/ops.def"

// y[n] = exp_f32(x[n]) element-wise by the target's vector kernel (kernels/expf.h's bits).
void exp_f32_array(float* y, const float* x, int64_t n);

}  // namespace moerl::cpu
