// test_hd_elementwise.cpp — the CUDA backend's element-wise math (kernels/cuda/hd/rope.h,
// swiglu.h, adamw.h) run on the CPU. These formulas round at the same places as the references and
// call the same libm on the host, so here they must give the references' bits exactly; on a GPU
// only the device's expf (SwiGLU) and double pow/cos/sin (RoPE) may differ (tests/gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../kernels/test_ops_util.h"
#include "hd_compose.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/adamw.h"
#include "kernels/cuda/hd/swiglu.h"
#include "kernels/ref/ops.h"

namespace moerl {
namespace {

using namespace moerl::cuda;
using test_ops::expect_bits;
using test_ops::expect_close;
using test_ops::kEps;
using test_ops::label;
using test_ops::normals;

TEST(HdElementwise, RopeEqualsRefBothWays) {
  for (int Dh : {2, 7, 16, 64}) {
    const int N = 9, H = 3;
    std::vector<int32_t> pos(N);
    for (int n = 0; n < N; ++n) pos[n] = n * 977 % 5000;  // large positions: large angles
    const auto x0 = normals(static_cast<size_t>(N) * H * Dh, 70, Dh);
    auto x = x0, x_ref = x0;
    hd_compose::rope(x.data(), pos.data(), N, H, Dh, 10000.0f, 1.0f);
    ref::rope_forward(x_ref.data(), pos.data(), N, H, Dh, 10000.0f);
    expect_bits(x_ref, x, label("rope forward Dh=%d", Dh));
    hd_compose::rope(x.data(), pos.data(), N, H, Dh, 10000.0f, -1.0f);
    ref::rope_backward(x_ref.data(), pos.data(), N, H, Dh, 10000.0f);
    expect_bits(x_ref, x, label("rope backward Dh=%d", Dh));
    // backward is the forward's transpose = inverse: back to x0 within a few roundings
    // (|c|, |s| ≤ 1, two products and a sum per pass).
    expect_close(x0, x, 8 * kEps * 4.0, 0.0, label("rope round trip Dh=%d", Dh));
  }
}

TEST(HdElementwise, SwigluEqualsRef) {
  const int N = 3, F = 1001;
  auto gate = normals(static_cast<size_t>(N) * F, 80, 0, 0, 6.0f);
  gate[0] = 100.0f;  // exp underflow / overflow paths of σ
  gate[1] = -100.0f;
  gate[2] = 0.0f;
  const auto up = normals(gate.size(), 81), dout = normals(gate.size(), 82);
  std::vector<float> out(gate.size()), out_ref(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = hd_swiglu_forward(gate[i], up[i]);
  ref::swiglu_forward(out_ref.data(), gate.data(), up.data(), N, F);
  expect_bits(out_ref, out, "swiglu forward");
  auto dg = normals(gate.size(), 83), du = normals(gate.size(), 84);  // '+=' onto these
  auto dg_ref = dg, du_ref = du;
  for (size_t i = 0; i < gate.size(); ++i) hd_swiglu_backward(&dg[i], &du[i], dout[i], gate[i], up[i]);
  ref::swiglu_backward(dg_ref.data(), du_ref.data(), dout.data(), gate.data(), up.data(), N, F);
  expect_bits(dg_ref, dg, "swiglu dgate");
  expect_bits(du_ref, du, "swiglu dup");
}

TEST(HdElementwise, AdamwEqualsCpuAndRef) {
  const int64_t n = 1037;
  const auto g = normals(n, 90, 0, 0, 0.01f);
  auto w = normals(n, 91), m = normals(n, 92, 0, 0, 0.001f), v = normals(n, 93, 0, 0, 1e-3f);
  for (auto& x : v) x = x * x;
  auto w_cpu = w, m_cpu = m, v_cpu = v, w_ref = w, m_ref = m, v_ref = v;
  const float clip = 0.7f, b1 = 0.9f, b2 = 0.95f, lr = 3e-4f, decay = 3e-5f, eps = 1e-8f;
  const double bc1 = 1.0 - std::pow(0.9, 7), bc2 = 1.0 - std::pow(0.95, 7);
  for (int64_t j = 0; j < n; ++j)
    hd_adamw_element(&w[j], &m[j], &v[j], g[j], clip, b1, b2, bc1, bc2, lr, decay, eps);
  cpu::adamw_update(w_cpu.data(), m_cpu.data(), v_cpu.data(), g.data(), n, clip, b1, b2, bc1, bc2,
                    lr, decay, eps);
  ref::adamw_update(w_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, clip, b1, b2, bc1, bc2,
                    lr, decay, eps);
  expect_bits(w_cpu, w, "adamw w vs cpu");
  expect_bits(m_cpu, m, "adamw m vs cpu");
  expect_bits(v_cpu, v, "adamw v vs cpu");
  expect_bits(w_ref, w, "adamw w vs ref");
}

}  // namespace
}  // namespace moerl
