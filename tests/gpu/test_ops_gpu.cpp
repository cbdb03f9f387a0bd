// test_ops_gpu.cpp — the CUDA backend's non-GEMM ops (kernels/cuda/ops.h) on the device against
// kernels/cpu, on odd sizes. Skipped where no CUDA device is present.
//
// What each op must give, and why:
//  * bit-identical to the CPU: embedding forward/backward, RMSNorm dweight, attention dv, top-k
//    (all tie rules), AdamW — the device runs the CPU's operations in the CPU's order (hd/*.h);
//  * bit-identical to the host composition of the same MOERL_HD functions (tests/cuda_host/
//    hd_compose.h) where no transcendental function is involved — RMSNorm forward and dinp,
//    softmax backward, attention backward: this checks that the device reduces in the order
//    hd/reduce.h documents (and tests/cuda_host checks that order against kernels/ref);
//  * within tolerance of the CPU elsewhere: the tree order of the row sums (2n·u relative, u =
//    2^-24) plus the device's expf (≤ 2 ulp) / logf (≤ 1 ulp) and double pow/cos/sin (RoPE);
//  * every op bit-reproducible run to run (no atomics anywhere), and '+=' outputs accumulated
//    onto their seeded initial values exactly as the CPU does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "../cuda_host/hd_compose.h"
#include "../kernels/test_ops_util.h"
#include "gpu_test.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"

namespace moerl {
namespace {

using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

constexpr double kExpUlps = 8.0;  // device expf/logf (≤ 2 ulp each) through a formula, in u

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// |got − ref| ≤ tol[i] everywhere; reports the first violation.
void expect_within(const std::vector<float>& ref, const std::vector<float>& got,
                   const std::vector<double>& tol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(static_cast<double>(got[i]) - ref[i]) <= tol[i])) {
      ADD_FAILURE() << what << ": at " << i << " ref " << ref[i] << " got " << got[i] << " tol "
                    << tol[i];
      return;
    }
}

// ---- embedding ---------------------------------------------------------------------------------
TEST(OpsGpu, EmbeddingEqualsCpu) {
  MOERL_REQUIRE_GPU();
  const int V = 50, D = 67, N = 301;
  const auto table = normals(static_cast<size_t>(V) * D, 1);
  std::vector<int32_t> tok(N);
  for (int n = 0; n < N; ++n) tok[n] = (n * 7 + n / 3) % 13 + (n % 5 == 0 ? 37 : 0);  // repeats
  std::vector<float> out(static_cast<size_t>(N) * D), out_cpu(out.size());
  cuda::embedding_forward(out.data(), tok.data(), table.data(), N, D);
  cpu::embedding_forward(out_cpu.data(), tok.data(), table.data(), N, D);
  expect_bits(out_cpu, out, "embedding forward");

  const auto dout = normals(out.size(), 2);
  const auto dtable0 = normals(table.size(), 3);  // '+=' onto these
  auto dt = dtable0, dt2 = dtable0, dt_cpu = dtable0;
  cuda::embedding_backward(dt.data(), dout.data(), tok.data(), N, D);
  cuda::embedding_backward(dt2.data(), dout.data(), tok.data(), N, D);
  cpu::embedding_backward(dt_cpu.data(), dout.data(), tok.data(), N, D);
  expect_bits(dt_cpu, dt, "embedding backward (rows of each token in order n)");
  expect_bits(dt, dt2, "embedding backward run to run");
  // untouched rows keep their values
  EXPECT_EQ(dt[static_cast<size_t>(49) * D], dtable0[static_cast<size_t>(49) * D]);
}

