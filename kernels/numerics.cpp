// numerics.cpp — names, parsing and validation of the numerics vocabulary (numerics.h), and the
// built-in profiles. docs/numerics.md describes every field and the profiles' rationale.
#include "kernels/numerics.h"

#include <cfloat>
#include <charconv>
#include <stdexcept>

namespace moerl {

namespace {

[[noreturn]] void reject(const NumericsProfile& p, const char* key, const std::string& value,
                         const char* allowed) {
  throw std::invalid_argument("profile." + p.name + "." + key + " = " + value + ": " + allowed);
}

bool is_fp8(Format f) { return f == Format::fp8_e4m3 || f == Format::fp8_e5m2; }

void check_order(const NumericsProfile& p, const char* key, const ReduceOrder& o) {
  if (o.kind == OrderKind::split_k && (o.split < 2 || o.split > 64))
    reject(p, key, reduce_order_name(o), "split_k:N needs N in 2..64");
  if (o.kind != OrderKind::split_k && o.split != 1)
    reject(p, key, reduce_order_name(o) + " (split " + std::to_string(o.split) + ")",
           "fixed and reversed take no split (split must be 1)");
  if (static_cast<int>(o.kind) > static_cast<int>(OrderKind::split_k))
    reject(p, key, "?", "fixed|reversed|split_k:N");
}

}  // namespace

int format_mantissa_bits(Format f) {
  switch (f) {
    case Format::fp32: return 23;
    case Format::bf16: return 7;
    case Format::fp16: return 10;
    case Format::fp8_e4m3: return 3;
    case Format::fp8_e5m2: return 2;
  }
  return 23;
}

float format_max(Format f) {
  switch (f) {
    case Format::fp32: return FLT_MAX;
    case Format::bf16: return 0x1.FEp127f;   // (2 − 2^-7)·2^127 ≈ 3.3895e38
    case Format::fp16: return 65504.0f;      // (2 − 2^-10)·2^15
    case Format::fp8_e4m3: return 448.0f;    // 1.75·2^8 (S.1111.111 is NaN in the FN variant)
    case Format::fp8_e5m2: return 57344.0f;  // 1.75·2^15
  }
  return FLT_MAX;
}

float format_eps(Format f) {
  // 2^-M, exact in float for every M here.
  return 1.0f / static_cast<float>(1u << format_mantissa_bits(f));
}

std::string reduce_order_name(const ReduceOrder& o) {
  switch (o.kind) {
    case OrderKind::fixed: return "fixed";
    case OrderKind::reversed: return "reversed";
    case OrderKind::split_k: return "split_k:" + std::to_string(o.split);
  }
  return "?";
}

bool reduce_order_parse(std::string_view s, ReduceOrder* out) {
  if (s == "fixed") {
    *out = ReduceOrder{OrderKind::fixed, 1};
    return true;
  }
  if (s == "reversed") {
    *out = ReduceOrder{OrderKind::reversed, 1};
    return true;
  }
  constexpr std::string_view prefix = "split_k:";
  if (s.substr(0, prefix.size()) != prefix) return false;
  std::string_view digits = s.substr(prefix.size());
  if (digits.empty() || digits.size() > 2) return false;
  int n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return false;
  if (n < 2 || n > 64) return false;
  *out = ReduceOrder{OrderKind::split_k, n};
  return true;
}

std::string ep_layout_name(const EpLayout& l) {
  switch (l.kind) {
    case EpLayoutKind::none: return "none";
    case EpLayoutKind::contiguous: return "contiguous";
    case EpLayoutKind::strided: return "strided:" + std::to_string(l.ranks);
  }
  return "?";
}

bool ep_layout_parse(std::string_view s, EpLayout* out) {
  if (s == "none" || s == "contiguous") {
    *out = EpLayout{s == "none" ? EpLayoutKind::none : EpLayoutKind::contiguous, 1};
    return true;
  }
  constexpr std::string_view prefix = "strided:";
  if (s.substr(0, prefix.size()) != prefix) return false;
  const std::string_view num = s.substr(prefix.size());
  int n = 0;
  const auto r = std::from_chars(num.data(), num.data() + num.size(), n);
  if (num.empty() || r.ec != std::errc() || r.ptr != num.data() + num.size() || n < 2 || n > 4096)
    return false;
  *out = EpLayout{EpLayoutKind::strided, n};
  return true;
}

const char* stream_name(Stream s) {
  switch (s) {
    case Stream::init: return "init";
    case Stream::gemm_order: return "gemm_order";
    case Stream::norm_order: return "norm_order";
    case Stream::attn_order: return "attn_order";
    case Stream::combine_order: return "combine_order";
    case Stream::topk_tie: return "topk_tie";
    case Stream::sampling: return "sampling";
    case Stream::data: return "data";
    case Stream::router_noise: return "router_noise";
  }
  return "?";
}

// Batch-variant multipliers are exclusive bands: ×4 below 64 rows, ×2 for 64..511 rows, ×1 from
// 512 rows up (decode-sized calls split most, like split-K heuristics of GPU GEMM libraries).
int reduce_effective_split(const ReduceCtx& ctx, int M, int K) {
  int split = ctx.order.kind == OrderKind::split_k ? ctx.order.split : 1;
  if (split < 1) split = 1;
  if (!ctx.batch_invariant) {
    if (M < 64)
      split *= 4;
    else if (M < 512)
      split *= 2;
  }
  if (split > K) split = K;
  return split < 1 ? 1 : split;
}

bool NumericsProfile::is_exact_fp32() const {
  const Format formats[] = {matmul, router, attention, lm_head, activations, router_logits};
  for (Format f : formats)
    if (f != Format::fp32) return false;
  const ReduceOrder orders[] = {gemm_order, norm_order, attn_order, combine_order};
  for (const ReduceOrder& o : orders)
    if (o.kind != OrderKind::fixed) return false;
  return accum_bits == 0 && batch_invariant && !atomics && tie_break == TieBreak::lowest && router_noise == 0.0f &&
         ep_layout.kind == EpLayoutKind::none;
}

void NumericsProfile::validate() const {
  const NumericsProfile& p = *this;
  if (name.empty()) throw std::invalid_argument("profile name is empty");
  if (scale_block < 1 || scale_block > 65536)
    reject(p, "scale_block", std::to_string(scale_block), "must be in 1..65536");
  if (accum_bits < 0 || accum_bits > 23)
    reject(p, "accum_bits", std::to_string(accum_bits),
           "must be in 0..23 (0 = FP32 accumulation, else fraction bits of the accumulator)");
  if (promote_every < 1)
    reject(p, "promote_every", std::to_string(promote_every), "must be >= 1");
  if (!(router_noise >= 0.0f && router_noise <= 100.0f))
    reject(p, "router_noise", std::to_string(router_noise), "must be in [0, 100] (logit units; 0 = off)");
  const struct {
    const char* key;
    Format f;
  } formats[] = {{"matmul", matmul},   {"router", router},           {"attention", attention},
                 {"lm_head", lm_head}, {"activations", activations}, {"router_logits", router_logits}};
  for (const auto& e : formats)
    if (static_cast<int>(e.f) >= kFormatCount)
      reject(p, e.key, std::to_string(static_cast<int>(e.f)), "fp32|bf16|fp16|fp8_e4m3|fp8_e5m2");
  // Linear layers (matmul, router, lm_head) scale their operands; an unscaled FP8 operand would
  // saturate or flush to zero depending on the weights' magnitude, which is no engine's recipe.
  const struct {
    const char* key;
    Format f;
  } scaled[] = {{"matmul", matmul}, {"router", router}, {"lm_head", lm_head}};
  for (const auto& e : scaled) {
    if (!is_fp8(e.f)) continue;
    if (act_scaling == Scaling::none)
      reject(p, "act_scaling", "none",
             (std::string("tensor|row|block required because ") + e.key + " = " + format_name(e.f))
                 .c_str());
    if (weight_scaling == Scaling::none)
      reject(p, "weight_scaling", "none",
             (std::string("tensor|row|block required because ") + e.key + " = " + format_name(e.f))
                 .c_str());
  }
  // These are rounded without scales, so FP8 would be meaningless there.
  const struct {
    const char* key;
    Format f;
  } unscaled[] = {{"attention", attention}, {"activations", activations},
                  {"router_logits", router_logits}};
  for (const auto& e : unscaled)
    if (is_fp8(e.f))
      reject(p, e.key, format_name(e.f), "fp32|bf16|fp16 (rounded unscaled, so no fp8)");
  if (static_cast<int>(act_scaling) > static_cast<int>(Scaling::block))
    reject(p, "act_scaling", "?", "none|tensor|row|block");
  if (static_cast<int>(weight_scaling) > static_cast<int>(Scaling::block))
    reject(p, "weight_scaling", "?", "none|tensor|row|block");
  check_order(p, "gemm_order", gemm_order);
  check_order(p, "norm_order", norm_order);
  check_order(p, "attn_order", attn_order);
  check_order(p, "combine_order", combine_order);
  if (atomics && gemm_order.kind != OrderKind::split_k)
    reject(p, "atomics", "true", ("needs gemm_order = split_k:N (gemm_order is " +
                                  reduce_order_name(gemm_order) + ")").c_str());
  if (static_cast<int>(tie_break) > static_cast<int>(TieBreak::random))
    reject(p, "tie_break", "?", "lowest|highest|random");
  if (static_cast<int>(ep_layout.kind) > static_cast<int>(EpLayoutKind::strided) ||
      (ep_layout.kind == EpLayoutKind::strided && (ep_layout.ranks < 2 || ep_layout.ranks > 4096)))
    reject(p, "ep_layout", ep_layout_name(ep_layout), "none|contiguous|strided:N with N in 2..4096");
}

bool profile_builtin(std::string_view name, NumericsProfile* out) {
  NumericsProfile p;  // defaults are fp32-ref
  if (name == "fp32-ref") {
    p.name = "fp32-ref";
  } else if (name == "bf16-train" || name == "fp16") {
    // Megatron-style mixed precision: low-precision operands and stored activations, FP32
    // accumulation, and the router (operands and logits) in FP32.
    Format f = name == "fp16" ? Format::fp16 : Format::bf16;
    p.name = std::string(name);
    p.matmul = f;
    p.attention = f;
    p.lm_head = f;
    p.activations = f;
  } else if (name == "fp8-rollout") {
    // FP8 inference engine (DeepSeek-V3 recipe: E4M3 operands, 1×128 activation and 128×128
    // weight blocks, ~14-bit accumulation promoted every 128 products) with vLLM-like
    // nondeterministic kernels: split-K GEMMs, batch-size-dependent splits, random tie-breaks.
    p.name = "fp8-rollout";
    p.matmul = Format::fp8_e4m3;
    p.act_scaling = Scaling::block;
    p.weight_scaling = Scaling::block;
    p.scale_block = 128;
    p.accum_bits = 13;
    p.promote_every = 128;
    p.router = Format::fp8_e4m3;
    p.attention = Format::bf16;
    p.lm_head = Format::bf16;
    p.activations = Format::bf16;
    p.router_logits = Format::bf16;
    p.gemm_order = ReduceOrder{OrderKind::split_k, 4};
    p.attn_order = ReduceOrder{OrderKind::split_k, 2};
    p.norm_order = ReduceOrder{OrderKind::split_k, 2};
    p.combine_order = ReduceOrder{OrderKind::split_k, 2};
    p.batch_invariant = false;
    p.tie_break = TieBreak::random;
  } else {
    return false;
  }
  *out = p;
  return true;
}

std::string profile_builtin_names() { return "fp32-ref, bf16-train, fp16, fp8-rollout"; }

}  // namespace moerl
