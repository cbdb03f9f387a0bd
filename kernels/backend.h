// backend.h — where the model's ops run. A Backend is the set of ops the model calls (every kernel
// of kernels/cpu/ops.h and every linear-layer entry of kernels/linear.h), behind one interface, so
// the same model, scenario and RL loop run on the CPU or on a GPU, selected at run time
// (`run.backend = cpu | cuda`).
//
// Contract: every op takes and returns HOST pointers and has the semantics, argument order and
// '=' / '+=' conventions of its kernels/cpu counterpart. The CPU backend is those kernels; the
// CUDA backend (kernels/cuda/) uploads the operands, computes on the device with the hardware's
// own arithmetic (cuBLAS/cuBLASLt BF16/FP16/FP8 GEMMs, device reductions) and downloads the
// results — so its numbers are what a GPU really computes, and it is checked against the CPU
// backend per op within each format's tolerance (tests/gpu), not bit for bit.
//
// Adding an op (as in ggml): the Op enum and op_name table below (a static_assert keeps them in
// step), a pure virtual here and its forwarding in backend_ops.h, the function in CpuOps
// (backend.cpp) and CudaOps (cuda/backend_cuda.cpp) — the compiler rejects a backend missing it —
// the counting backend of tests/models/test_backend.cpp, and a case in tests/gpu.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernels/enum_names.h"
#include "kernels/linear.h"
#include "kernels/numerics.h"

namespace moerl {

enum class BackendKind : uint8_t { cpu = 0, cuda };
inline constexpr EnumNames<BackendKind, 2> kBackendNames{{"cpu", "cuda"}};
static_assert(static_cast<int>(BackendKind::cuda) + 1 == kBackendNames.size());
inline const char* backend_name(BackendKind v) { return kBackendNames.name(v); }
inline bool backend_parse(std::string_view s, BackendKind* out) { return kBackendNames.parse(s, out); }

enum class Op : uint8_t {
  embedding_forward, embedding_backward,
  rmsnorm_forward, rmsnorm_backward,
  rope_forward, rope_backward,
  attention_forward, attention_backward, attention_decode,
  softmax_forward, log_softmax_forward, softmax_backward,
  swiglu_forward, swiglu_backward,
  topk_forward,
  logprob_forward, logprob_backward,
  adamw_update,
  linear_pack_weight, linear_forward, linear_forward_grouped, linear_backward,
  linear_backward_grouped,
  count
};
inline constexpr int kOpCount = static_cast<int>(Op::count);
const char* op_name(Op op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // "cpu (2 threads, OpenBLAS ...)" / "cuda: NVIDIA H200 (sm_90, 139 GiB)".
  virtual std::string describe() const = 0;

  virtual void embedding_forward(float* out, const int32_t* tokens, const float* table, int N,
                                 int D) const = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N,
                                  int D) const = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                               int N, int D, float eps, const ReduceCtx& ctx) const = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int N, int D) const = 0;
  virtual void rope_forward(float* x, const int32_t* pos, int N, int H, int Dh,
                            float theta) const = 0;
  virtual void rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh,
                             float theta) const = 0;
  virtual void attention_forward(float* out, float* att, const float* q, const float* k,
                                 const float* v, int B, int T, int H, int Dh,
                                 const ReduceCtx& ctx) const = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                  const float* att, const float* q, const float* k,
                                  const float* v, int B, int T, int H, int Dh) const = 0;
  virtual void attention_decode(float* out, const float* q, const float* kcache,
                                const float* vcache, const int32_t* len, int B, int Tmax, int H,
                                int Dh, const ReduceCtx& ctx) const = 0;
  virtual void softmax_forward(float* out, const float* x, int N, int C) const = 0;
  virtual void log_softmax_forward(float* out, const float* x, int N, int C) const = 0;
  virtual void softmax_backward(float* dx, const float* dy, const float* y, int N,
                                int C) const = 0;
  virtual void swiglu_forward(float* out, const float* gate, const float* up, int N,
                              int F) const = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                               const float* up, int N, int F) const = 0;
  virtual void topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K,
                            TieBreak tie, const NoiseKey& key) const = 0;
  virtual void logprob_forward(float* logp, const float* logits, const int32_t* targets, int N,
                               int V) const = 0;
  virtual void logprob_backward(float* dlogits, const float* dlogp, const float* logits,
                                const int32_t* targets, int N, int V) const = 0;
  virtual void adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float clip,
                            float beta1, float beta2, double bc1, double bc2, float lr,
                            float decay, float eps) const = 0;

  virtual void linear_pack_weight(PackedWeight* out, const float* weight, int N, int K,
                                  const LinearNumerics& nm) const = 0;
  virtual void linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                              const LinearNumerics& nm) const = 0;
  virtual void linear_forward_grouped(float* out, const float* inp, const PackedWeight* w,
                                      const int* offsets, int E,
                                      const LinearNumerics& nm) const = 0;
  virtual void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, int M, int N, int K) const = 0;
  virtual void linear_backward_grouped(float* dinp, float* dweight, const float* dout,
                                       const float* inp, const float* weight, const int* offsets,
                                       int E, int N, int K) const = 0;
};

// The CPU backend (kernels/cpu + kernels/linear.cpp): always available.
const Backend& cpu_backend();
// b, or the CPU backend when b is null (call structs default their backend pointer to null).
inline const Backend& backend_or_cpu(const Backend* b) { return b ? *b : cpu_backend(); }

}  // namespace moerl
