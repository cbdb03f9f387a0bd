// cpu/attention.cpp — causal self-attention (full sequences and KV-cache decode), TBB over
// (sequence, head) pairs. Forward writes out/att with '='; backward accumulates dq, dk, dv with '+='.
//
// One query row against keys 0..L-1 — attention_scores + attention_row below, the ONE routine that
// both attention_forward and attention_decode run, so a query at position t over keys 0..t gives
// the same bits in both for the same ctx:
//   1. s_j = (fma chain of q_d·k_jd over d = 0..Dh-1 from 0) · scale        (always this order)
//      vectorised over keys j from a transposed key block kT[d][j]: each lane is one s_j's chain
//      (the forward transposes its sequence's keys; decode's cache holds them transposed).
//   2. m = max_j s_j (sequential);  e_j = exp_f32(s_j − m)  (kernels/expf.h, 16 lanes at a time)
//   3. sum = Σ_j e_j in the row's order (row_order.h): S = 1 forward → e_0 + … + e_{L-1} from 0.0f
//   4. p_j = e_j / sum
//   5. out_d = Σ_j p_j·v_jd as fma chains in the same order (same chunks, same combination
//      permutation as step 3), vectorised over d.
// With ReduceCtx{} (S = 1, forward) this is exactly ref/attention.cpp's sequence.
// The row stream for S > 1 is rng_derive(key.seed, Stream::attn_order,
// {key.layer, key.site, key.call, b, t, h}) — i.e. rng_derive(key, attn_order) extended by the
// entity (sequence b within the call, query position t, head h). The number of chunks is
// RowOrder::split_for(ctx, rows, t+1) with rows = B·T (forward) or B (decode).
//
// The backward repeats ref/attention.cpp's operation sequence (vectorised over keys for dp, over d
// elsewhere) and equals it bit for bit; every (b, h) task owns disjoint slices of dq, dk, dv.
#include "kernels/simd_config.h"

#ifndef MOERL_KERNELS_CPU_ATTENTION_CPP_ONCE_
#define MOERL_KERNELS_CPU_ATTENTION_CPP_ONCE_

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/row_order.h"
#include "kernels/expf.h"

#endif  // MOERL_KERNELS_CPU_ATTENTION_CPP_ONCE_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/expf_avx512-inl.h"
#include "kernels/cpu/expf-inl.h"