// ---- RMSNorm -----------------------------------------------------------------------------------
TEST(OpsGpu, RmsnormForward) {
  MOERL_REQUIRE_GPU();
  const int N = 37;
  for (int D : {1, 7, 300, 1029}) {
    const auto x = normals(static_cast<size_t>(N) * D, 10, D), w = normals(D, 11, D);
    std::vector<float> out(x.size()), rstd(N), out2(x.size()), rstd2(N);
    std::vector<float> out_hd(x.size()), rstd_hd(N), out_cpu(x.size()), rstd_cpu(N);
    cuda::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    cuda::rmsnorm_forward(out2.data(), rstd2.data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    hd_compose::rmsnorm_forward(out_hd.data(), rstd_hd.data(), x.data(), w.data(), N, D, 1e-5f);
    cpu::rmsnorm_forward(out_cpu.data(), rstd_cpu.data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    expect_bits(rstd_hd, rstd, label("rstd D=%d: device order = hd/reduce.h", D));
    expect_bits(out_hd, out, label("out D=%d: device order = hd/reduce.h", D));
    expect_bits(out, out2, label("out D=%d run to run", D));
    // positive terms: the sums' orders differ by ≤ 2D·u relative (see tests/cuda_host)
    expect_close(rstd_cpu, rstd, 0.0, (D + 6) * kEps, label("rstd D=%d vs cpu", D));
    expect_close(out_cpu, out, 0.0, (D + 8) * kEps, label("out D=%d vs cpu", D));
  }
}

TEST(OpsGpu, RmsnormBackward) {
  MOERL_REQUIRE_GPU();
  const int N = 29;
  for (int D : {1, 7, 300, 1029}) {
    const auto x = normals(static_cast<size_t>(N) * D, 12, D), w = normals(D, 13, D);
    const auto dy = normals(x.size(), 14, D);
    std::vector<float> out(x.size()), rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f, ReduceCtx{});
    const auto dinp0 = normals(x.size(), 15, D), dw0 = normals(D, 16, D);  // '+=' onto these
    auto dinp = dinp0, dw = dw0, dinp_hd = dinp0, dw_hd = dw0, dinp_cpu = dinp0, dw_cpu = dw0;
    cuda::rmsnorm_backward(dinp.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);
    hd_compose::rmsnorm_backward(dinp_hd.data(), dw_hd.data(), dy.data(), x.data(), w.data(),
                                 rstd.data(), N, D);
    cpu::rmsnorm_backward(dinp_cpu.data(), dw_cpu.data(), dy.data(), x.data(), w.data(),
                          rstd.data(), N, D);
    expect_bits(dw_cpu, dw, label("dweight D=%d vs cpu (rows in order)", D));
    expect_bits(dinp_hd, dinp, label("dinp D=%d: device order = hd/reduce.h", D));
    // the dot's order error through coef·x, relative to the tensor's scale (tests/cuda_host)
    expect_close(dinp_cpu, dinp, 2.0 * D * kEps * max_abs(dinp_cpu), 8 * kEps,
                 label("dinp D=%d vs cpu", D));
    // either output may be null; the other is unchanged by its absence
    auto dinp_only = dinp0, dw_only = dw0;
    cuda::rmsnorm_backward(dinp_only.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(), N, D);
    cuda::rmsnorm_backward(nullptr, dw_only.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);
    expect_bits(dinp, dinp_only, label("dinp alone D=%d", D));
    expect_bits(dw, dw_only, label("dweight alone D=%d", D));
  }
}

// ---- RoPE --------------------------------------------------------------------------------------
TEST(OpsGpu, Rope) {
  MOERL_REQUIRE_GPU();
  for (int Dh : {2, 7, 64}) {
    const int N = 45, H = 3;
    std::vector<int32_t> pos(N);
    for (int n = 0; n < N; ++n) pos[n] = n * 977 % 5000;
    const auto x0 = normals(static_cast<size_t>(N) * H * Dh, 20, Dh);
    auto x = x0, x_cpu = x0;
    cuda::rope_forward(x.data(), pos.data(), N, H, Dh, 10000.0f);
    cpu::rope_forward(x_cpu.data(), pos.data(), N, H, Dh, 10000.0f);
    // c, s may differ by 1 ulp (device double pow/cos/sin rounded to float): each output
    // a·c ∓ b·s moves by ≤ 2u·(|a| + |b|) ≤ 4u·max|x|, plus its own 3 roundings.
    const double abs = 4 * kEps * max_abs(x0);
    expect_close(x_cpu, x, abs, 4 * kEps, label("rope forward Dh=%d", Dh));
    auto again = x0;
    cuda::rope_forward(again.data(), pos.data(), N, H, Dh, 10000.0f);
    expect_bits(x, again, label("rope run to run Dh=%d", Dh));
    cuda::rope_backward(x.data(), pos.data(), N, H, Dh, 10000.0f);
    cpu::rope_backward(x_cpu.data(), pos.data(), N, H, Dh, 10000.0f);
    expect_close(x_cpu, x, 2 * abs, 8 * kEps, label("rope backward Dh=%d", Dh));
    if (Dh % 2) {
      EXPECT_EQ(x[Dh - 1], x0[Dh - 1]) << "odd Dh: the last element is not rotated";
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------
struct Shape {
  int B, T, H, Dh;
};
const Shape kShapes[] = {{1, 1, 1, 1}, {2, 13, 3, 10}, {3, 70, 2, 64}, {1, 300, 1, 8}};

TEST(OpsGpu, AttentionForward) {
  MOERL_REQUIRE_GPU();
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.B) * s.T * s.H * s.Dh;
    const size_t na = static_cast<size_t>(s.B) * s.H * s.T * s.T;
    const auto q = normals(n, 30, s.T), k = normals(n, 31, s.T), v = normals(n, 32, s.T);
    std::vector<float> out(n), att(na, 7.0f), out2(n), att2(na), out_cpu(n), att_cpu(na);
    cuda::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H,
                            s.Dh, ReduceCtx{});
    cuda::attention_forward(out2.data(), att2.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H,
                            s.Dh, ReduceCtx{});
    cpu::attention_forward(out_cpu.data(), att_cpu.data(), q.data(), k.data(), v.data(), s.B, s.T,
                           s.H, s.Dh, ReduceCtx{});
    expect_bits(out, out2, label("out T=%d run to run", s.T));
    expect_bits(att, att2, label("att T=%d run to run", s.T));
    // scores are the CPU's fma chains; p differs by the denominator's order (2T·u relative)
    // and the device's expf; out = Σ p·v off by that relative error of p times max|v|.
    expect_close(att_cpu, att, 0.0, (2 * s.T + 4 + kExpUlps) * kEps, label("att T=%d", s.T));
    expect_close(out_cpu, out, (2 * s.T + 8 + kExpUlps) * kEps * max_abs(v), 4 * kEps,
                 label("out T=%d", s.T));
    size_t upper_nonzero = 0;  // causal: exactly 0 above the diagonal, as the CPU writes
    for (size_t r = 0; r < na / s.T; ++r)
      for (int j = static_cast<int>(r % s.T) + 1; j < s.T; ++j) upper_nonzero += att[r * s.T + j] != 0.0f;
    EXPECT_EQ(upper_nonzero, 0u) << label("T=%d", s.T);
  }
}

// Decode runs the forward's row routine on cache rows 0..len-1: for a query at position len-1 it
// gives the forward's output bits; against the CPU decode within the forward's tolerance.
TEST(OpsGpu, AttentionDecode) {
  MOERL_REQUIRE_GPU();
  const int B = 3, T = 37, Tmax = 40, H = 4, Dh = 16;
  const int64_t ld = H * Dh;
  const size_t n = static_cast<size_t>(B) * T * ld;
  const auto q = normals(n, 40), k = normals(n, 41), v = normals(n, 42);
  std::vector<float> out(n), att(static_cast<size_t>(B) * H * T * T);
  cuda::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh, ReduceCtx{});
  const int32_t len[B] = {1, 20, 37};
  std::vector<float> kc(static_cast<size_t>(B) * Tmax * ld, NAN), vc(kc.size(), NAN), qd(B * ld);
  for (int b = 0; b < B; ++b) {  // rows past len are NaN: reading one would show
    std::copy_n(k.begin() + b * T * ld, len[b] * ld, kc.begin() + b * Tmax * ld);
    std::copy_n(v.begin() + b * T * ld, len[b] * ld, vc.begin() + b * Tmax * ld);
    std::copy_n(q.begin() + (b * T + len[b] - 1) * ld, ld, qd.begin() + b * ld);
  }
  std::vector<float> dec(static_cast<size_t>(B) * ld), dec2(dec.size()), dec_cpu(dec.size());
  cuda::attention_decode(dec.data(), qd.data(), kc.data(), vc.data(), len, B, Tmax, H, Dh, ReduceCtx{});
  cuda::attention_decode(dec2.data(), qd.data(), kc.data(), vc.data(), len, B, Tmax, H, Dh, ReduceCtx{});
  cpu::attention_decode(dec_cpu.data(), qd.data(), kc.data(), vc.data(), len, B, Tmax, H, Dh, ReduceCtx{});
  expect_bits(dec, dec2, "decode run to run");
  for (int b = 0; b < B; ++b) {
    const std::vector<float> fwd(out.begin() + (b * T + len[b] - 1) * ld, out.begin() + (b * T + len[b]) * ld);
    const std::vector<float> got(dec.begin() + b * ld, dec.begin() + (b + 1) * ld);
    expect_bits(fwd, got, label("decode b=%d = forward row", b));
  }
  expect_close(dec_cpu, dec, (2 * Tmax + 8 + kExpUlps) * kEps * max_abs(v), 4 * kEps, "decode vs cpu");
  int32_t bad[B] = {1, 0, 5};
  EXPECT_THROW(cuda::attention_decode(dec.data(), qd.data(), kc.data(), vc.data(), bad, B, Tmax, H,
                                      Dh, ReduceCtx{}),
               std::invalid_argument);
}

