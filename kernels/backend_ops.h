// backend_ops.h — OpsBackend<Ops>: the Backend whose every op calls Ops::op, for backends whose
// ops are free functions with the Backend's signatures (the CPU's kernels/cpu, the CUDA backend's
// kernels/cuda). Ops names kind, describe() and one function pointer per op:
//   struct CpuOps { static constexpr BackendKind kind = BackendKind::cpu;
//                   static std::string describe();
//                   static constexpr auto embedding_forward = &cpu::embedding_forward; ... };
// A missing or mistyped op in Ops fails to compile here.
#pragma once

#include <string>

#include "kernels/backend.h"

namespace moerl {

template <class Ops>
class OpsBackend final : public Backend {
 public:
  BackendKind kind() const override { return Ops::kind; }
  std::string describe() const override { return Ops::describe(); }
  void embedding_forward(float* out, const int32_t* tokens, const float* table, int N,
                         int D) const override {
    Ops::embedding_forward(out, tokens, table, N, D);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N,
                          int D) const override {
    Ops::embedding_backward(dtable, dout, tokens, N, D);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                       int D, float eps, const ReduceCtx& ctx) const override {
    Ops::rmsnorm_forward(out, rstd, inp, weight, N, D, eps, ctx);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int D) const override {
    Ops::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, D);
  }
  void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh,
                    float theta) const override {
    Ops::rope_forward(x, pos, N, H, Dh, theta);
  }
  void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh,
                     float theta) const override {
    Ops::rope_backward(dx, pos, N, H, Dh, theta);
  }
  void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                         int B, int T, int H, int Dh, const ReduceCtx& ctx) const override {
    Ops::attention_forward(out, att, q, k, v, B, T, H, Dh, ctx);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                          const float* q, const float* k, const float* v, int B, int T, int H,
                          int Dh) const override {
    Ops::attention_backward(dq, dk, dv, dout, att, q, k, v, B, T, H, Dh);
  }
  void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                        const int32_t* len, int B, int Tmax, int H, int Dh,
                        const ReduceCtx& ctx) const override {
    Ops::attention_decode(out, q, kcache, vcache, len, B, Tmax, H, Dh, ctx);
  }
  void softmax_forward(float* out, const float* x, int N, int C) const override {
    Ops::softmax_forward(out, x, N, C);
  }
  void log_softmax_forward(float* out, const float* x, int N, int C) const override {
    Ops::log_softmax_forward(out, x, N, C);
  }
  void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) const override {
    Ops::softmax_backward(dx, dy, y, N, C);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int N,
                      int F) const override {
    Ops::swiglu_forward(out, gate, up, N, F);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int N, int F) const override {
    Ops::swiglu_backward(dgate, dup, dout, gate, up, N, F);
  }
  void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                    TieBreak tie, const NoiseKey& key) const override {
    Ops::topk_forward(ids, vals, scores, N, E, K, tie, key);
  }
  void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N,
                       int V) const override {
    Ops::logprob_forward(logp, logits, targets, N, V);
  }
  void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                        const int32_t* targets, int N, int V) const override {
    Ops::logprob_backward(dlogits, dlogp, logits, targets, N, V);
  }
  void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip,
                    float beta1, float beta2, double bc1, double bc2, float lr, float decay,
                    float eps) const override {
    Ops::adamw_update(w, m, v, g, n, clip, beta1, beta2, bc1, bc2, lr, decay, eps);
  }
  void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                          const LinearNumerics& nm) const override {
    Ops::linear_pack_weight(out, weight, N, K, nm);
  }
  void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                      const LinearNumerics& nm) const override {
    Ops::linear_forward(out, inp, w, M, nm);
  }
  void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w,
                              const int* offsets, int E, const LinearNumerics& nm) const override {
    Ops::linear_forward_grouped(out, inp, w, offsets, E, nm);
  }
  void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, int M, int N, int K) const override {
    Ops::linear_backward(dinp, dweight, dout, inp, weight, M, N, K);
  }
  void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const int* offsets, int E, int N,
                               int K) const override {
    Ops::linear_backward_grouped(dinp, dweight, dout, inp, weight, offsets, E, N, K);
  }
};

}  // namespace moerl
