// sites.h — the call sites of a layer, as the entity of the profile's noise streams, and the
// LinearNumerics each site gets from a profile.
#pragma once

#include <cstdint>

#include "kernels/linear.h"
#include "kernels/numerics.h"

namespace moerl {

// Op within a layer (NoiseKey::site). Values are part of reproducibility: append, never reorder.
enum class Site : uint32_t {
  attn_norm = 1, wq, wk, wv, attention, wo, mlp_norm, router, topk, expert_gate, expert_up,
  expert_down, combine, shared_gate, shared_up, shared_down, mlp_gate, mlp_up, mlp_down,
  final_norm, lm_head,
};

// Which of the profile's operand formats a linear site uses.
enum class LinearKind : uint8_t { matmul, router, lm_head };

// The run mixes its own seed (and the RL step) into the profile's seed before a forward.
inline NoiseKey site_key(const NumericsProfile& p, int layer, Site site, uint64_t call) {
  NoiseKey k;
  k.seed = p.seed;
  k.layer = static_cast<uint32_t>(layer);
  k.site = static_cast<uint32_t>(site);
  k.call = call;
  return k;
}

inline LinearNumerics site_linear_numerics(const NumericsProfile& p, LinearKind kind,
                                           const NoiseKey& key) {
  LinearNumerics nm;
  nm.format = kind == LinearKind::matmul ? p.matmul
              : kind == LinearKind::router ? p.router
                                           : p.lm_head;
  const bool fp8 = nm.format == Format::fp8_e4m3 || nm.format == Format::fp8_e5m2;
  // Scaling only makes sense for the FP8 formats (BF16/FP16 have the range of their inputs);
  // the limited-precision accumulator is a property of FP8 tensor-core GEMMs.
  nm.act_scaling = fp8 ? p.act_scaling : Scaling::none;
  nm.weight_scaling = fp8 ? p.weight_scaling : Scaling::none;
  nm.scale_block = p.scale_block;
  nm.accum_bits = fp8 ? p.accum_bits : 0;
  nm.promote_every = p.promote_every;
  nm.reduce.order = p.gemm_order;
  nm.reduce.batch_invariant = p.batch_invariant;
  nm.reduce.atomics = p.atomics;
  nm.reduce.key = key;
  return nm;
}

inline ReduceCtx site_reduce(const NumericsProfile& p, const ReduceOrder& order, const NoiseKey& key) {
  ReduceCtx c;
  c.order = order;
  c.batch_invariant = p.batch_invariant;
  c.key = key;
  return c;
}

}  // namespace moerl
