// backend.cpp — the CPU backend: each op forwards to its kernels/cpu or kernels/linear function.
#include "kernels/backend.h"


#include <tbb/info.h>

#include "kernels/cpu/ops.h"

namespace moerl {

const char* backend_name(BackendKind k) { return k == BackendKind::cuda ? "cuda" : "cpu"; }

bool backend_parse(std::string_view s, BackendKind* out) {
  if (s == "cpu") { *out = BackendKind::cpu; return true; }
  if (s == "cuda") { *out = BackendKind::cuda; return true; }
  return false;
}

namespace {
constexpr const char* kOpNames[] = {
    "embedding_forward", "embedding_backward", "rmsnorm_forward", "rmsnorm_backward",
    "rope_forward", "rope_backward", "attention_forward", "attention_backward",
    "attention_decode", "softmax_forward", "log_softmax_forward", "softmax_backward",
    "swiglu_forward", "swiglu_backward", "topk_forward", "logprob_forward", "logprob_backward",
    "adamw_update", "linear_pack_weight", "linear_forward", "linear_forward_grouped",
    "linear_backward", "linear_backward_grouped"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == kOpCount,
              "every Op needs its name in kOpNames");

class CpuBackend final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string describe() const override {
    return "cpu (" + std::to_string(tbb::info::default_concurrency()) + " threads, " +
           blas_kernel_name() + ")";
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* table, int N,
                         int D) const override {
    cpu::embedding_forward(out, tokens, table, N, D);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N,
                          int D) const override {
    cpu::embedding_backward(dtable, dout, tokens, N, D);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                       int D, float eps, const ReduceCtx& ctx) const override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, N, D, eps, ctx);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int D) const override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, D);
  }
  void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh,
                    float theta) const override {
    cpu::rope_forward(x, pos, N, H, Dh, theta);
  }
  void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh,
                     float theta) const override {
    cpu::rope_backward(dx, pos, N, H, Dh, theta);
  }
  void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                         int B, int T, int H, int Dh, const ReduceCtx& ctx) const override {
    cpu::attention_forward(out, att, q, k, v, B, T, H, Dh, ctx);
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                          const float* q, const float* k, const float* v, int B, int T, int H,
                          int Dh) const override {
    cpu::attention_backward(dq, dk, dv, dout, att, q, k, v, B, T, H, Dh);
  }
  void attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                        const int32_t* len, int B, int Tmax, int H, int Dh,
                        const ReduceCtx& ctx) const override {
    cpu::attention_decode(out, q, kcache, vcache, len, B, Tmax, H, Dh, ctx);
  }
  void softmax_forward(float* out, const float* x, int N, int C) const override {
    cpu::softmax_forward(out, x, N, C);
  }
  void log_softmax_forward(float* out, const float* x, int N, int C) const override {
    cpu::log_softmax_forward(out, x, N, C);
  }
  void softmax_backward(float* dx, const float* dy, const float* y, int N, int C) const override {
    cpu::softmax_backward(dx, dy, y, N, C);
  }
  void swiglu_forward(float* out, const float* gate, const float* up, int N,
                      int F) const override {
    cpu::swiglu_forward(out, gate, up, N, F);
  }
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int N, int F) const override {
    cpu::swiglu_backward(dgate, dup, dout, gate, up, N, F);
  }
  void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                    TieBreak tie, const NoiseKey& key) const override {
    cpu::topk_forward(ids, vals, scores, N, E, K, tie, key);
  }
  void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N,
                       int V) const override {
    cpu::logprob_forward(logp, logits, targets, N, V);
  }
  void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                        const int32_t* targets, int N, int V) const override {
    cpu::logprob_backward(dlogits, dlogp, logits, targets, N, V);
  }
  void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip,
                    float beta1, float beta2, double bc1, double bc2, float lr, float decay,
                    float eps) const override {
    cpu::adamw_update(w, m, v, g, n, clip, beta1, beta2, bc1, bc2, lr, decay, eps);
  }
  void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                          const LinearNumerics& nm) const override {
    moerl::linear_pack_weight(out, weight, N, K, nm);
  }
  void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                      const LinearNumerics& nm) const override {
    moerl::linear_forward(out, inp, w, M, nm);
  }
  void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w,
                              const int* offsets, int E, const LinearNumerics& nm) const override {
    moerl::linear_forward_grouped(out, inp, w, offsets, E, nm);
  }
  void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, int M, int N, int K) const override {
    moerl::linear_backward(dinp, dweight, dout, inp, weight, M, N, K);
  }
  void linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const int* offsets, int E, int N,
                               int K) const override {
    moerl::linear_backward_grouped(dinp, dweight, dout, inp, weight, offsets, E, N, K);
  }
};
}  // namespace

const char* op_name(Op op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kOpCount ? kOpNames[i] : "?";
}

const Backend& cpu_backend() {
  static const CpuBackend b;
  return b;
}

}  // namespace moerl
