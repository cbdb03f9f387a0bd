// hd/gemm_hd.h — the per-element and index arithmetic of the CUDA linear layer (kernels/cuda/gemm.cu),
// shared with the host tests (tests/cuda_host/test_gemm_hd.cpp), which check it against the CPU's
// kernels/precision.cpp and kernels/cpu/gemm.cpp:
//  * scales: scale = amax(group) / format_max (1 when that is zero, infinite or NaN), groups as
//    quantize_matrix draws them (tensor | row | block: activations 1×B, weights B×B) — bit for bit
//    the CPU's scales;
//  * element codes: x / scale converted with the hardware conversions (__float2bfloat16_rn,
//    __float2half_rn, __nv_cvt_float_to_fp8: E4M3 saturating like the CPU, E5M2 overflowing to
//    inf like the CPU), and their decoded values: decode(code)·scale is the CPU's fake-quantised
//    value;
//  * the padded K layout of the low-precision operands: K is cut into K-blocks of `kblock`
//    (the scale block B under block scaling, else all of K), each padded with zeros to a multiple
//    of 16 elements, so that every K-block (and every 16-aligned split-K chunk) starts on a 16-byte
//    boundary and has a length that is a multiple of 16 — cuBLASLt's FP8 requirements;
//  * split-K: the CPU's chunk bounds c·K/split, the 16-aligned bounds of the low-precision path,
//    and the chunk combine order of a row — the same seeded permutation as cpu::gemm_chunk_order;
//  * the epilogue: acc·sa·sw and the ordered combine, rounded once per operation (hd/arith.h: nvcc
//    would otherwise fuse the multiply into the add).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/hd/arith.h"
#include "kernels/cuda/hd/bits.h"
#include "kernels/hd.h"
#include "kernels/numerics.h"
#include "kernels/rng.h"