HWY_BEFORE_NAMESPACE();
namespace moerl::cpu::HWY_NAMESPACE {


namespace {

// Keys per register block of the dot products; transposed blocks are padded to a multiple of it.
constexpr int kKeyBlock = 64;
int padded_keys(int L) { return (L + kKeyBlock - 1) / kKeyBlock * kKeyBlock; }

#if MOERL_SIMD_AVX512
// r[0..16) ← the 16×16 block's transpose (r[i] lane j = old r[j] lane i).
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // each 4×4 sub-block is transposed within its 128-bit lanes; two rounds of 128-bit lane
  // shuffles move the sub-blocks to their transposed places.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}
#endif

// kT[Dh, ldk] = rows 0..L-1 of a [*, ld] matrix, columns 0..Dh-1, transposed; columns L..ldk-1
// zero (the dot kernels read, and discard, whole register blocks). Rows are read whole, one after
// the other (the KV cache is far larger than L2: streaming reads let the prefetcher run ahead),
// and transposed 16 × 16 in registers.
void transpose_block(float* kT, int ldk, const float* k, int64_t ld, int L, int Dh) {
  int d0 = 0;
#if MOERL_SIMD_AVX512
  for (; d0 + 16 <= Dh; d0 += 16)
    for (int j0 = 0; j0 < L; j0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < L ? _mm512_loadu_ps(k + (j0 + i) * ld + d0) : _mm512_setzero_ps();
      transpose16(r);
      for (int i = 0; i < 16; ++i) _mm512_storeu_ps(kT + static_cast<int64_t>(d0 + i) * ldk + j0, r[i]);
    }
  const int filled = (L + 15) / 16 * 16;  // columns the blocks above wrote (zeros past L)
  for (int d = 0; d < d0; ++d)
    for (int j = filled; j < ldk; ++j) kT[static_cast<int64_t>(d) * ldk + j] = 0.0f;
#endif
  for (int j = 0; j < L; ++j) {
    const float* kj = k + j * ld;
    for (int d = d0; d < Dh; ++d) kT[static_cast<int64_t>(d) * ldk + j] = kj[d];
  }
  for (int d = d0; d < Dh; ++d)
    for (int j = L; j < ldk; ++j) kT[static_cast<int64_t>(d) * ldk + j] = 0.0f;
}

// s[j0..j0+W) = fma chains over d of x_d·kT[d][j], held in registers across d.
template <int W>
void dots_block(float* s, const float* x, const float* kT, int ldk, int j0, int n, int Dh) {
  float acc[W] = {};
  for (int d = 0; d < Dh; ++d) {
    const float xd = x[d];
    const float* kr = kT + static_cast<int64_t>(d) * ldk + j0;
    for (int i = 0; i < W; ++i) acc[i] = std::fma(xd, kr[i], acc[i]);
  }
  for (int i = 0; i < n; ++i) s[j0 + i] = acc[i];
}

// s[L]: s_j = fma chain of x_d·kT[d][j] over d = 0..Dh-1 from 0 — one lane per key, the
// reference's order per key. kT[Dh, ldk] with ldk ≥ padded_keys(L).
void dots_transposed(float* s, const float* x, const float* kT, int ldk, int L, int Dh) {
  int j0 = 0;
  for (; L - j0 > 32; j0 += 64) dots_block<64>(s, x, kT, ldk, j0, std::min(64, L - j0), Dh);
  if (L - j0 > 16) {
    dots_block<32>(s, x, kT, ldk, j0, L - j0, Dh);
  } else if (L - j0 > 0) {
    dots_block<16>(s, x, kT, ldk, j0, L - j0, Dh);
  }
}

// s[L] = scale · q·k_j (the dot first, then one multiplication, as in the reference).
void attention_scores(float* s, const float* q, const float* kT, int ldk, int L, int Dh,
                      float scale) {
  dots_transposed(s, q, kT, ldk, L, Dh);
  for (int j = 0; j < L; ++j) s[j] = s[j] * scale;
}

// out[0..W) = Σ_{j in [lo,hi)} p_j·v_j[0..W) as fma chains from 0 (or from out's values when
// `accumulate`), accumulators in registers.
template <int W>
void pv_block(float* out, const float* p, const float* v, int64_t ld, int lo, int hi, bool rev,
              bool accumulate) {
  float acc[W] = {};
  if (accumulate)
    for (int i = 0; i < W; ++i) acc[i] = out[i];
  if (!rev) {
    for (int j = lo; j < hi; ++j) {
      const float pj = p[j];
      const float* vr = v + j * ld;
      for (int i = 0; i < W; ++i) acc[i] = std::fma(pj, vr[i], acc[i]);
    }
  } else {
    for (int j = hi - 1; j >= lo; --j) {
      const float pj = p[j];
      const float* vr = v + j * ld;
      for (int i = 0; i < W; ++i) acc[i] = std::fma(pj, vr[i], acc[i]);
    }
  }
  for (int i = 0; i < W; ++i) out[i] = acc[i];
}

// acc[Dh] = Σ_{j in [lo,hi)} p_j·v_j as fma chains (forward, or from hi-1 down if rev) starting
// from 0, or from acc's values when `accumulate`; Dh is cut into register blocks of 64, 32, …, 1.
void pv_chunk(float* acc, const float* p, const float* v, int64_t ld, int lo, int hi, int Dh,
              bool rev, bool accumulate = false) {
  int d = 0;
  for (; d + 64 <= Dh; d += 64) pv_block<64>(acc + d, p, v + d, ld, lo, hi, rev, accumulate);
  if (d + 32 <= Dh) pv_block<32>(acc + d, p, v + d, ld, lo, hi, rev, accumulate), d += 32;
  if (d + 16 <= Dh) pv_block<16>(acc + d, p, v + d, ld, lo, hi, rev, accumulate), d += 16;
  if (d + 8 <= Dh) pv_block<8>(acc + d, p, v + d, ld, lo, hi, rev, accumulate), d += 8;
  if (d + 4 <= Dh) pv_block<4>(acc + d, p, v + d, ld, lo, hi, rev, accumulate), d += 4;
  if (d + 2 <= Dh) pv_block<2>(acc + d, p, v + d, ld, lo, hi, rev, accumulate), d += 2;
  if (d + 1 <= Dh) pv_block<1>(acc + d, p, v + d, ld, lo, hi, rev, accumulate);
}

// p[j] = e^(p[j] − m), j < L: exp_f32 (kernels/expf.h), 16 lanes at a time.
void exp_shifted(float* p, int L, float m) {
  int j = 0;
#if MOERL_SIMD_AVX512
  const __m512 mv = _mm512_set1_ps(m);
  for (; j + 16 <= L; j += 16)
    _mm512_storeu_ps(p + j, exp_f32_v16(_mm512_sub_ps(_mm512_loadu_ps(p + j), mv)));
  for (; j < L; ++j) p[j] = exp_f32(p[j] - m);
#else
  for (; j < L; ++j) p[j] = p[j] - m;
  exp_f32_inplace(p, L);
#endif
}

// p[L]: scores in, probabilities out (steps 2–4 above).
void attention_probs(float* p, int L, const RowOrder& order) {
  float m = p[0];
  for (int j = 1; j < L; ++j) m = p[j] > m ? p[j] : m;
  const int S = order.split();
  const bool rev = order.reversed();
  exp_shifted(p, L, m);
  float sum = 0.0f;
  if (S == 1) {
    if (!rev) {
      for (int j = 0; j < L; ++j) sum += p[j];
    } else {
      for (int j = L - 1; j >= 0; --j) sum += p[j];
    }
  } else {
    for (int i = 0; i < S; ++i) {
      const int c = order.combine(i);
      float cs = 0.0f;
      if (!rev) {
        for (int j = order.begin(c); j < order.end(c); ++j) cs += p[j];
      } else {
        for (int j = order.end(c) - 1; j >= order.begin(c); --j) cs += p[j];
      }
      sum = i == 0 ? cs : sum + cs;
    }
  }
  for (int j = 0; j < L; ++j) p[j] = p[j] / sum;
}

// out[Dh]; p[L]: scores in, probabilities out; v rows at stride ld; part[split·Dh] scratch.
void attention_row(float* out, float* p, const float* v, int64_t ld, int L, int Dh,
                   const RowOrder& order, float* part) {
  attention_probs(p, L, order);
  const int S = order.split();
  const bool rev = order.reversed();
  if (S == 1) {
    pv_chunk(out, p, v, ld, 0, L, Dh, rev);
    return;
  }
  for (int c = 0; c < S; ++c) pv_chunk(part + c * Dh, p, v, ld, order.begin(c), order.end(c), Dh, rev);
  const float* first = part + order.combine(0) * Dh;
  for (int d = 0; d < Dh; ++d) out[d] = first[d];
  for (int i = 1; i < S; ++i) {
    const float* pc = part + order.combine(i) * Dh;
    for (int d = 0; d < Dh; ++d) out[d] += pc[d];
  }
}

// The order of query row (b, t, h) over L keys.
void row_order_set(RowOrder* order, const ReduceCtx& ctx, int rows, int L, int b, int t, int h) {
  const int S = RowOrder::split_for(ctx, rows, L);
  uint64_t state = 0;
  if (S > 1)
    state = rng_derive(ctx.key.seed, static_cast<uint64_t>(Stream::attn_order),
                       {ctx.key.layer, ctx.key.site, ctx.key.call, static_cast<uint64_t>(b),
                        static_cast<uint64_t>(t), static_cast<uint64_t>(h)});
  order->set(L, S, ctx.order.kind, state);
}

}  // namespace

// out[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh, const ReduceCtx& ctx) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  const int rows = B * T;
  tbb::parallel_for(tbb::blocked_range<int>(0, B * H), [&](const tbb::blocked_range<int>& br) {
    const int ldk = padded_keys(T);
    std::vector<float> kT(static_cast<size_t>(ldk) * Dh), part;
    RowOrder order;
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      transpose_block(kT.data(), ldk, k + base, ld, T, Dh);
      for (int t = 0; t < T; ++t) {
        const int L = t + 1;
        float* p = att + (static_cast<int64_t>(bh) * T + t) * T;
        row_order_set(&order, ctx, rows, L, b, t, h);
        part.resize(static_cast<size_t>(order.split()) * Dh);
        attention_scores(p, q + base + t * ld, kT.data(), ldk, L, Dh, scale);
        attention_row(out + base + t * ld, p, v + base, ld, L, Dh, order, part.data());
        for (int j = L; j < T; ++j) p[j] = 0.0f;
      }
    }
  });
}

