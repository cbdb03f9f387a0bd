// test_ops_attention.cpp — causal attention: cpu vs ref (forward, decode, backward), finite
// differences on the reference backward, reduction orders, noise keys, batch variance, and the
// decode ≡ full-forward contract.
//
// Exactness: cpu attention_forward / attention_decode with ReduceCtx{} and cpu attention_backward
// repeat the reference's operation sequence (documented in kernels/cpu/attention.cpp), so they are
// compared bit for bit. Other orders are compared with a tolerance derived below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/ref/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::bit_diffs;
using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

struct Shape {
  int B, T, H, Dh;
};

struct Inputs {
  Shape s;
  std::vector<float> q, k, v;
  explicit Inputs(Shape sh, uint64_t tag = 0) : s(sh) {
    const size_t n = static_cast<size_t>(sh.B) * sh.T * sh.H * sh.Dh;
    // Scale 2 makes the softmax rows far from uniform, so the max-subtraction and the exps matter.
    q = normals(n, 1 + 10 * tag, sh.T, sh.Dh, 2.0f);
    k = normals(n, 2 + 10 * tag, sh.T, sh.Dh, 1.0f);
    v = normals(n, 3 + 10 * tag, sh.T, sh.Dh, 1.0f);
  }
  size_t n() const { return q.size(); }
  size_t n_att() const { return static_cast<size_t>(s.B) * s.H * s.T * s.T; }
};

void cpu_forward(std::vector<float>* out, std::vector<float>* att, const Inputs& in,
                 const ReduceCtx& ctx) {
  out->assign(in.n(), -1.0f);
  att->assign(in.n_att(), -1.0f);
  cpu::attention_forward(out->data(), att->data(), in.q.data(), in.k.data(), in.v.data(), in.s.B,
                         in.s.T, in.s.H, in.s.Dh, ctx);
}

void ref_forward(std::vector<float>* out, std::vector<float>* att, const Inputs& in) {
  out->assign(in.n(), -1.0f);
  att->assign(in.n_att(), -1.0f);
  ref::attention_forward(out->data(), att->data(), in.q.data(), in.k.data(), in.v.data(), in.s.B,
                         in.s.T, in.s.H, in.s.Dh);
}

ReduceCtx make_ctx(OrderKind kind, int split, uint64_t seed = 7, bool batch_invariant = true) {
  ReduceCtx ctx;
  ctx.order.kind = kind;
  ctx.order.split = split;
  ctx.batch_invariant = batch_invariant;
  ctx.key.seed = seed;
  ctx.key.layer = 2;
  ctx.key.site = 3;
  ctx.key.call = 11;
  return ctx;
}

const Shape kShapes[] = {{1, 1, 1, 2}, {2, 2, 3, 6},  {1, 7, 3, 32}, {2, 33, 1, 6},
                         {1, 33, 3, 2}, {2, 7, 1, 32}, {3, 2, 3, 32}, {2, 33, 3, 32}};

TEST(OpsAttention, ForwardCpuEqualsRefBitwise) {
  for (const Shape& s : kShapes) {
    Inputs in(s);
    std::vector<float> out_r, att_r, out_c, att_c;
    ref_forward(&out_r, &att_r, in);
    cpu_forward(&out_c, &att_c, in, ReduceCtx{});
    const std::string what = label("B%d T%d H%d Dh%d", s.B, s.T, s.H, s.Dh);
    expect_bits(out_r, out_c, label("out %s", what.c_str()));
    expect_bits(att_r, att_c, label("att %s", what.c_str()));
    // Probability rows sum to one (within T roundings) and are causal.
    for (int r = 0; r < s.B * s.H * s.T; ++r) {
      const int t = r % s.T;
      double sum = 0.0;
      for (int j = 0; j < s.T; ++j) {
        sum += att_r[static_cast<size_t>(r) * s.T + j];
        if (j > t) {
          ASSERT_EQ(att_r[static_cast<size_t>(r) * s.T + j], 0.0f);
        }
      }
      ASSERT_NEAR(sum, 1.0, 4.0 * s.T * kEps) << what;
    }
  }
}