namespace moerl::cuda {

inline constexpr int kGemmAlign = 16;      // elements: K padding of the low-precision operands
inline constexpr int kGemmMaxSplit = 256;  // split_k:64 × 4 (batch variance), as cpu/gemm.cpp

// ---- scales ------------------------------------------------------------------------------------------
// Largest finite value of f: format_max(f) bit for bit.
MOERL_HD float gemm_fmt_max(Format f) {
  switch (f) {
    case Format::bf16: return hd_bits_float(0x7F7F0000u);
    case Format::fp16: return 65504.0f;
    case Format::fp8_e4m3: return 448.0f;
    case Format::fp8_e5m2: return 57344.0f;
    case Format::fp32: break;
  }
  return hd_bits_float(0x7F7FFFFFu);
}

// |x| as an unsigned key whose integer order is the order of |x| (NaN → 0: ignored by the max, as
// the CPU's amax ignores it). The group amax is then an exact, order-free atomicMax.
MOERL_HD uint32_t gemm_amax_key(float x) {
  const uint32_t a = hd_float_bits(x) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

// scale = amax / format_max, 1 when that is not a positive finite number; fp32 keeps scale 1.
MOERL_HD float gemm_scale_from_amax(float amax, Format f) {
  float s = f == Format::fp32 ? 1.0f : hd_div(amax, gemm_fmt_max(f));
  if (!(s > 0.0f) || hd_float_bits(s) >= 0x7F800000u) s = 1.0f;
  return s;
}

// Scale groups of a rows × cols matrix, as quantize_matrix: group of (i, j) = (i / br)·gc + j / bc.
// Scaling::none has no groups (gr = gc = 0).
struct GemmGroups {
  int rows = 0, cols = 0, br = 1, bc = 1, gr = 0, gc = 0;
};
MOERL_HD GemmGroups gemm_groups(int rows, int cols, Scaling s, int block_rows, int block_cols) {
  GemmGroups g;
  g.rows = rows;
  g.cols = cols;
  if (rows <= 0 || cols <= 0 || s == Scaling::none) return g;
  if (s == Scaling::tensor) {
    g.br = rows;
    g.bc = cols;
  } else if (s == Scaling::row) {
    g.br = 1;
    g.bc = cols;
  } else {
    g.br = block_rows < 1 ? 1 : block_rows;
    g.bc = block_cols < 1 ? 1 : block_cols;
  }
  g.gr = (rows + g.br - 1) / g.br;
  g.gc = (cols + g.bc - 1) / g.bc;
  return g;
}
MOERL_HD int gemm_group_count(const GemmGroups& g) { return g.gr * g.gc; }
MOERL_HD int gemm_group_of(const GemmGroups& g, int i, int j) { return (i / g.br) * g.gc + j / g.bc; }
// Rows [*i0, *i1) × columns [*j0, *j1) of group `group`.
MOERL_HD void gemm_group_extent(const GemmGroups& g, int group, int* i0, int* i1, int* j0, int* j1) {
  const int bi = group / g.gc, bj = group % g.gc;
  *i0 = bi * g.br;
  *i1 = *i0 + g.br < g.rows ? *i0 + g.br : g.rows;
  *j0 = bj * g.bc;
  *j1 = *j0 + g.bc < g.cols ? *j0 + g.bc : g.cols;
}

// ---- element codes -----------------------------------------------------------------------------------
// Storage bytes per element of the low-precision operand (2 for bf16/fp16, 1 for FP8; 4 for fp32).
MOERL_HD int gemm_code_bytes(Format f) {
  return f == Format::bf16 || f == Format::fp16 ? 2 : (f == Format::fp32 ? 4 : 1);
}
// The storage bits of x / scale in format f (bf16/fp16: 16 bits, FP8: 8 bits; fp32: the float bits).
MOERL_HD uint32_t gemm_quant_code(float x, float scale, Format f) {
  const float v = hd_div(x, scale);
  switch (f) {
    case Format::bf16: return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(v)).x;
    case Format::fp16: return static_cast<__half_raw>(__float2half_rn(v)).x;
    case Format::fp8_e4m3: return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    case Format::fp8_e5m2: return __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2);
    case Format::fp32: break;
  }
  return hd_float_bits(v);
}
// The value a code stands for (unscaled).
MOERL_HD float gemm_code_value(uint32_t code, Format f) {
  switch (f) {
    case Format::bf16: {
      __nv_bfloat16_raw r;
      r.x = static_cast<unsigned short>(code);
      return __bfloat162float(__nv_bfloat16(r));
    }
    case Format::fp16: {
      __half_raw r;
      r.x = static_cast<unsigned short>(code);
      return __half2float(__half(r));
    }
    case Format::fp8_e4m3:
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3)));
    case Format::fp8_e5m2:
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E5M2)));
    case Format::fp32: break;
  }
  return hd_bits_float(code);
}
// The fake-quantised value round(x / scale)·scale: quantize_matrix's output element.
MOERL_HD float gemm_fake_quant(float x, float scale, Format f) {
  if (f == Format::fp32) return x;
  return hd_mul(gemm_code_value(gemm_quant_code(x, scale, f), f), scale);
}

// ---- padded K layout of the low-precision operands -------------------------------------------------------
// K-block kb (columns [kb·kblock, min(K, (kb+1)·kblock))) occupies padded columns [kb·bp, kb·bp + len);
// the rest of the row up to kp is zero. kblock = K (one block) unless a scale is block-wise.
struct GemmKLayout {
  int K = 0, kblock = 1, nkb = 0, bp = 0, kp = 0;
};
MOERL_HD GemmKLayout gemm_k_layout(int K, int kblock, int align) {
  GemmKLayout L;
  L.K = K;
  L.kblock = kblock < 1 || kblock > K ? (K < 1 ? 1 : K) : kblock;
  L.nkb = K > 0 ? (K + L.kblock - 1) / L.kblock : 0;
  L.bp = (L.kblock + align - 1) / align * align;
  L.kp = L.nkb * L.bp;
  return L;
}
MOERL_HD int64_t gemm_padded_col(const GemmKLayout& L, int k) {
  return static_cast<int64_t>(k / L.kblock) * L.bp + k % L.kblock;
}
// Rows padded to a multiple of align (the weight's N: cuBLASLt's m and the output's leading dimension).
MOERL_HD int gemm_round_up(int n, int align) { return (n + align - 1) / align * align; }