TEST(OpsGpu, AttentionBackward) {
  MOERL_REQUIRE_GPU();
  for (const Shape& s : kShapes) {
    const size_t n = static_cast<size_t>(s.B) * s.T * s.H * s.Dh;
    const size_t na = static_cast<size_t>(s.B) * s.H * s.T * s.T;
    const auto q = normals(n, 50, s.T), k = normals(n, 51, s.T), v = normals(n, 52, s.T);
    const auto dout = normals(n, 53, s.T);
    std::vector<float> out(n), att(na), g(na);
    cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H,
                           s.Dh, ReduceCtx{});
    const auto dq0 = normals(n, 54, s.T), dk0 = normals(n, 55, s.T), dv0 = normals(n, 56, s.T);
    auto dq = dq0, dk = dk0, dv = dv0, dq2 = dq0, dk2 = dk0, dv2 = dv0;
    auto dq_hd = dq0, dk_hd = dk0, dv_hd = dv0, dq_cpu = dq0, dk_cpu = dk0, dv_cpu = dv0;
    cuda::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(),
                             k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    cuda::attention_backward(dq2.data(), dk2.data(), dv2.data(), dout.data(), att.data(), q.data(),
                             k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    hd_compose::attention_backward(dq_hd.data(), dk_hd.data(), dv_hd.data(), g.data(), dout.data(),
                                   att.data(), q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    cpu::attention_backward(dq_cpu.data(), dk_cpu.data(), dv_cpu.data(), dout.data(), att.data(),
                            q.data(), k.data(), v.data(), s.B, s.T, s.H, s.Dh);
    expect_bits(dq, dq2, label("dq T=%d run to run", s.T));
    expect_bits(dk, dk2, label("dk T=%d run to run", s.T));
    expect_bits(dv_cpu, dv, label("dv T=%d vs cpu", s.T));
    expect_bits(dq_hd, dq, label("dq T=%d: device order = hd_compose", s.T));
    expect_bits(dk_hd, dk, label("dk T=%d: device order = hd_compose", s.T));
    // (tests/cuda_host bounds hd_compose against ref element by element; here a coarse sanity
    // check against the CPU: the ds tree moves dq, dk by ~T·u ≈ 2e-5 of the tensor's scale at
    // most, a wrong term by O(1))
    expect_close(dq_cpu, dq, 1e-3 * max_abs(dq_cpu), 0.0, label("dq T=%d vs cpu", s.T));
    expect_close(dk_cpu, dk, 1e-3 * max_abs(dk_cpu), 0.0, label("dk T=%d vs cpu", s.T));
  }
}

// ---- softmax family ----------------------------------------------------------------------------
TEST(OpsGpu, SoftmaxFamily) {
  MOERL_REQUIRE_GPU();
  const int N = 19;
  for (int C : {1, 7, 300, 1029}) {
    const auto x = normals(static_cast<size_t>(N) * C, 60, C, 0, 3.0f);
    std::vector<float> p(x.size()), p2(x.size()), p_cpu(x.size()), lp(x.size()), lp_cpu(x.size());
    cuda::softmax_forward(p.data(), x.data(), N, C);
    cuda::softmax_forward(p2.data(), x.data(), N, C);
    cpu::softmax_forward(p_cpu.data(), x.data(), N, C);
    expect_bits(p, p2, label("softmax C=%d run to run", C));
    expect_close(p_cpu, p, 0.0, (2 * C + 4 + kExpUlps) * kEps, label("softmax C=%d", C));
    cuda::log_softmax_forward(lp.data(), x.data(), N, C);
    cpu::log_softmax_forward(lp_cpu.data(), x.data(), N, C);
    expect_close(lp_cpu, lp, (2 * C + 2 + kExpUlps) * kEps, 4 * kEps, label("log_softmax C=%d", C));

    const auto dy = normals(x.size(), 61, C), dx0 = normals(x.size(), 62, C);
    auto dx = dx0, dx_hd = dx0, dx_cpu = dx0;
    cuda::softmax_backward(dx.data(), dy.data(), p_cpu.data(), N, C);
    hd_compose::softmax_backward(dx_hd.data(), dy.data(), p_cpu.data(), N, C);
    cpu::softmax_backward(dx_cpu.data(), dy.data(), p_cpu.data(), N, C);
    expect_bits(dx_hd, dx, label("softmax_backward C=%d: device order = hd/reduce.h", C));
    // the dot's order error, 2C·u·Σ|p·dy| ≤ 2C·u·max|dy|, times p ≤ 1
    expect_close(dx_cpu, dx, 2.0 * C * kEps * max_abs(dy), 4 * kEps, label("softmax_backward C=%d", C));
  }
}

TEST(OpsGpu, Logprob) {
  MOERL_REQUIRE_GPU();
  const int N = 23;
  for (int V : {1, 7, 300, 5003}) {
    const auto x = normals(static_cast<size_t>(N) * V, 70, V, 0, 4.0f);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; ++n) tgt[n] = n % 5 == 2 ? -1 : (n * 7919) % V;  // some ignored rows
    std::vector<float> lp(N, 9.0f), lp2(N), lp_cpu(N, 9.0f);
    cuda::logprob_forward(lp.data(), x.data(), tgt.data(), N, V);
    cuda::logprob_forward(lp2.data(), x.data(), tgt.data(), N, V);
    cpu::logprob_forward(lp_cpu.data(), x.data(), tgt.data(), N, V);
    expect_bits(lp, lp2, label("logprob V=%d run to run", V));
    expect_close(lp_cpu, lp, (2 * V + 2 + kExpUlps) * kEps, 4 * kEps, label("logprob V=%d", V));
    EXPECT_EQ(lp[2], 0.0f) << "target < 0 gives logp 0";

    const auto dlogp = normals(N, 71, V), dl0 = normals(x.size(), 72, V);
    auto dl = dl0, dl2 = dl0, dl_cpu = dl0;
    cuda::logprob_backward(dl.data(), dlogp.data(), x.data(), tgt.data(), N, V);
    cuda::logprob_backward(dl2.data(), dlogp.data(), x.data(), tgt.data(), N, V);
    cpu::logprob_backward(dl_cpu.data(), dlogp.data(), x.data(), tgt.data(), N, V);
    expect_bits(dl, dl2, label("logprob_backward V=%d run to run", V));
    expect_close(dl_cpu, dl, max_abs(dlogp) * (2 * V + 4 + kExpUlps) * kEps, 4 * kEps,
                 label("logprob_backward V=%d", V));
    EXPECT_TRUE(std::equal(dl.begin() + 2 * V, dl.begin() + 3 * V, dl0.begin() + 2 * V))
        << "a row with target < 0 stays untouched";
  }
}

