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

// kT[Dh, L] (leading dimension L) = rows 0..L-1 of a [*, ld] matrix, columns 0..Dh-1.
void transpose_block(float* kT, const float* k, int64_t ld, int L, int Dh) {
  for (int j = 0; j < L; ++j)
    for (int d = 0; d < Dh; ++d) kT[static_cast<int64_t>(d) * L + j] = k[j * ld + d];
}

// s[L] = scale · q·k_j, kT[Dh, ldk] the transposed keys.
void attention_scores(float* s, const float* q, const float* kT, int ldk, int L, int Dh,
                      float scale) {
  for (int j = 0; j < L; ++j) s[j] = 0.0f;
  for (int d = 0; d < Dh; ++d) {
    const float qd = q[d];
    const float* kr = kT + static_cast<int64_t>(d) * ldk;
    for (int j = 0; j < L; ++j) s[j] = std::fma(qd, kr[j], s[j]);
  }
  for (int j = 0; j < L; ++j) s[j] = s[j] * scale;
}

// acc[Dh] = Σ_{j in [lo,hi)} p_j·v_j as fma chains from 0 (forward, or from hi-1 down if rev).
void pv_chunk(float* acc, const float* p, const float* v, int64_t ld, int lo, int hi, int Dh,
              bool rev) {
  for (int d = 0; d < Dh; ++d) acc[d] = 0.0f;
  for (int i = lo; i < hi; ++i) {
    const int j = rev ? lo + hi - 1 - i : i;
    const float pj = p[j];
    const float* vr = v + j * ld;
    for (int d = 0; d < Dh; ++d) acc[d] = std::fma(pj, vr[d], acc[d]);
  }
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
  order->set(L, S, ctx.order.kind == OrderKind::reversed, state);
}

}  // namespace

// out[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh, const ReduceCtx& ctx) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  const int rows = B * T;
  tbb::parallel_for(tbb::blocked_range<int>(0, B * H), [&](const tbb::blocked_range<int>& br) {
    std::vector<float> kT(static_cast<size_t>(T) * Dh), part;
    RowOrder order;
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      transpose_block(kT.data(), k + base, ld, T, Dh);
      for (int t = 0; t < T; ++t) {
        const int L = t + 1;
        float* p = att + (static_cast<int64_t>(bh) * T + t) * T;
        row_order_set(&order, ctx, rows, L, b, t, h);
        part.resize(static_cast<size_t>(order.split()) * Dh);
        attention_scores(p, q + base + t * ld, kT.data(), T, L, Dh, scale);
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
      kT.resize(static_cast<size_t>(L) * Dh);
      p.resize(L);
      transpose_block(kT.data(), kcache + cache, ld, L, Dh);
      row_order_set(&order, ctx, B, L, b, L - 1, h);
      part.resize(static_cast<size_t>(order.split()) * Dh);
      attention_scores(p.data(), q + row, kT.data(), L, L, Dh, scale);
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
    std::vector<float> vT(static_cast<size_t>(T) * Dh), dp(T), g(T), dqi(Dh);
    for (int bh = br.begin(); bh < br.end(); ++bh) {
      const int b = bh / H, h = bh % H;
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      transpose_block(vT.data(), v + base, ld, T, Dh);
      for (int i = 0; i < T; ++i) {
        const int L = i + 1;
        const float* p = att + (static_cast<int64_t>(bh) * T + i) * T;
        const float* go = dout + base + i * ld;
        // dp_j = Σ_d dout_id·v_jd  (from out_i = Σ_j p_ij v_j), lanes over j
        for (int j = 0; j < L; ++j) dp[j] = 0.0f;
        for (int d = 0; d < Dh; ++d) {
          const float gd = go[d];
          const float* vr = vT.data() + static_cast<int64_t>(d) * T;
          for (int j = 0; j < L; ++j) dp[j] = std::fma(gd, vr[j], dp[j]);
        }
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
        // dq_i += Σ_j g_j k_j ; dk_j += g_j q_i  (from s_ij = scale·q_i·k_j)
        float* dq_row = dq + base + i * ld;
        const float* q_row = q + base + i * ld;
        for (int d = 0; d < Dh; ++d) dqi[d] = dq_row[d];
        for (int j = 0; j < L; ++j) {
          const float gj = g[j];
          const float* kj = k + base + j * ld;
          float* dkj = dk + base + j * ld;
          for (int d = 0; d < Dh; ++d) {
            dqi[d] = std::fma(gj, kj[d], dqi[d]);
            dkj[d] = std::fma(gj, q_row[d], dkj[d]);
          }
        }
        for (int d = 0; d < Dh; ++d) dq_row[d] = dqi[d];
      }
    }
  });
}

}  // namespace moerl::cpu