namespace {

// out[H·Dh] = Σ_j p_h[j]·v_j for every head at once, p[H][ldp]: each (h, d) one fma chain over
// j = 0..L-1 from 0 — pv_chunk's chain for S = 1 — while a whole cache row (all heads) is read per
// j, so sequence b's cache block streams through once instead of once per head.
void pv_all_heads(float* out, const float* p, int ldp, const float* v, int64_t ld, int L, int H,
                  int Dh) {
#if MOERL_SIMD_AVX512
  const int HD = H * Dh;
  if (Dh % 16 == 0 && HD <= 256) {  // up to 16 registers of accumulators, 16 lanes per head block
    const int nv = HD / 16, per_head = Dh / 16;
    __m512 acc[16];
    for (int i = 0; i < nv; ++i) acc[i] = _mm512_setzero_ps();
    for (int j = 0; j < L; ++j) {
      const float* vr = v + j * ld;
      for (int i = 0; i < nv; ++i)
        acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[(i / per_head) * ldp + j]), _mm512_loadu_ps(vr + 16 * i), acc[i]);
    }
    for (int i = 0; i < nv; ++i) _mm512_storeu_ps(out + 16 * i, acc[i]);
    return;
  }
#endif
  for (int h = 0; h < H; ++h) pv_chunk(out + h * Dh, p + h * ldp, v + h * Dh, ld, 0, L, Dh, false);
}

}  // namespace

