// test_simd_targets.cpp — the numerics contract across instruction sets (kernels/simd.h): every
// dispatched kernel gives the scalar reference's bits under every target this CPU supports
// (the loop is inside each test), and a short RL run gives bit-identical metrics under two
// targets (tests/rl). Besides, MOERL_SIMD=<target> in the environment restricts this whole test
// binary to one target before any test runs (ctest runs the kernel suites so under each target,
// tests/CMakeLists.txt); a target this CPU lacks skips the binary (exit 77).
#include <gtest/gtest.h>

#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/ref/ops.h"
#include "kernels/simd.h"
#include "kernels/vec.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

// Runs at load time, before gtest's main: the restriction holds for every test of the binary.
const bool kEnvTarget = [] {
  const char* v = std::getenv("MOERL_SIMD");
  if (!v || !*v) return false;
  for (const std::string& t : simd_targets_available())
    if (t == v) {
      simd_select(v);
      std::fprintf(stderr, "test_kernels: SIMD target restricted to %s\n", v);
      return true;
    }
  std::fprintf(stderr, "test_kernels: MOERL_SIMD=%s is not available on this CPU: skipped\n", v);
  std::exit(77);
}();

// Restores the unrestricted (or environment-given) target after a test's loop.
struct TargetGuard {
  std::string saved = simd_target();
  ~TargetGuard() { simd_select(kEnvTarget ? saved : std::string("best")); }
};

TEST(SimdTargets, NamesAndErrors) {
  const std::vector<std::string> avail = simd_targets_available();
  ASSERT_FALSE(avail.empty());
  EXPECT_EQ(avail.back(), "scalar");  // the portable target is always compiled and supported
  TargetGuard guard;
  for (const std::string& t : avail) {
    simd_select(t);
    EXPECT_EQ(simd_target(), t);
  }
  try {
    simd_select("avx1024", "--simd");
    FAIL() << "unknown name accepted";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--simd"), std::string::npos) << msg;
    EXPECT_NE(msg.find("avx1024"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;  // the allowed values
  }
}


using test_ops::expect_bits;
using test_ops::normals;

// Runs f once per target; f returns the kernel's outputs, which must equal `ref` bit for bit under
// every target (and so each other).
void for_each_target(const std::vector<float>& ref, const std::string& what,
                     const std::function<std::vector<float>()>& f) {
  TargetGuard guard;
  for (const std::string& t : simd_targets_available()) {
    simd_select(t);
    ASSERT_EQ(simd_target(), t);
    expect_bits(ref, f(), what + " under " + t);
  }
}

// The outputs of f under the first (best) target: the expected bits of kernels without a scalar
// reference of their own (the emulated precision paths; their emulations are in test_linear.cpp).
std::vector<float> under_best(const std::function<std::vector<float>()>& f) {
  TargetGuard guard;
  simd_select(simd_targets_available().front());
  return f();
}

// Shapes with ragged edges for every vector width (N not a multiple of 8 or 16, K odd, a last
// panel of 16 columns or fewer, M not a multiple of the row tiles).
struct Shape {
  int M, N, K;
};
const Shape kShapes[] = {{1, 1, 1}, {7, 37, 19}, {13, 50, 33}, {30, 72, 128}, {64, 130, 96}};

TEST(SimdTargets, LinearForwardFp32EqualsReference) {
  for (const Shape& s : kShapes) {
    const auto x = normals(size_t(s.M) * s.K, 1, s.M), w = normals(size_t(s.N) * s.K, 2, s.N);
    std::vector<float> ref(size_t(s.M) * s.N);
    ref::matmul_forward(ref.data(), x.data(), w.data(), s.M, s.N, s.K);
    for_each_target(ref, test_ops::label("linear %dx%dx%d", s.M, s.N, s.K), [&] {
      LinearNumerics nm;
      PackedWeight pw;
      linear_pack_weight(&pw, w.data(), s.N, s.K, nm);
      std::vector<float> y(ref.size());
      linear_forward(y.data(), x.data(), pw, s.M, nm);
      return y;
    });
  }
}

TEST(SimdTargets, LinearBackwardEqualsReference) {
  for (const Shape& s : kShapes) {
    const auto x = normals(size_t(s.M) * s.K, 3, s.M), w = normals(size_t(s.N) * s.K, 4, s.N);
    const auto dout = normals(size_t(s.M) * s.N, 5, s.M);
    const auto dx0 = normals(x.size(), 6, s.M), dw0 = normals(w.size(), 7, s.N);  // '+=' onto these
    std::vector<float> rdx = dx0, rdw = dw0;
    ref::matmul_backward(rdx.data(), rdw.data(), dout.data(), x.data(), w.data(), s.M, s.N, s.K);
    std::vector<float> ref = rdx;
    ref.insert(ref.end(), rdw.begin(), rdw.end());
    for_each_target(ref, test_ops::label("linear backward %dx%dx%d", s.M, s.N, s.K), [&] {
      std::vector<float> dx = dx0, dw = dw0;
      linear_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), s.M, s.N, s.K);
      dx.insert(dx.end(), dw.begin(), dw.end());
      return dx;
    });
  }
}

