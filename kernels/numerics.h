// numerics.h — the vocabulary of emulated numerics: number formats, operand scaling, reduction
// order, top-k tie-breaking, and the NumericsProfile that bundles them for one engine.
//
// A profile is what makes the rollout engine and the train engine differ while running the same
// weights. It is not a model setting: the same checkpoint is run under any profile.
// Every injected source of nondeterminism draws from its own named stream (rng.h), so a profile
// with "nondeterministic" order is still reproducible: same seed, same bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/enum_names.h"

namespace moerl {

// ---- number formats -----------------------------------------------------------------------
// Storage/operand formats we round into (round-to-nearest-even, subnormals kept).
// fp8_e4m3 is the OCP "FN" variant: max 448, saturating, no infinities (NaN stays NaN).
// bf16, fp16 and fp8_e5m2 follow IEEE-754 rules: overflow past the rounding boundary gives ±inf.
enum class Format : uint8_t { fp32 = 0, bf16, fp16, fp8_e4m3, fp8_e5m2 };
inline constexpr int kFormatCount = 5;

// format_parse reads "fp32|bf16|fp16|fp8_e4m3|fp8_e5m2"; returns false on anything else.
inline constexpr EnumNames<Format, kFormatCount> kFormatNames{{"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"}};
static_assert(static_cast<int>(Format::fp8_e5m2) + 1 == kFormatNames.size());
inline const char* format_name(Format v) { return kFormatNames.name(v); }
inline bool format_parse(std::string_view s, Format* out) { return kFormatNames.parse(s, out); }
int format_mantissa_bits(Format f);  // explicit fraction bits: 23, 7, 10, 3, 2
float format_max(Format f);          // largest finite value: FLT_MAX, 3.3895e38, 65504, 448, 57344
// Relative rounding unit 2^-(mantissa bits): the "eps(format)" of test tolerances.
float format_eps(Format f);

// ---- scaling of quantised operands ----------------------------------------------------------
// scale = amax / format_max over the scaling group, q = round(x / scale), x' = q * scale.
// tensor: one scale; row: one per row; block: activations 1×B along K, weights B×B (DeepSeek-V3).
enum class Scaling : uint8_t { none = 0, tensor, row, block };
inline constexpr EnumNames<Scaling, 4> kScalingNames{{"none", "tensor", "row", "block"}};
static_assert(static_cast<int>(Scaling::block) + 1 == kScalingNames.size());
inline const char* scaling_name(Scaling v) { return kScalingNames.name(v); }
inline bool scaling_parse(std::string_view s, Scaling* out) { return kScalingNames.parse(s, out); }

// ---- reduction order --------------------------------------------------------------------------
// fixed:    sum k = 0..K-1 sequentially (the canonical order of the scalar references).
// reversed: sum k = K-1..0 sequentially.
// split_k:  K split into `split` contiguous chunks, each summed sequentially, the partial sums
//           added in an order drawn from the site's seeded stream (the atomics/split-K of GPUs).
enum class OrderKind : uint8_t { fixed = 0, reversed, split_k };
struct ReduceOrder {
  OrderKind kind = OrderKind::fixed;
  int split = 1;  // number of chunks for split_k (>= 2 to matter)
};
std::string reduce_order_name(const ReduceOrder& o);  // "fixed" | "reversed" | "split_k:4"
// Parses "fixed|reversed|split_k:N" (N in 2..64); returns false otherwise.
bool reduce_order_parse(std::string_view s, ReduceOrder* out);

// ---- top-k tie-breaking -------------------------------------------------------------------------
// Which of two exactly equal scores wins a top-k slot.
enum class TieBreak : uint8_t { lowest = 0, highest, random };
inline constexpr EnumNames<TieBreak, 3> kTieBreakNames{{"lowest", "highest", "random"}};
static_assert(static_cast<int>(TieBreak::random) + 1 == kTieBreakNames.size());
inline const char* tie_break_name(TieBreak v) { return kTieBreakNames.name(v); }
inline bool tie_break_parse(std::string_view s, TieBreak* out) { return kTieBreakNames.parse(s, out); }

// ---- expert-parallel layout an engine emulates ---------------------------------------------------
// Where an engine's experts live decides the order in which a token's k expert outputs come back
// to it, and so the order of the MoE combine sum (before combine_order is applied to it).
//  none:       slot order (k ascending: descending gate score) — no layout emulated;
//  contiguous: expert e on rank ⌊e·N/E⌋ — outputs arrive by ascending expert id;
//  strided:N   expert e on rank e mod N — outputs arrive by ascending (e mod N, ⌊e/N⌋).
// The layout is emulated (weights do not move), so an engine's bits do not depend on how many
// ranks actually run it. Another mismatch source between engines, switchable like the others.
enum class EpLayoutKind : uint8_t { none = 0, contiguous, strided };
struct EpLayout {
  EpLayoutKind kind = EpLayoutKind::none;
  int ranks = 1;  // N of strided:N
};
std::string ep_layout_name(const EpLayout& l);  // "none" | "contiguous" | "strided:8"
// Parses "none|contiguous|strided:N" (N in 2..4096); returns false otherwise.
bool ep_layout_parse(std::string_view s, EpLayout* out);

// ---- noise keys --------------------------------------------------------------------------------
// Named streams of injected nondeterminism (and of the other randomness of a run). A stream's
// draws depend only on (seed, stream, entity coordinates), never on call order.
enum class Stream : uint32_t {
  init = 1,          // parameter initialisation
  gemm_order,        // split-K chunk order in linear layers
  norm_order,        // RMSNorm reduction order
  attn_order,        // attention reduction order
  combine_order,     // MoE combine order of the k expert outputs
  topk_tie,          // random tie-breaking in top-k
  sampling,          // token sampling during generation
  data,              // prompts / token sampling for audit
  router_noise,      // the artificial router-logit noise of a profile (router_noise > 0)
};
const char* stream_name(Stream s);

// Identifies one call site of one reduction: which layer, which op inside the layer, which call
// (e.g. the decode position). Kernels derive their draws from (seed, stream, key).
struct NoiseKey {
  uint64_t seed = 0;
  uint32_t layer = 0;
  uint32_t site = 0;  // op within the layer (see models/ for the site ids)
  uint64_t call = 0;  // e.g. the first position covered by this call
  // Where set, the call is call + *call_at, read where the op runs (the backend's memory): a decode
  // step's position lies there, so that a recorded step (Backend::graph_begin, CUDA Graphs)
  // replays with the next step's draws. Null: call alone.
  const uint64_t* call_at = nullptr;
};
// The call a key stands for (read *call_at only where that memory is readable: a kernel of the
// backend that owns it, or the host for host memory).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint64_t noise_call(const NoiseKey& k) { return k.call + (k.call_at ? *k.call_at : 0); }
// The key with its call read (call_at null): the host side of an op that runs on the host.
inline NoiseKey noise_resolved(NoiseKey k) {
  k.call = noise_call(k);
  k.call_at = nullptr;
  return k;
}

// How one reduction is to be performed. batch_invariant=false lets the split count follow the
// number of rows M in the call, as real kernels pick split-K for small batches:
// effective_split(M) below.
struct ReduceCtx {
  ReduceOrder order;
  bool batch_invariant = true;
  bool atomics = false;  // CUDA backend only: split_k partials combined by atomicAdd (see profile)
  NoiseKey key;
};
inline ReduceCtx noise_resolved(ReduceCtx c) {
  c.key = noise_resolved(c.key);
  return c;
}
// Chunks actually used for a reduction over K elements in a call with M rows.
// Batch-invariant: order.split (1 unless split_k). Batch-variant: additionally ×4 when M < 64 and
// ×2 when M < 512 (clamped to K), so decoding (few rows) and prefill (many rows) sum differently.
int reduce_effective_split(const ReduceCtx& ctx, int M, int K);

// ---- the profile ---------------------------------------------------------------------------------
// One engine's numerics. Field docs say what is rounded where; docs/numerics.md has the full story.
struct NumericsProfile {
  std::string name = "fp32-ref";
  Format matmul = Format::fp32;        // operands of attention projections, experts, dense MLP
  Scaling act_scaling = Scaling::none;     // scaling of activation operands (quantised formats)
  Scaling weight_scaling = Scaling::none;  // scaling of weight operands
  int scale_block = 128;               // B of the 1×B / B×B scaling blocks
  int accum_bits = 0;                  // 0: FP32 accumulation; else fraction bits of the
                                       // limited-precision accumulator (e.g. 13 ≈ 14 effective)
  int promote_every = 128;             // N_c: products summed before promotion to FP32
  Format router = Format::fp32;        // operands of the router GEMM
  Format attention = Format::fp32;     // operands of QKᵀ and P·V
  Format lm_head = Format::fp32;       // operands of the LM head
  Format activations = Format::fp32;   // storage format of every op's output (residual included)
  Format router_logits = Format::fp32; // storage format of router logits before top-k
  ReduceOrder gemm_order;              // linear layers
  ReduceOrder norm_order;              // RMSNorm sum of squares
  ReduceOrder attn_order;              // attention: scores·V and the softmax denominator
  ReduceOrder combine_order;           // MoE combine of the k expert outputs (split_k: shuffled)
  bool batch_invariant = true;
  // CUDA backend only: a linear layer's split_k partial sums are combined with atomicAdd, in
  // whatever order the hardware schedules them — real run-to-run nondeterminism, not a seeded
  // draw. Needs gemm_order = split_k:N; the CPU backend rejects it (run validation).
  bool atomics = false;
  TieBreak tie_break = TieBreak::lowest;
  // σ of Gaussian noise added to every router logit (in logit units, after rounding, before the
  // top-k): an artificial dial of routing mismatch, not a model of any kernel. 0 = off. Drawn per
  // row from Stream::router_noise with key.call + row, like the random tie-break.
  float router_noise = 0.0f;
  EpLayout ep_layout;                  // emulated EP layout: base order of the MoE combine
  uint64_t seed = 0;                   // seed of this profile's noise streams
  // Not a setting: at run time, where a decode step's call lies in the backend's memory (every key
  // of the step takes it as NoiseKey::call_at; models/generation.cpp), else null.
  const uint64_t* call_at = nullptr;

  // True when no option injects rounding or order noise: the bit-exact FP32 reference.
  bool is_exact_fp32() const;
  // Rejects inconsistent settings; throws std::invalid_argument naming the key and value.
  void validate() const;
};

// Built-in profiles: "fp32-ref", "bf16-train", "fp16", "fp8-rollout". Returns false if unknown.
bool profile_builtin(std::string_view name, NumericsProfile* out);
// Comma-separated names of the built-ins (kernels/numerics_profiles.h), for error messages.
std::string profile_builtin_names();

}  // namespace moerl