// ---- element-wise ------------------------------------------------------------------------------
TEST(OpsGpu, Swiglu) {
  MOERL_REQUIRE_GPU();
  const int N = 7, F = 1001;
  auto gate = normals(static_cast<size_t>(N) * F, 80, 0, 0, 6.0f);
  gate[0] = 100.0f;
  gate[1] = -100.0f;
  gate[2] = 0.0f;
  const auto up = normals(gate.size(), 81), dout = normals(gate.size(), 82);
  std::vector<float> out(gate.size()), out2(gate.size()), out_cpu(gate.size());
  cuda::swiglu_forward(out.data(), gate.data(), up.data(), N, F);
  cuda::swiglu_forward(out2.data(), gate.data(), up.data(), N, F);
  cpu::swiglu_forward(out_cpu.data(), gate.data(), up.data(), N, F);
  expect_bits(out, out2, "swiglu run to run");
  // σ off by the device expf's 2 ulp (relative ≤ 2u after 1/(1+e)), then 3 roundings.
  expect_close(out_cpu, out, 1e-30, kExpUlps * kEps, "swiglu forward");
  const auto dg0 = normals(gate.size(), 83), du0 = normals(gate.size(), 84);
  auto dg = dg0, du = du0, dg_cpu = dg0, du_cpu = du0;
  cuda::swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), N, F);
  cpu::swiglu_backward(dg_cpu.data(), du_cpu.data(), dout.data(), gate.data(), up.data(), N, F);
  // slope = σ·(1 + g·(1 − σ)): σ's error ~2u·σ is multiplied by up to |g| in g·(1 − σ); the
  // products and the '+=' add a few u of |dout·up|·(1 + |g|) and of the start value.
  std::vector<double> tol_g(gate.size()), tol_u(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const double du_ = std::fabs(dout[i] * up[i]);
    tol_g[i] = kExpUlps * kEps * (du_ * (1.0 + std::fabs(gate[i])) + std::fabs(dg_cpu[i]));
    tol_u[i] = kExpUlps * kEps * (std::fabs(dout[i] * gate[i]) + std::fabs(du_cpu[i]));
  }
  expect_within(dg_cpu, dg, tol_g, "swiglu dgate");
  expect_within(du_cpu, du, tol_u, "swiglu dup");
}

