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
  k.call_at = p.call_at;
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

// True when every op's result for a row depends on that row alone (and attention's on its own
// sequence's earlier rows), never on where the row sits in its call or how many rows the call
// has: no reduction split drawn per row (split_k) or sized by the call (batch_invariant = false),
// no random tie-break or router noise keyed by the row's index, no FP8 tensor-wide activation
// scale over the call's rows. Under such a profile a batch may drop rows (decode compaction) or
// pack its sequences without changing a bit of the others; under any other the batch keeps its
// layout, so that a sequence's numbers do not depend on when its neighbours finished.
inline bool profile_rows_independent(const NumericsProfile& p) {
  const ReduceOrder orders[] = {p.gemm_order, p.norm_order, p.attn_order, p.combine_order};
  for (const ReduceOrder& o : orders)
    if (o.kind == OrderKind::split_k && o.split > 1) return false;
  const Format scaled[] = {p.matmul, p.router, p.lm_head};
  for (Format f : scaled)
    if ((f == Format::fp8_e4m3 || f == Format::fp8_e5m2) && p.act_scaling == Scaling::tensor) return false;
  return p.batch_invariant && !p.atomics && p.tie_break != TieBreak::random && p.router_noise == 0.0f;
}

inline ReduceCtx site_reduce(const NumericsProfile& p, const ReduceOrder& order, const NoiseKey& key) {
  ReduceCtx c;
  c.order = order;
  c.batch_invariant = p.batch_invariant;
  c.key = key;
  return c;
}

}  // namespace moerl