// Builds the KV cache of the full k/v: cache rows 0..T-1 of sequence b are k/v rows of b.
void build_cache(std::vector<float>* kc, std::vector<float>* vc, const Inputs& in, int Tmax) {
  const int B = in.s.B, T = in.s.T;
  const size_t ld = static_cast<size_t>(in.s.H) * in.s.Dh;
  kc->assign(static_cast<size_t>(B) * Tmax * ld, 0.0f);
  vc->assign(kc->size(), 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (size_t c = 0; c < ld; ++c) {
        (*kc)[(static_cast<size_t>(b) * Tmax + t) * ld + c] = in.k[(static_cast<size_t>(b) * T + t) * ld + c];
        (*vc)[(static_cast<size_t>(b) * Tmax + t) * ld + c] = in.v[(static_cast<size_t>(b) * T + t) * ld + c];
      }
}

// For every position t: decode the query of row t against cache rows 0..t, compare with row t of
// the full forward — bit for bit, under the same ctx (cpu) and for the reference.
void check_decode_matches_forward(const Shape& s, const ReduceCtx& ctx) {
  Inputs in(s, 5);
  const int Tmax = s.T + 3;  // slack rows in the cache must never be read
  const size_t ld = static_cast<size_t>(s.H) * s.Dh;
  std::vector<float> out_f, att_f, out_rf, att_rf, kc, vc;
  cpu_forward(&out_f, &att_f, in, ctx);
  ref_forward(&out_rf, &att_rf, in);
  build_cache(&kc, &vc, in, Tmax);
  for (int b = 0; b < s.B; ++b)
    for (int t = s.T; t < Tmax; ++t)
      for (size_t c = 0; c < ld; ++c) {  // poison the unused cache rows
        kc[(static_cast<size_t>(b) * Tmax + t) * ld + c] = NAN;
        vc[(static_cast<size_t>(b) * Tmax + t) * ld + c] = NAN;
      }
  const std::vector<float> kT = test_ops::keys_transposed(kc, s.B, Tmax, static_cast<int>(ld));
  for (int t = 0; t < s.T; ++t) {
    std::vector<float> qd(static_cast<size_t>(s.B) * ld), want(qd.size()), want_ref(qd.size());
    std::vector<int32_t> len(s.B, t + 1);
    for (int b = 0; b < s.B; ++b)
      for (size_t c = 0; c < ld; ++c) {
        const size_t row = (static_cast<size_t>(b) * s.T + t) * ld + c;
        qd[b * ld + c] = in.q[row];
        want[b * ld + c] = out_f[row];
        want_ref[b * ld + c] = out_rf[row];
      }
    std::vector<float> got(qd.size(), -1.0f), got_ref(qd.size(), -1.0f);
    cpu::attention_decode(got.data(), qd.data(), kT.data(), vc.data(), len.data(), s.B, Tmax, s.H,
                          s.Dh, ctx);
    ref::attention_decode(got_ref.data(), qd.data(), kT.data(), vc.data(), len.data(), s.B, Tmax,
                          s.H, s.Dh);
    expect_bits(want, got, label("cpu decode vs cpu forward, t=%d order %s", t,
                                 reduce_order_name(ctx.order).c_str()));
    expect_bits(want_ref, got_ref, label("ref decode vs ref forward, t=%d", t));
  }
}

TEST(OpsAttention, DecodeEqualsForwardFixed) {
  for (const Shape& s : {Shape{2, 7, 3, 6}, Shape{1, 33, 1, 32}, Shape{3, 2, 3, 2}})
    check_decode_matches_forward(s, ReduceCtx{});
}

TEST(OpsAttention, DecodeEqualsForwardSplitAndReversed) {
  for (const Shape& s : {Shape{2, 7, 3, 6}, Shape{1, 33, 1, 32}}) {
    check_decode_matches_forward(s, make_ctx(OrderKind::split_k, 3));
    check_decode_matches_forward(s, make_ctx(OrderKind::split_k, 8));
    check_decode_matches_forward(s, make_ctx(OrderKind::reversed, 1));
  }
}

TEST(OpsAttention, DecodeCpuEqualsRefWithRaggedLengths) {
  const Shape s{3, 33, 3, 32};
  Inputs in(s, 6);
  const int Tmax = s.T;
  std::vector<float> kc, vc;
  build_cache(&kc, &vc, in, Tmax);
  const size_t ld = static_cast<size_t>(s.H) * s.Dh;
  std::vector<float> qd = normals(s.B * ld, 40, 0, 0, 2.0f), got_c(qd.size()), got_r(qd.size());
  std::vector<int32_t> len = {1, 17, 33};
  const std::vector<float> kT = test_ops::keys_transposed(kc, s.B, Tmax, static_cast<int>(ld));
  cpu::attention_decode(got_c.data(), qd.data(), kT.data(), vc.data(), len.data(), s.B, Tmax, s.H,
                        s.Dh, ReduceCtx{});
  ref::attention_decode(got_r.data(), qd.data(), kT.data(), vc.data(), len.data(), s.B, Tmax, s.H,
                        s.Dh);
  expect_bits(got_r, got_c, "decode ragged lengths");
}

// Reordered key sums: the denominator Σ e_j (positive terms) is off by at most ~T·eps relative,
// which moves each p_j by ≤ (T+2)·eps relative; P·V reordered adds ≤ T·eps·Σ_j p_j|v_jd|
// ≤ T·eps·max|v|. So |Δout| ≤ 2·T·eps·max|v| (+ one rounding), |Δp| ≤ |p|·(T+2)·eps.
TEST(OpsAttention, ReorderedWithinToleranceOfFixed) {
  const Shape s{2, 33, 3, 32};
  Inputs in(s);
  std::vector<float> out_r, att_r;
  ref_forward(&out_r, &att_r, in);
  float vmax = 0.0f;
  for (float x : in.v) vmax = std::max(vmax, std::fabs(x));
  for (ReduceCtx ctx : {make_ctx(OrderKind::reversed, 1), make_ctx(OrderKind::split_k, 4),
                        make_ctx(OrderKind::split_k, 64)}) {
    std::vector<float> out_c, att_c;
    cpu_forward(&out_c, &att_c, in, ctx);
    const std::string name = reduce_order_name(ctx.order);
    expect_close(out_r, out_c, 2.0 * s.T * kEps * vmax + kEps, kEps, label("out %s", name.c_str()));
    expect_close(att_r, att_c, 0.0, (s.T + 2) * kEps, label("att %s", name.c_str()));
    EXPECT_GT(bit_diffs(out_r, out_c), 0u) << name << " should change some bits at T=33";
  }
}

TEST(OpsAttention, SplitOrderIsKeyedAndReproducible) {
  const Shape s{2, 33, 3, 32};
  Inputs in(s);
  std::vector<float> o1, a1, o2, a2, o3, a3, o4, a4;
  cpu_forward(&o1, &a1, in, make_ctx(OrderKind::split_k, 4, 7));
  cpu_forward(&o2, &a2, in, make_ctx(OrderKind::split_k, 4, 7));
  EXPECT_EQ(bit_diffs(o1, o2), 0u);
  EXPECT_EQ(bit_diffs(a1, a2), 0u);
  cpu_forward(&o3, &a3, in, make_ctx(OrderKind::split_k, 4, 8));  // another seed
  EXPECT_GT(bit_diffs(o1, o3), 0u);
  ReduceCtx other_call = make_ctx(OrderKind::split_k, 4, 7);
  other_call.key.call += 1;  // another call site entity
  cpu_forward(&o4, &a4, in, other_call);
  EXPECT_GT(bit_diffs(o1, o4), 0u);
}

// Sequence 0 computed alone (B·T = 33 rows, < 64) and among 20 sequences (660 rows, ≥ 512):
// identical when batch-invariant, different somewhere when batch-variant (the small call then
// sums in more chunks).
TEST(OpsAttention, BatchVarianceOnlyWhenRequested) {
  const Shape big{20, 33, 1, 32};
  Inputs in(big);
  Inputs one({1, 33, 1, 32});
  const size_t n1 = one.n();
  one.q.assign(in.q.begin(), in.q.begin() + n1);
  one.k.assign(in.k.begin(), in.k.begin() + n1);
  one.v.assign(in.v.begin(), in.v.begin() + n1);
  for (bool invariant : {true, false}) {
    for (OrderKind kind : {OrderKind::fixed, OrderKind::split_k}) {
      ReduceCtx ctx = make_ctx(kind, kind == OrderKind::split_k ? 2 : 1, 7, invariant);
      std::vector<float> ob, ab, o1, a1;
      cpu_forward(&ob, &ab, in, ctx);
      cpu_forward(&o1, &a1, one, ctx);
      const size_t d = bit_diffs(o1.data(), ob.data(), n1);
      if (invariant)
        EXPECT_EQ(d, 0u) << "batch-invariant ctx must not depend on B";
      else
        EXPECT_GT(d, 0u) << "batch-variant ctx should sum differently for 33 vs 660 rows";
    }
  }
}

TEST(OpsAttention, BackwardCpuEqualsRefBitwise) {
  for (const Shape& s : kShapes) {
    Inputs in(s, 2);
    std::vector<float> out, att;
    ref_forward(&out, &att, in);
    std::vector<float> dout = normals(in.n(), 50, s.T, s.Dh);
    // Gradients start non-zero to check that both accumulate with '+='.
    std::vector<float> dq_r = normals(in.n(), 51), dk_r = normals(in.n(), 52), dv_r = normals(in.n(), 53);
    std::vector<float> dq_c = dq_r, dk_c = dk_r, dv_c = dv_r;
    ref::attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), att.data(),
                            in.q.data(), in.k.data(), in.v.data(), s.B, s.T, s.H, s.Dh);
    cpu::attention_backward(dq_c.data(), dk_c.data(), dv_c.data(), dout.data(), att.data(),
                            in.q.data(), in.k.data(), in.v.data(), s.B, s.T, s.H, s.Dh);
    const std::string what = label("T%d Dh%d", s.T, s.Dh);
    expect_bits(dq_r, dq_c, label("dq %s", what.c_str()));
    expect_bits(dk_r, dk_c, label("dk %s", what.c_str()));
    expect_bits(dv_r, dv_c, label("dv %s", what.c_str()));
  }
}

