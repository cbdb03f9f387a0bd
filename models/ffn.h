// ffn.h — the SwiGLU feed-forward block y = W_down(silu(W_gate h) ⊙ W_up h): the dense twin's MLP,
// the shared expert, and (grouped over experts) the routed experts' math.
// Forward writes with '='; backward accumulates dh and weight gradients with '+='.
// Every function runs its ops on the Backend given last.
#pragma once

#include <vector>

#include "kernels/backend.h"
#include "kernels/linear.h"
#include "models/workspace.h"

namespace moerl {

struct FfnActs {
  // [rows, F] gate pre-activation, up, silu(g)·u (all as stored), in the backend's memory
  ActBuffer<float> g, u, a;
};

struct FfnNumerics {
  LinearNumerics gate, up, down;
  Format activations = Format::fp32;  // storage format of g, u, a and y
};

// h[N, D] → y[N, D].
void ffn_forward(float* y, FfnActs* acts, const float* h, const PackedWeight& w_gate,
                 const PackedWeight& w_up, const PackedWeight& w_down, int N, const FfnNumerics& nm,
                 const Backend& be);
void ffn_backward(float* dh, float* dw_gate, float* dw_up, float* dw_down, const float* dy,
                  const FfnActs& acts, const float* h, const float* w_gate, const float* w_up,
                  const float* w_down, int N, int F, int D, const Backend& be);

// ffn_backward over row chunks: rows [bounds[c], bounds[c+1]) of the call accumulate their weight
// gradients into dw_*[c] (one chunk {0, N} is ffn_backward itself).
void ffn_backward_chunks(float* dh, const std::vector<float*>& dw_gate,
                         const std::vector<float*>& dw_up, const std::vector<float*>& dw_down,
                         const float* dy, const FfnActs& acts, const float* h, const float* w_gate,
                         const float* w_up, const float* w_down, const std::vector<int>& bounds,
                         int F, int D, const Backend& be);

// Grouped over experts: rows offsets[e]..offsets[e+1] of xe go through expert e; rows =
// offsets[E] (given, so that offsets may lie where the ids are: Backend, linear_forward_grouped).
// Weights per expert are packed separately; raw weights are [E, F, D] / [E, D, F] contiguous.
void ffn_forward_grouped(float* ye, FfnActs* acts, const float* xe, const PackedWeight* w_gate,
                         const PackedWeight* w_up, const PackedWeight* w_down, const int* offsets,
                         int E, int rows, const FfnNumerics& nm, const Backend& be);
void ffn_backward_grouped(float* dxe, float* dw_gate, float* dw_up, float* dw_down,
                          const float* dye, const FfnActs& acts, const float* xe,
                          const float* w_gate, const float* w_up, const float* w_down,
                          const int* offsets, int E, int rows, int F, int D, const Backend& be);

}  // namespace moerl
