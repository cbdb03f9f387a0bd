// cpu/attention.cpp — causal self-attention (full sequences and KV-cache decode), TBB over
// (sequence, head) pairs. Forward writes out/att with '='; backward accumulates dq, dk, dv with '+='.
//
// One query row against keys 0..L-1 — attention_scores + attention_row below, the ONE routine that
// both attention_forward and attention_decode run, so a query at position t over keys 0..t gives
// the same bits in both for the same ctx:
//   1. s_j = (fma chain of q_d·k_jd over d = 0..Dh-1 from 0) · scale        (always this order)
//      vectorised over keys j from a transposed key block kT[d][j]: each lane is one s_j's chain.
//   2. m = max_j s_j (sequential);  e_j = exp(s_j − m)  (std::exp, scalar)
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
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/row_order.h"

namespace moerl::cpu {

namespace {

// Keys per register block of the dot products; transposed blocks are padded to a multiple of it.
constexpr int kKeyBlock = 64;
int padded_keys(int L) { return (L + kKeyBlock - 1) / kKeyBlock * kKeyBlock; }

// kT[Dh, ldk] = rows 0..L-1 of a [*, ld] matrix, columns 0..Dh-1, transposed; columns L..ldk-1
// zero (the dot kernels read, and discard, whole register blocks).
void transpose_block(float* kT, int ldk, const float* k, int64_t ld, int L, int Dh) {
  for (int d = 0; d < Dh; ++d) {
    float* row = kT + static_cast<int64_t>(d) * ldk;
    for (int j = 0; j < L; ++j) row[j] = k[j * ld + d];
    for (int j = L; j < ldk; ++j) row[j] = 0.0f;
  }
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

// out[Dh]; p[L]: scores in, probabilities out; v rows at stride ld; part[split·Dh] scratch.
void attention_row(float* out, float* p, const float* v, int64_t ld, int L, int Dh,
                   const RowOrder& order, float* part) {
  float m = p[0];
  for (int j = 1; j < L; ++j) m = p[j] > m ? p[j] : m;
  const int S = order.split();
  const bool rev = order.reversed();
  float sum = 0.0f;
  if (S == 1) {
    if (!rev) {
      for (int j = 0; j < L; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
      }
    } else {
      for (int j = 0; j < L; ++j) p[j] = std::exp(p[j] - m);
      for (int j = L - 1; j >= 0; --j) sum += p[j];
    }
  } else {
    for (int j = 0; j < L; ++j) p[j] = std::exp(p[j] - m);
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

// out,q[B, H*Dh], kcache,vcache[B, Tmax, H*Dh], len[B]
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh, const ReduceCtx& ctx) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  tbb::parallel_for(tbb::blocked_range<int>(0, B * H), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> kT, p, part;
    RowOrder order;
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int L = len[b];
      const int64_t cache = static_cast<int64_t>(b) * Tmax * ld + static_cast<int64_t>(h) * Dh;
      const int64_t row = static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh;
      const int ldk = padded_keys(L);
      kT.resize(static_cast<size_t>(ldk) * Dh);
      p.resize(L);
      transpose_block(kT.data(), ldk, kcache + cache, ld, L, Dh);
      row_order_set(&order, ctx, B, L, b, L - 1, h);
      part.resize(static_cast<size_t>(order.split()) * Dh);
      attention_scores(p.data(), q + row, kT.data(), ldk, L, Dh, scale);
      attention_row(out + row, p.data(), vcache + cache, ld, L, Dh, order, part.data());
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
    std::vector<float> vT(static_cast<size_t>(ldv) * Dh), dp(T), g(T);
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      transpose_block(vT.data(), ldv, v + base, ld, T, Dh);
      for (int i = 0; i < T; ++i) {
        const int L = i + 1;
        const float* p = att + (static_cast<int64_t>(bh) * T + i) * T;
        const float* go = dout + base + i * ld;
        // dp_j = Σ_d dout_id·v_jd  (from out_i = Σ_j p_ij v_j)
        dots_transposed(dp.data(), go, vT.data(), ldv, L, Dh);
        // dv_j += p_ij·dout_i
        for (int j = 0; j < L; ++j) {
          float* dvj = dv + base + j * ld;
          const float pj = p[j];
          for (int d = 0; d < Dh; ++d) dvj[d] = std::fma(pj, go[d], dvj[d]);
        }
        // softmax backward: g_j = p_j·(dp_j − Σ p·dp)·scale  (from p_i = softmax(s_i))
        float ds = 0.0f;
        for (int j = 0; j < L; ++j) ds = std::fma(p[j], dp[j], ds);
        for (int j = 0; j < L; ++j) g[j] = p[j] * (dp[j] - ds) * scale;
        // dq_i += Σ_j g_j k_j (j in order) ; dk_j += g_j q_i  (from s_ij = scale·q_i·k_j)
        pv_chunk(dq + base + i * ld, g.data(), k + base, ld, 0, L, Dh, false, true);
        const float* q_row = q + base + i * ld;
        for (int j = 0; j < L; ++j) {
          const float gj = g[j];
          float* dkj = dk + base + j * ld;
          for (int d = 0; d < Dh; ++d) dkj[d] = std::fma(gj, q_row[d], dkj[d]);
        }
      }
    }
  });
}

}  // namespace moerl::cpu
