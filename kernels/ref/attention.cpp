// ref/attention.cpp — causal self-attention (full sequences and KV-cache decode), scalar reference
// in the canonical fixed order. Forward writes out/att with '='; backward accumulates dq, dk, dv
// with '+='.
//
// One query row against keys 0..L-1 (attention_row below, shared by forward and decode):
//   s_j   = (fma chain of q_d·k_jd over d = 0..Dh-1 from 0) · scale,   scale = 1/sqrt(Dh)
//   m     = max_j s_j
//   e_j   = exp_f32(s_j − m)                   (kernels/expf.h)
//   sum   = e_0 + e_1 + … + e_{L-1}           (sequential from 0.0f)
//   p_j   = e_j / sum                          (saved in att)
//   out_d = fma chain of p_j·v_jd over j = 0..L-1 from 0
// kernels/cpu/attention.cpp repeats this exactly for ReduceCtx{}.
#include <cmath>
#include <vector>

#include "kernels/expf.h"
#include "kernels/ref/ops.h"

namespace moerl::ref {

namespace {
// out[Dh]; p[L] receives the probabilities; q[Dh]; v rows at stride ld; key j's component d at
// k[j·kj + d·kd] (rows: kj = ld, kd = 1; the decode cache's transposed keys: kj = 1, kd = Tmax).
void attention_row(float* out, float* p, const float* q, const float* k, const float* v,
                   int64_t ld, int L, int Dh, int64_t kj, int64_t kd) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  for (int j = 0; j < L; ++j) {
    float dot = 0.0f;
    for (int d = 0; d < Dh; ++d) dot = std::fma(q[d], k[j * kj + d * kd], dot);
    p[j] = dot * scale;
  }
  float m = p[0];
  for (int j = 1; j < L; ++j) m = p[j] > m ? p[j] : m;
  float sum = 0.0f;
  for (int j = 0; j < L; ++j) {
    p[j] = exp_f32(p[j] - m);
    sum += p[j];
  }
  for (int j = 0; j < L; ++j) p[j] = p[j] / sum;
  for (int d = 0; d < Dh; ++d) {
    float acc = 0.0f;
    for (int j = 0; j < L; ++j) acc = std::fma(p[j], v[j * ld + d], acc);
    out[d] = acc;
  }
}
}  // namespace

// out[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int B, int T, int H, int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      for (int t = 0; t < T; ++t) {
        float* p = att + ((static_cast<int64_t>(b) * H + h) * T + t) * T;
        attention_row(out + base + t * ld, p, q + base + t * ld, k + base, v + base, ld, t + 1, Dh, ld, 1);
        for (int j = t + 1; j < T; ++j) p[j] = 0.0f;
      }
    }
  }
}

// dq,dk,dv[B*T, H*Dh] +=, dout[B*T, H*Dh], att[B,H,T,T], q,k,v[B*T, H*Dh]
// Per (b, h), query rows i = 0..T-1 in order, keys j = 0..i in order:
//   dp_j    = fma chain of dout_id·v_jd over d          (d p_ij, from out = Σ_j p_ij v_j)
//   dv_jd   = fma(p_ij, dout_id, dv_jd)                  (from out = Σ_j p_ij v_j)
//   ds      = fma chain of p_ij·dp_j over j              (softmax backward's Σ p·dp)
//   g_j     = p_ij · (dp_j − ds) · scale                 (d s_ij, scale folded in)
//   dq_id   = fma(g_j, k_jd, dq_id) ;  dk_jd = fma(g_j, q_id, dk_jd)   (from s_ij = scale·q_i·k_j)
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                        const float* q, const float* k, const float* v, int B, int T, int H,
                        int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  std::vector<float> dp(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int64_t base = static_cast<int64_t>(b) * T * ld + static_cast<int64_t>(h) * Dh;
      for (int i = 0; i < T; ++i) {
        const float* p = att + ((static_cast<int64_t>(b) * H + h) * T + i) * T;
        const float* go = dout + base + i * ld;
        for (int j = 0; j <= i; ++j) {
          float acc = 0.0f;
          for (int d = 0; d < Dh; ++d) acc = std::fma(go[d], v[base + j * ld + d], acc);
          dp[j] = acc;
          for (int d = 0; d < Dh; ++d)
            dv[base + j * ld + d] = std::fma(p[j], go[d], dv[base + j * ld + d]);
        }
        float ds = 0.0f;
        for (int j = 0; j <= i; ++j) ds = std::fma(p[j], dp[j], ds);
        for (int j = 0; j <= i; ++j) {
          float g = p[j] * (dp[j] - ds) * scale;
          for (int d = 0; d < Dh; ++d) {
            dq[base + i * ld + d] = std::fma(g, k[base + j * ld + d], dq[base + i * ld + d]);
            dk[base + j * ld + d] = std::fma(g, q[base + i * ld + d], dk[base + j * ld + d]);
          }
        }
      }
    }
  }
}

// out,q[B, H*Dh], kcache[B, H*Dh, Tmax], vcache[B, Tmax, H*Dh] (kernels/kv_cache.h), len[B]
void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                      const int32_t* len, int B, int Tmax, int H, int Dh) {
  const int64_t ld = static_cast<int64_t>(H) * Dh;
  std::vector<float> p(Tmax);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int64_t cache = static_cast<int64_t>(b) * Tmax * ld + static_cast<int64_t>(h) * Dh;
      const int64_t kcol = (static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh) * Tmax;
      const int64_t row = static_cast<int64_t>(b) * ld + static_cast<int64_t>(h) * Dh;
      attention_row(out + row, p.data(), q + row, kcache + kcol, vcache + cache, ld, len[b], Dh, 1, Tmax);
    }
  }
}

}  // namespace moerl::ref