// J = Σ w·out with the reference forward; the backward with dout = w must be its gradient.
TEST(OpsAttention, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : {Shape{1, 1, 1, 2}, Shape{2, 7, 3, 6}, Shape{1, 33, 1, 32}}) {
    Inputs in(s, 3);
    std::vector<float> out, att;
    ref_forward(&out, &att, in);
    std::vector<float> w = normals(in.n(), 60);
    std::vector<float> dq(in.n(), 0.0f), dk(in.n(), 0.0f), dv(in.n(), 0.0f);
    ref::attention_backward(dq.data(), dk.data(), dv.data(), w.data(), att.data(), in.q.data(),
                            in.k.data(), in.v.data(), s.B, s.T, s.H, s.Dh);
    auto J = [&] {
      std::vector<float> o, a;
      ref_forward(&o, &a, in);
      return test_ops::weighted_sum(w, o);
    };
    const std::string what = label("T%d Dh%d", s.T, s.Dh);
    test_ops::check_grad(in.q, dq, J, label("dq %s", what.c_str()));
    test_ops::check_grad(in.k, dk, J, label("dk %s", what.c_str()));
    test_ops::check_grad(in.v, dv, J, label("dv %s", what.c_str()));
  }
}

// The packed (varlen) layout of the training forward (models/model_forward.cpp): each sequence's
// own rows, attention run per run of sequences of one length. A query's row over keys 0..t does
// not depend on T, so cpu::attention_forward over each sequence alone gives, on its own rows, the
// bits of ref::attention_forward over the masked [B, T_max] batch; the backward with the padding's
// dout 0 gives the same dq, dk, dv on the own rows.
TEST(OpsAttention, PackedSequencesEqualMaskedRefOnTheirOwnRows) {
  const int B = 4, T = 9, H = 2, Dh = 8, ld = H * Dh;
  const int len[B] = {9, 4, 4, 1};
  const Inputs in(Shape{B, T, H, Dh}, 5);
  const std::vector<float> dout_all = normals(in.n(), 77, T, Dh, 1.0f);
  std::vector<float> dout(in.n(), 0.0f);  // the masked convention: 0 on the padding
  for (int b = 0; b < B; ++b)
    std::copy_n(dout_all.begin() + static_cast<ptrdiff_t>(b) * T * ld, len[b] * ld, dout.begin() + static_cast<ptrdiff_t>(b) * T * ld);
  std::vector<float> out_r(in.n()), att_r(in.n_att()), dq_r(in.n(), 0.0f), dk_r(in.n(), 0.0f), dv_r(in.n(), 0.0f);
  ref::attention_forward(out_r.data(), att_r.data(), in.q.data(), in.k.data(), in.v.data(), B, T, H, Dh);
  ref::attention_backward(dq_r.data(), dk_r.data(), dv_r.data(), dout.data(), att_r.data(), in.q.data(), in.k.data(),
                          in.v.data(), B, T, H, Dh);
  for (int b = 0; b < B; ++b) {
    const size_t o = static_cast<size_t>(b) * T * ld, n = static_cast<size_t>(len[b]) * ld;
    const std::vector<float> q(in.q.begin() + o, in.q.begin() + o + n), k(in.k.begin() + o, in.k.begin() + o + n),
        v(in.v.begin() + o, in.v.begin() + o + n), g(dout.begin() + o, dout.begin() + o + n);
    std::vector<float> out(n), att(static_cast<size_t>(H) * len[b] * len[b]), dq(n, 0.0f), dk(n, 0.0f), dv(n, 0.0f);
    cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), 1, len[b], H, Dh, ReduceCtx{});
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(), 1,
                            len[b], H, Dh);
    auto own = [&](const std::vector<float>& x) { return std::vector<float>(x.begin() + o, x.begin() + o + n); };
    expect_bits(own(out_r), out, "out, sequence " + std::to_string(b));
    expect_bits(own(dq_r), dq, "dq, sequence " + std::to_string(b));
    expect_bits(own(dk_r), dk, "dk, sequence " + std::to_string(b));
    expect_bits(own(dv_r), dv, "dv, sequence " + std::to_string(b));
  }
}

}  // namespace
}  // namespace moerl