// The emulated-precision paths: operand rounding with scales, the limited-precision accumulator
// (both of its kernels: Veltkamp's splitting when the weight's range is known, the integer
// rounding — NaN-free and NaN-safe — otherwise), split-K and reversed orders.
TEST(SimdTargets, EmulatedPrecisionPathsAreTargetIndependent) {
  struct Case {
    Format f;
    Scaling act, wgt;
    int accum_bits;
    OrderKind order;
    int split;
  };
  const Case cases[] = {
      {Format::bf16, Scaling::none, Scaling::none, 0, OrderKind::fixed, 1},
      {Format::fp16, Scaling::row, Scaling::row, 0, OrderKind::reversed, 1},
      {Format::fp8_e4m3, Scaling::block, Scaling::block, 13, OrderKind::split_k, 4},
      {Format::fp8_e5m2, Scaling::tensor, Scaling::tensor, 13, OrderKind::fixed, 1},
      {Format::fp8_e4m3, Scaling::row, Scaling::tensor, 7, OrderKind::reversed, 1},
      {Format::fp32, Scaling::none, Scaling::none, 10, OrderKind::split_k, 3},
  };
  const Shape s{30, 50, 200};
  auto x = normals(size_t(s.M) * s.K, 8, 0), w = normals(size_t(s.N) * s.K, 9, 0);
  x[5] = 1e-30f;  // a tiny activation: its block leaves Veltkamp's safe range
  for (const Case& c : cases)
    for (bool forget_range : {false, true}) {  // with and without the weight's exponent range
      auto run = [&] {
        LinearNumerics nm;
        nm.format = c.f;
        nm.act_scaling = c.act;
        nm.weight_scaling = c.wgt;
        nm.scale_block = 32;
        nm.accum_bits = c.accum_bits;
        nm.promote_every = 48;
        nm.reduce.order.kind = c.order;
        nm.reduce.order.split = c.split;
        nm.reduce.key.seed = 11;
        PackedWeight pw;
        linear_pack_weight(&pw, w.data(), s.N, s.K, nm);
        if (forget_range) pw.exp_lo = pw.exp_hi = -1;
        std::vector<float> y(size_t(s.M) * s.N);
        linear_forward(y.data(), x.data(), pw, s.M, nm);
        return y;
      };
      for_each_target(under_best(run),
                      test_ops::label("%s accum %d order %d%s", format_name(c.f), c.accum_bits,
                                      static_cast<int>(c.order), forget_range ? " (no range)" : ""),
                      run);
    }
}