// out,q[B, H*Dh], kcache[B, H*Dh, Tmax] (keys transposed), vcache[B, Tmax, H*Dh], len[B]
// (kernels/kv_cache.h). One task per sequence: its keys already lie in columns, so each head's
// scores read them in place (attention_scores), then each head's row runs as in the forward
// (attention_row); with one chunk in forward order for every head, P·V reads each cache row once
// for all heads. A cache shorter than the 64-key blocks (Tmax < padded_keys(L), never generation's:
// kv_cache_len) is copied into a padded block first.
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh, const ReduceCtx& ctx) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  tbb::parallel_for(tbb::blocked_range<int>(0, B), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> kT, p, part;
    RowOrder order;
    for (int b = br.begin(); b < br.end(); ++b) {
      const int L = len[b];
      const int64_t cache = static_cast<int64_t>(b) * Tmax * ld;
      if (b + 1 < br.end()) {  // the next sequence's values: fetched while this one computes
        const int64_t bytes = static_cast<int64_t>(len[b + 1]) * ld * 4;
        const char* vn = reinterpret_cast<const char*>(vcache + cache + Tmax * ld);
        for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(vn + o, 0, 2);
      }
      const int64_t row = static_cast<int64_t>(b) * ld;
      const float* keys = kcache + cache;  // [H·Dh][Tmax] of sequence b
      int ldk = Tmax;
      if (Tmax < padded_keys(L)) {
        ldk = padded_keys(L);
        kT.assign(static_cast<size_t>(ld) * ldk, 0.0f);
        for (int64_t d = 0; d < ld; ++d)
          std::copy_n(keys + d * Tmax, L, kT.data() + d * ldk);
        keys = kT.data();
      }
      p.resize(static_cast<size_t>(H) * ldk);  // [H][ldk]
      bool plain = ctx.order.kind != OrderKind::reversed;  // every head: S = 1, forward
      for (int h = 0; h < H; ++h) {
        row_order_set(&order, ctx, B, L, b, L - 1, h);
        float* ph = p.data() + static_cast<size_t>(h) * ldk;
        attention_scores(ph, q + row + h * Dh, keys + static_cast<size_t>(h) * Dh * ldk, ldk, L, Dh, scale);
        if (order.split() == 1 && !order.reversed()) {
          attention_probs(ph, L, order);
          continue;
        }
        plain = false;
        part.resize(static_cast<size_t>(order.split()) * Dh);
        attention_row(out + row + h * Dh, ph, vcache + cache + h * Dh, ld, L, Dh, order, part.data());
      }
      if (plain) {
        pv_all_heads(out + row, p.data(), ldk, vcache + cache, ld, L, H, Dh);
      } else {  // heads that took the single-chunk shortcut still need their P·V
        for (int h = 0; h < H; ++h) {
          row_order_set(&order, ctx, B, L, b, L - 1, h);
          if (order.split() == 1 && !order.reversed())
            pv_chunk(out + row + h * Dh, p.data() + static_cast<size_t>(h) * ldk, vcache + cache + h * Dh, ld, 0, L, Dh, false);
        }
      }
    }
  });
}