namespace moerl {
namespace {

// Caches of `size` floats whose every element differs and none is 0, to tell a written one (or a
// zeroed one) from one left alone: keys (i + 1)·k_step, values −(i + 1).
struct RampCaches {
  std::vector<float> k, v;
  RampCaches(size_t size, float k_step) : k(size), v(size) {
    for (size_t i = 0; i < size; ++i) {
      k[i] = static_cast<float>(i + 1) * k_step;
      v[i] = -static_cast<float>(i + 1);
    }
  }
};

// Decode compaction (kv_cache_keep): the CPU kernel equals the reference bit for bit, moves only
// the kept rows' first `held` positions, and leaves every other float as it was.
TEST(OpsKvCache, KeepEqualsRefAndTouchesOnlyTheKeptPrefix) {
  const int B = 7, D = 12, Tc = 64, held = 29, n = 4;
  const size_t size = static_cast<size_t>(B) * D * Tc;
  const RampCaches init(size, 0.5f);
  const std::vector<float>& k0 = init.k;
  const std::vector<float>& v0 = init.v;
  const std::vector<int32_t> from = {6, 1, 4, 5};  // rows 1 stays; 0, 2, 3 from the tail
  std::vector<float> kc = k0, vc = v0, kr = k0, vr = v0;
  cpu::kv_cache_keep(kc.data(), vc.data(), from.data(), n, D, Tc, held);
  ref::kv_cache_keep(kr.data(), vr.data(), from.data(), n, D, Tc, held);
  EXPECT_EQ(kc, kr);
  EXPECT_EQ(vc, vr);
  const size_t block = static_cast<size_t>(D) * Tc;
  for (int i = 0; i < B; ++i)
    for (size_t j = 0; j < block; ++j) {
      const int d = static_cast<int>(j / Tc), t = static_cast<int>(j % Tc);
      const bool moved = i < n && from[i] != i;
      const size_t src_k = moved && t < held ? from[i] * block + j : i * block + j;
      const size_t src_v = moved && j < static_cast<size_t>(held) * D ? from[i] * block + j : i * block + j;
      ASSERT_EQ(kc[i * block + j], k0[src_k]) << "key row " << i << " d " << d << " t " << t;
      ASSERT_EQ(vc[i * block + j], v0[src_v]) << "value row " << i << " at " << j;
    }
}

// The cache's writes (kv_cache_write): the CPU kernel equals the reference bit for bit, puts row
// b·T + t at position t0 + t of sequence b (the keys transposed), and leaves every other float.
TEST(OpsKvCache, WriteEqualsRefAndTouchesOnlyItsPositions) {
  const int B = 3, D = 10, Tc = 24;
  const size_t size = static_cast<size_t>(B) * D * Tc;
  const RampCaches init(size, 0.25f);
  const std::vector<float>& k0 = init.k;
  const std::vector<float>& v0 = init.v;
  for (const auto [T, t0] : {std::pair{9, 0}, std::pair{1, 17}, std::pair{5, 19}}) {
    const auto k = normals(static_cast<size_t>(B) * T * D, 31, T), v = normals(k.size(), 32, T);
    std::vector<float> kc = k0, vc = v0, kr = k0, vr = v0;
    cpu::kv_cache_write(kc.data(), vc.data(), k.data(), v.data(), B, T, D, Tc, t0);
    ref::kv_cache_write(kr.data(), vr.data(), k.data(), v.data(), B, T, D, Tc, t0);
    EXPECT_EQ(kc, kr) << "T " << T;
    EXPECT_EQ(vc, vr) << "T " << T;
    for (int b = 0; b < B; ++b)
      for (int d = 0; d < D; ++d)
        for (int t = 0; t < Tc; ++t) {
          const size_t kat = (static_cast<size_t>(b) * D + d) * Tc + t, vat = (static_cast<size_t>(b) * Tc + t) * D + d;
          const bool written = t >= t0 && t < t0 + T;
          const size_t row = (static_cast<size_t>(b) * T + (t - t0)) * D + d;
          ASSERT_EQ(kc[kat], written ? k[row] : k0[kat]) << "key b " << b << " d " << d << " t " << t;
          ASSERT_EQ(vc[vat], written ? v[row] : v0[vat]) << "value b " << b << " d " << d << " t " << t;
        }
  }
}

// A decode step's writes (kv_cache_append): each sequence's row at its own length − 1, equal to
// kv_cache_write of that one row at that position, bit for bit, on the CPU and the reference.
TEST(OpsKvCache, AppendWritesEachRowAtItsLengthAsWriteDoes) {
  const int B = 4, D = 10, Tc = 24;
  const size_t size = static_cast<size_t>(B) * D * Tc;
  const RampCaches init(size, 0.5f);
  const std::vector<float>& k0 = init.k;
  const std::vector<float>& v0 = init.v;
  const std::vector<int32_t> len = {1, 24, 7, 7};
  const auto k = normals(static_cast<size_t>(B) * D, 33, 1), v = normals(k.size(), 34, 1);
  std::vector<float> kc = k0, vc = v0, kr = k0, vr = v0, kw = k0, vw = v0;
  cpu::kv_cache_append(kc.data(), vc.data(), k.data(), v.data(), len.data(), B, D, Tc);
  ref::kv_cache_append(kr.data(), vr.data(), k.data(), v.data(), len.data(), B, D, Tc);
  const size_t block = static_cast<size_t>(D) * Tc, row = static_cast<size_t>(D);
  for (int b = 0; b < B; ++b)
    ref::kv_cache_write(kw.data() + b * block, vw.data() + b * block, k.data() + b * row, v.data() + b * row, 1, 1,
                        D, Tc, len[b] - 1);
  EXPECT_EQ(kc, kr);
  EXPECT_EQ(vc, vr);
  EXPECT_EQ(kr, kw);
  EXPECT_EQ(vr, vw);
  EXPECT_NE(kc, k0);
}

}  // namespace
}  // namespace moerl
