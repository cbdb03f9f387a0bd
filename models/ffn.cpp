// ffn.cpp — see ffn.h.
#include "models/ffn.h"

#include "kernels/precision.h"

namespace moerl {

namespace {
void swiglu_and_round(FfnActs* a, size_t rows, int F, Format fmt, const Backend& be) {
  const int64_t n = static_cast<int64_t>(rows) * F;
  be.round_format(a->g.data(), n, fmt);
  be.round_format(a->u.data(), n, fmt);
  be.swiglu_forward(a->a.data(), a->g.data(), a->u.data(), static_cast<int>(rows), F);
  be.round_format(a->a.data(), n, fmt);
}

void acts_resize(FfnActs* a, size_t n, const Backend& be) {
  a->g.resize(be, n);
  a->u.resize(be, n);
  a->a.resize(be, n);
}
}  // namespace

void ffn_forward(float* y, FfnActs* a, const float* h, const PackedWeight& w_gate,
                 const PackedWeight& w_up, const PackedWeight& w_down, int N, const FfnNumerics& nm,
                 const Backend& be) {
  const int F = w_gate.N, D = w_gate.K;
  const size_t rows = static_cast<size_t>(N);
  acts_resize(a, rows * F, be);
  be.linear_forward(a->g.data(), h, w_gate, N, nm.gate);
  be.linear_forward(a->u.data(), h, w_up, N, nm.up);
  swiglu_and_round(a, rows, F, nm.activations, be);
  be.linear_forward(y, a->a.data(), w_down, N, nm.down);
  be.round_format(y, static_cast<int64_t>(rows) * D, nm.activations);
}

namespace {
// The backward's gradients of a, g, u [rows, F], zeroed ('+=' outputs), in the backend's memory
// (with_da false: only dg and du, the fused op's).
struct FfnGrads {
  FfnGrads(size_t n, const Backend& be, bool with_da = true) {
    for (ActBuffer<float>* b : {&da, &dg, &du}) {
      if (b == &da && !with_da) continue;
      b->resize(be, n);
      be.mem_zero(b->data(), n * sizeof(float));
    }
  }
  ActBuffer<float> da, dg, du;
};

// ffn_backward on rows whose saved activations are g, u, a [N, F].
void ffn_backward_rows(float* dh, float* dw_gate, float* dw_up, float* dw_down, const float* dy,
                       const float* g, const float* u, const float* a, const float* h,
                       const float* w_gate, const float* w_up, const float* w_down, int N, int F,
                       int D, const Backend& be) {
  const size_t n = static_cast<size_t>(N) * F;
  FfnGrads s(n, be);
  be.linear_backward(s.da.data(), dw_down, dy, a, w_down, N, D, F);  // y = a·W_downᵀ
  be.swiglu_backward(s.dg.data(), s.du.data(), s.da.data(), g, u, N, F);
  be.linear_backward(dh, dw_gate, s.dg.data(), h, w_gate, N, F, D);  // g = h·W_gateᵀ
  be.linear_backward(dh, dw_up, s.du.data(), h, w_up, N, F, D);      // u = h·W_upᵀ
}
}  // namespace

void ffn_backward(float* dh, float* dw_gate, float* dw_up, float* dw_down, const float* dy,
                  const FfnActs& a, const float* h, const float* w_gate, const float* w_up,
                  const float* w_down, int N, int F, int D, const Backend& be) {
  ffn_backward_rows(dh, dw_gate, dw_up, dw_down, dy, a.g.data(), a.u.data(), a.a.data(), h, w_gate,
                    w_up, w_down, N, F, D, be);
}

void ffn_backward_chunks(float* dh, const std::vector<float*>& dw_gate,
                         const std::vector<float*>& dw_up, const std::vector<float*>& dw_down,
                         const float* dy, const FfnActs& a, const float* h, const float* w_gate,
                         const float* w_up, const float* w_down, const std::vector<int>& bounds,
                         int F, int D, const Backend& be) {
  for (size_t c = 0; c + 1 < bounds.size(); ++c) {
    const size_t r0 = static_cast<size_t>(bounds[c]);
    ffn_backward_rows(dh + r0 * D, dw_gate[c], dw_up[c], dw_down[c], dy + r0 * D,
                      a.g.data() + r0 * F, a.u.data() + r0 * F, a.a.data() + r0 * F, h + r0 * D,
                      w_gate, w_up, w_down, bounds[c + 1] - bounds[c], F, D, be);
  }
}

void ffn_forward_grouped(float* ye, FfnActs* a, const float* xe, const PackedWeight* w_gate,
                         const PackedWeight* w_up, const PackedWeight* w_down, const int* offsets,
                         int E, int n_rows, const FfnNumerics& nm, const Backend& be) {
  const int F = w_gate[0].N, D = w_gate[0].K;
  const size_t rows = static_cast<size_t>(n_rows);
  acts_resize(a, rows * F, be);
  be.linear_swiglu_grouped(a->a.data(), a->g.data(), a->u.data(), xe, w_gate, w_up, offsets, E, n_rows, nm.gate,
                           nm.up, nm.activations);
  be.linear_forward_grouped(ye, a->a.data(), w_down, offsets, E, nm.down);
  be.round_format(ye, static_cast<int64_t>(rows) * D, nm.activations);
}

void ffn_backward_grouped(float* dxe, float* dw_gate, float* dw_up, float* dw_down,
                          const float* dye, const FfnActs& a, const float* xe,
                          const float* w_gate, const float* w_up, const float* w_down,
                          const int* offsets, int E, int rows, int F, int D, const Backend& be) {
  const size_t n = static_cast<size_t>(rows) * F;
  FfnGrads s(n, be, false);
  be.linear_backward_swiglu_grouped(s.dg.data(), s.du.data(), dw_down, dye, a.a.data(), a.g.data(), a.u.data(),
                                    w_down, offsets, E, rows, D, F);
  be.linear_backward_grouped(dxe, dw_gate, s.dg.data(), xe, w_gate, offsets, E, F, D);
  be.linear_backward_grouped(dxe, dw_up, s.du.data(), xe, w_up, offsets, E, F, D);
}

}  // namespace moerl