// ---- split-K -------------------------------------------------------------------------------------------
// The CPU's chunk c of `split` over K: [bound(c), bound(c+1)).
MOERL_HD int gemm_chunk_bound(int c, int split, int K) {
  return static_cast<int>(static_cast<int64_t>(c) * K / split);
}
// The low-precision path without K-blocks: the CPU's bounds rounded down to `align`, the last one
// at kp (the padded length), so every chunk starts aligned and has a length multiple of align
// (chunks may be empty when K is short).
MOERL_HD int gemm_chunk_bound_aligned(int c, int split, int K, int kp, int align) {
  return c >= split ? kp : gemm_chunk_bound(c, split, K) / align * align;
}
// With K-blocks (block scaling): chunk c owns K-blocks [first(c), first(c+1)).
MOERL_HD int gemm_chunk_first_block(int c, int split, int nkb) {
  return static_cast<int>(static_cast<int64_t>(c) * nkb / split);
}

// rng_derive(seed, Stream::gemm_order, {layer, site, call, m}) without the initializer_list.
MOERL_HD uint64_t gemm_order_state(uint64_t seed, uint32_t layer, uint32_t site, uint64_t call,
                                   int64_t m) {
  uint64_t h = rng_mix64(seed ^ rng_mix64(static_cast<uint64_t>(Stream::gemm_order) * 0xD1B54A32D192ED03ull));
  h = rng_mix64(h ^ rng_mix64(static_cast<uint64_t>(layer) + 0x632BE59BD9B4E019ull));
  h = rng_mix64(h ^ rng_mix64(static_cast<uint64_t>(site) + 0x632BE59BD9B4E019ull));
  h = rng_mix64(h ^ rng_mix64(call + 0x632BE59BD9B4E019ull));
  return rng_mix64(h ^ rng_mix64(static_cast<uint64_t>(m) + 0x632BE59BD9B4E019ull));
}
// The combine order of row m's `split` chunk partials: cpu::gemm_chunk_order, value for value.
MOERL_HD void gemm_chunk_order_hd(int* order, int split, OrderKind kind, uint64_t seed,
                                  uint32_t layer, uint32_t site, uint64_t call, int64_t m) {
  split = split < 1 ? 1 : (split > kGemmMaxSplit ? kGemmMaxSplit : split);
  for (int i = 0; i < split; ++i) order[i] = kind == OrderKind::reversed ? split - 1 - i : i;
  if (kind == OrderKind::split_k) {
    Rng rng(gemm_order_state(seed, layer, site, call, m));
    rng.shuffle(order, split);
  }
}

// ---- epilogue ------------------------------------------------------------------------------------------
// One K-block's (or K-chunk's) unscaled FP32 accumulator times the operands' scales, the smaller
// scale first: then the intermediate overflows only if the result does (an activation scale of a
// huge amax times an accumulator of codes near format_max would overflow on its own).
MOERL_HD float gemm_apply_scales(float acc, float sa, float sw) {
  const float lo = sa < sw ? sa : sw, hi = sa < sw ? sw : sa;
  return hd_mul(hd_mul(acc, lo), hi);
}
// The scale of row i (activation row m or weight row n) for K-block kb; s == nullptr: 1.
MOERL_HD float gemm_scale_at(const float* s, const GemmGroups& g, int i, int kb, int kblock) {
  return s ? s[gemm_group_of(g, i, kb * kblock)] : 1.0f;
}
// part[order[0]·stride] + part[order[1]·stride] + … left to right, no leading zero (cpu/gemm.cpp).
MOERL_HD float gemm_combine_ordered(const float* part, int64_t stride, const int* order, int split) {
  float s = part[order[0] * stride];
  for (int j = 1; j < split; ++j) s = hd_add(s, part[order[j] * stride]);
  return s;
}

}  // namespace moerl::cuda