TEST(SimdTargets, QuantisationEqualsScalarRounding) {
  auto x = normals(1000, 10, 0, 0, 3.0f);
  x[3] = 1e-40f;  // subnormal
  x[4] = -0.0f;
  x[5] = 1e6f;    // beyond every fp8 range
  x[6] = std::numeric_limits<float>::quiet_NaN();
  for (Format f : {Format::bf16, Format::fp16, Format::fp8_e4m3, Format::fp8_e5m2}) {
    std::vector<float> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) ref[i] = round_to_format(x[i], f);
    for_each_target(ref, std::string("round_array ") + format_name(f), [&] {
      std::vector<float> y = x;
      round_array(y.data(), static_cast<int64_t>(y.size()), f);
      return y;
    });
    // the backend's storage ops over it (kernels/cpu/storage.cpp): the references' bits
    std::vector<float> sum(x.size());
    ref::add_round(sum.data(), x.data(), ref.data(), static_cast<int64_t>(x.size()), f);
    for_each_target(ref, std::string("round_format ") + format_name(f), [&] {
      std::vector<float> y = x;
      cpu::round_format(y.data(), static_cast<int64_t>(y.size()), f);
      return y;
    });
    for_each_target(sum, std::string("add_round ") + format_name(f), [&] {
      std::vector<float> y(x.size());
      cpu::add_round(y.data(), x.data(), ref.data(), static_cast<int64_t>(x.size()), f);
      return y;
    });
    for (Scaling sc : {Scaling::tensor, Scaling::row, Scaling::block}) {
      auto run = [&] {
        std::vector<float> y(x.size()), scales(64);
        quantize_matrix(y.data(), scales.data(), x.data(), 20, 50, f, sc, 4, 16);
        y.insert(y.end(), scales.begin(), scales.end());
        return y;
      };
      for_each_target(under_best(run), std::string("quantize_matrix ") + format_name(f), run);
    }
  }
}