TEST(OpsGpu, AdamwEqualsCpu) {
  MOERL_REQUIRE_GPU();
  const int64_t n = 100003;
  const auto g = normals(n, 90, 0, 0, 0.01f);
  auto w = normals(n, 91), m = normals(n, 92, 0, 0, 0.001f), v = normals(n, 93, 0, 0, 1e-3f);
  for (auto& x : v) x = x * x;
  auto w_cpu = w, m_cpu = m, v_cpu = v;
  const double bc1 = 1.0 - std::pow(0.9, 7), bc2 = 1.0 - std::pow(0.95, 7);
  for (int step = 0; step < 2; ++step) {
    cuda::adamw_update(w.data(), m.data(), v.data(), g.data(), n, 0.7f, 0.9f, 0.95f, bc1, bc2,
                       3e-4f, 3e-5f, 1e-8f);
    cpu::adamw_update(w_cpu.data(), m_cpu.data(), v_cpu.data(), g.data(), n, 0.7f, 0.9f, 0.95f,
                      bc1, bc2, 3e-4f, 3e-5f, 1e-8f);
  }
  expect_bits(w_cpu, w, "adamw w");
  expect_bits(m_cpu, m, "adamw m");
  expect_bits(v_cpu, v, "adamw v");
}

// ---- top-k -------------------------------------------------------------------------------------
TEST(OpsGpu, TopkEqualsCpuInEveryTieRule) {
  MOERL_REQUIRE_GPU();
  for (TieBreak tie : {TieBreak::lowest, TieBreak::highest, TieBreak::random})
    for (int E : {5, 64, 257})
      for (int K : {1, 2, 8, E}) {
        if (K > E) continue;
        const int N = 133;
        for (bool ties : {false, true}) {
          auto s = normals(static_cast<size_t>(N) * E, 100, E, K, 2.0f);
          if (ties) {  // a 1/4 grid: many exact ties, −0/+0, NaN and ±inf
            for (size_t i = 0; i < s.size(); ++i) {
              s[i] = std::round(s[i] * 4.0f) / 4.0f;
              if (i % 37 == 5) s[i] = std::numeric_limits<float>::quiet_NaN();
              if (i % 53 == 7) s[i] = -std::numeric_limits<float>::infinity();
              if (i % 71 == 9) s[i] = std::numeric_limits<float>::infinity();
              if (i % 29 == 3) s[i] = -0.0f;
            }
          }
          const NoiseKey key{11, 2, 6, 1000};
          std::vector<int32_t> ids(static_cast<size_t>(N) * K, -7), ids_cpu(ids.size(), -8);
          std::vector<float> vals(ids.size()), vals_cpu(ids.size());
          cuda::topk_forward(ids.data(), vals.data(), s.data(), N, E, K, tie, key);
          cpu::topk_forward(ids_cpu.data(), vals_cpu.data(), s.data(), N, E, K, tie, key);
          const auto what = label("E=%d K=%d tie=%s ties=%d", E, K, tie_break_name(tie), int(ties));
          ASSERT_EQ(ids_cpu, ids) << what;
          expect_bits(vals_cpu, vals, what);
        }
      }
}

}  // namespace
}  // namespace moerl