// dq,dk,dv[B*T, H*Dh] +=, dout[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, int B, int T, int H,
                        int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  tbb::parallel_for(tbb::blocked_range<int>(0, B * H), [&](const tbb::blocked_range<int>& br) {
    const int ldv = padded_keys(T);
    std::vector<float> vT(static_cast<size_t>(ldv) * Dh), dp(T), g(static_cast<size_t>(T) * T), col(T);
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      const float* att_bh = att + static_cast<int64_t>(bh) * T * T;
      transpose_block(vT.data(), ldv, v + base, ld, T, Dh);
      for (int i = 0; i < T; ++i) {
        const int L = i + 1;
        const float* p = att_bh + static_cast<int64_t>(i) * T;
        const float* go = dout + base + i * ld;
        // dp_j = Σ_d dout_id·v_jd  (from out_i = Σ_j p_ij v_j)
        dots_transposed(dp.data(), go, vT.data(), ldv, L, Dh);
        // softmax backward: g_ij = p_ij·(dp_j − Σ p·dp)·scale  (from p_i = softmax(s_i))
        float ds = 0.0f;
        for (int j = 0; j < L; ++j) ds = std::fma(p[j], dp[j], ds);
        float* gi = g.data() + static_cast<size_t>(i) * T;
        for (int j = 0; j < L; ++j) gi[j] = p[j] * (dp[j] - ds) * scale;
        // dq_i += Σ_j g_ij k_j (j in order)  (from s_ij = scale·q_i·k_j)
        pv_chunk(dq + base + i * ld, gi, k + base, ld, 0, L, Dh, false, true);
      }
      // dv_j += Σ_{i ≥ j} p_ij·dout_i and dk_j += Σ_{i ≥ j} g_ij·q_i, each an fma chain over i in
      // order from dv_j's (dk_j's) value — the chain of a row-by-row update, with the
      // accumulators in registers instead of stored and reloaded for every i
      for (int j = 0; j < T; ++j) {
        for (int i = j; i < T; ++i) col[i] = att_bh[static_cast<int64_t>(i) * T + j];
        pv_chunk(dv + base + j * ld, col.data(), dout + base, ld, j, T, Dh, false, true);
        for (int i = j; i < T; ++i) col[i] = g[static_cast<size_t>(i) * T + j];
        pv_chunk(dk + base + j * ld, col.data(), q + base, ld, j, T, Dh, false, true);
      }
    }
  });
}

}  // namespace moerl::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moerl::cpu {

HWY_EXPORT(attention_forward);
HWY_EXPORT(attention_backward);
HWY_EXPORT(attention_decode);

void attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B, int T, int H, int Dh, const ReduceCtx& ctx) {
  HWY_DYNAMIC_DISPATCH(attention_forward)(out, att, q, k, v, B, T, H, Dh, ctx);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att, const float* q, const float* k, const float* v, int B, int T, int H, int Dh) {
  HWY_DYNAMIC_DISPATCH(attention_backward)(dq, dk, dv, dout, att, q, k, v, B, T, H, Dh);
}

void attention_decode(float* out, const float* q, const float* kcache, const float* vcache, const int32_t* len, int B, int Tmax, int H, int Dh, const ReduceCtx& ctx) {
  HWY_DYNAMIC_DISPATCH(attention_decode)(out, q, kcache, vcache, len, B, Tmax, H, Dh, ctx);
}

}  // namespace moerl::cpu
#endif  // HWY_ONCE