TEST(SimdTargets, PointwiseAndRowKernelsEqualReference) {
  const int N = 37, C = 45;
  const auto x = normals(size_t(N) * C, 12, 0, 0, 2.0f), g = normals(x.size(), 13, 0);
  const auto w = normals(C, 14, 0), acc0 = normals(x.size(), 15, 0);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 7) % C - (n == 5);  // one masked row (−1)
  std::vector<float> ref(x.size()), ref2(x.size()), rstd(N);
  // softmax, log-softmax, softmax backward
  ref::softmax_forward(ref.data(), x.data(), N, C);
  for_each_target(ref, "softmax", [&] { std::vector<float> y(x.size()); cpu::softmax_forward(y.data(), x.data(), N, C); return y; });
  ref::log_softmax_forward(ref.data(), x.data(), N, C);
  for_each_target(ref, "log_softmax", [&] { std::vector<float> y(x.size()); cpu::log_softmax_forward(y.data(), x.data(), N, C); return y; });
  ref = acc0;
  ref::softmax_backward(ref.data(), g.data(), x.data(), N, C);
  for_each_target(ref, "softmax_backward", [&] { std::vector<float> y = acc0; cpu::softmax_backward(y.data(), g.data(), x.data(), N, C); return y; });
  // per-target log-prob and its backward
  std::vector<float> lp(N), dlp = normals(N, 16, 0);
  ref::logprob_forward(lp.data(), x.data(), targets.data(), N, C);
  for_each_target(lp, "logprob", [&] { std::vector<float> y(N); cpu::logprob_forward(y.data(), x.data(), targets.data(), N, C); return y; });
  ref = acc0;
  ref::logprob_backward(ref.data(), dlp.data(), x.data(), targets.data(), N, C);
  for_each_target(ref, "logprob_backward", [&] { std::vector<float> y = acc0; cpu::logprob_backward(y.data(), dlp.data(), x.data(), targets.data(), N, C); return y; });
  // SwiGLU forward and backward
  ref::swiglu_forward(ref.data(), x.data(), g.data(), N, C);
  for_each_target(ref, "swiglu", [&] { std::vector<float> y(x.size()); cpu::swiglu_forward(y.data(), x.data(), g.data(), N, C); return y; });
  ref = acc0;
  ref2 = acc0;
  ref::swiglu_backward(ref.data(), ref2.data(), g.data(), x.data(), acc0.data(), N, C);  // dout = g, gate = x, up = acc0
  ref.insert(ref.end(), ref2.begin(), ref2.end());
  for_each_target(ref, "swiglu_backward", [&] {
    std::vector<float> a = acc0, b = acc0;
    cpu::swiglu_backward(a.data(), b.data(), g.data(), x.data(), acc0.data(), N, C);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  });
  // RMSNorm forward (out and rstd) and backward (dinp and dweight)
  ref::rmsnorm_forward(ref2.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  ref = ref2;
  ref.insert(ref.end(), rstd.begin(), rstd.end());
  for_each_target(ref, "rmsnorm", [&] {
    std::vector<float> y(x.size()), r(N);
    cpu::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f, ReduceCtx{});
    y.insert(y.end(), r.begin(), r.end());
    return y;
  });
  std::vector<float> rdx = acc0, rdw = w;
  ref::rmsnorm_backward(rdx.data(), rdw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  rdx.insert(rdx.end(), rdw.begin(), rdw.end());
  for_each_target(rdx, "rmsnorm_backward", [&] {
    std::vector<float> dx = acc0, dw = w;
    cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
    dx.insert(dx.end(), dw.begin(), dw.end());
    return dx;
  });
  // AdamW
  {
    std::vector<float> rw = x, rm = acc0, rv(x.size());
    for (size_t i = 0; i < rv.size(); ++i) rv[i] = std::fabs(g[i]);
    const std::vector<float> v0 = rv;
    ref::adamw_update(rw.data(), rm.data(), rv.data(), g.data(), static_cast<int64_t>(x.size()), 0.5f, 0.9f, 0.95f, 0.19, 0.0975, 1e-3f, 1e-4f, 1e-8f);
    rw.insert(rw.end(), rm.begin(), rm.end());
    rw.insert(rw.end(), rv.begin(), rv.end());
    for_each_target(rw, "adamw", [&] {
      std::vector<float> a = x, m = acc0, v = v0;
      cpu::adamw_update(a.data(), m.data(), v.data(), g.data(), static_cast<int64_t>(x.size()), 0.5f, 0.9f, 0.95f, 0.19, 0.0975, 1e-3f, 1e-4f, 1e-8f);
      a.insert(a.end(), m.begin(), m.end());
      a.insert(a.end(), v.begin(), v.end());
      return a;
    });
  }
  // top-k (ids as floats beside the values), with exact ties
  {
    const int E = 16, K = 4;
    std::vector<float> sc = normals(size_t(N) * E, 17, 0);
    for (int n = 0; n < N; n += 3) sc[size_t(n) * E + 1] = sc[size_t(n) * E + 2];
    for (TieBreak tie : {TieBreak::lowest, TieBreak::random}) {
      NoiseKey key;
      key.seed = 5;
      std::vector<int32_t> ids(size_t(N) * K);
      std::vector<float> vals(ids.size());
      ref::topk_forward(ids.data(), vals.data(), sc.data(), N, E, K, tie, key);
      std::vector<float> r(ids.begin(), ids.end());
      r.insert(r.end(), vals.begin(), vals.end());
      for_each_target(r, "topk", [&] {
        std::vector<int32_t> i2(ids.size());
        std::vector<float> v2(ids.size());
        cpu::topk_forward(i2.data(), v2.data(), sc.data(), N, E, K, tie, key);
        std::vector<float> out(i2.begin(), i2.end());
        out.insert(out.end(), v2.begin(), v2.end());
        return out;
      });
    }
  }
}

TEST(SimdTargets, FusedVectorHelpersEqualScalarLoops) {
  const auto x = normals(203, 30, 0), y0 = normals(203, 31, 0);
  std::vector<float> ref = y0;
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::fma(0.37f, x[i], ref[i]);
  float dot = 0.5f;
  for (size_t i = 0; i < x.size(); ++i) dot = std::fma(x[i], y0[i], dot);
  ref.push_back(dot);
  for_each_target(ref, "vec_fma_axpy / vec_fma_dot", [&] {
    std::vector<float> y = y0;
    vec_fma_axpy(y.data(), 0.37f, x.data(), static_cast<int64_t>(y.size()));
    y.push_back(vec_fma_dot(x.data(), y0.data(), static_cast<int64_t>(x.size()), 0.5f));
    return y;
  });
}

TEST(SimdTargets, AttentionAndRopeEqualReference) {
  for (int Dh : {16, 12}) {  // one 16-lane block per head, and a ragged head width
    const int B = 3, T = 21, H = 2, D = H * Dh;
    const auto q = normals(size_t(B) * T * D, 20, Dh), k = normals(q.size(), 21, Dh), v = normals(q.size(), 22, Dh);
    const auto dout = normals(q.size(), 23, Dh), acc0 = normals(q.size(), 24, Dh);
    std::vector<float> out(q.size()), att(size_t(B) * H * T * T);
    ref::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh);
    std::vector<float> ref = out;
    ref.insert(ref.end(), att.begin(), att.end());
    for_each_target(ref, test_ops::label("attention Dh %d", Dh), [&] {
      std::vector<float> o(q.size()), a(att.size());
      cpu::attention_forward(o.data(), a.data(), q.data(), k.data(), v.data(), B, T, H, Dh, ReduceCtx{});
      o.insert(o.end(), a.begin(), a.end());
      return o;
    });
    std::vector<float> dq = acc0, dk = acc0, dv = acc0;
    ref::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh);
    std::vector<float> rb = dq;
    rb.insert(rb.end(), dk.begin(), dk.end());
    rb.insert(rb.end(), dv.begin(), dv.end());
    for_each_target(rb, test_ops::label("attention backward Dh %d", Dh), [&] {
      std::vector<float> a = acc0, b = acc0, c = acc0;
      cpu::attention_backward(a.data(), b.data(), c.data(), dout.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh);
      a.insert(a.end(), b.begin(), b.end());
      a.insert(a.end(), c.begin(), c.end());
      return a;
    });
    // KV-cache decode: one query per sequence over its first len[b] cached positions
    const std::vector<int32_t> len = {1, 17, 21};
    const auto qd = normals(size_t(B) * D, 25, Dh);
    std::vector<float> rd(qd.size());
    const auto kT = test_ops::keys_transposed(k, B, T, D);
    ref::attention_decode(rd.data(), qd.data(), kT.data(), v.data(), len.data(), B, T, H, Dh);
    for_each_target(rd, test_ops::label("attention decode Dh %d", Dh), [&] {
      std::vector<float> o(qd.size());
      cpu::attention_decode(o.data(), qd.data(), kT.data(), v.data(), len.data(), B, T, H, Dh, ReduceCtx{});
      return o;
    });
    // RoPE forward and backward (in place), embedding forward
    std::vector<int32_t> pos(size_t(B) * T);
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i % T);
    std::vector<float> rr = q;
    ref::rope_forward(rr.data(), pos.data(), B * T, H, Dh, 10000.0f);
    ref::rope_backward(rr.data(), pos.data(), B * T, H, Dh, 10000.0f);
    for_each_target(rr, test_ops::label("rope Dh %d", Dh), [&] {
      std::vector<float> y = q;
      cpu::rope_forward(y.data(), pos.data(), B * T, H, Dh, 10000.0f);
      cpu::rope_backward(y.data(), pos.data(), B * T, H, Dh, 10000.0f);
      return y;
    });
  }
}

}  // namespace
}  // namespace moerl
