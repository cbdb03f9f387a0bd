// The Backend seam (kernels/backend.h): every op the model, generation and the optimizer run goes
// through the model's backend — checked with a backend that counts calls and forwards to the CPU
// one — and routing a model through it changes no bit. This is what makes run.backend = cuda
// run the whole step on the GPU: an op that bypassed the seam would show up here as uncounted.
#include <gtest/gtest.h>

#include <array>
#include <set>

#include "kernels/backend.h"
#include "model_fixture.h"

namespace moerl {
namespace {

// Forwards every op to the CPU backend and counts the calls per Op.
class CountingBackend final : public Backend {
 public:
  mutable std::array<int, kOpCount> calls{};
  const Backend& cpu = cpu_backend();
  void hit(Op op) const { ++calls[static_cast<size_t>(op)]; }

  BackendKind kind() const override { return BackendKind::cpu; }
  std::string describe() const override { return "counting " + cpu.describe(); }
#define FWD(name, params, args) \
  void name params const override { hit(Op::name); cpu.name args; }
  FWD(embedding_forward, (float* o, const int32_t* t, const float* w, int N, int D), (o, t, w, N, D))
  FWD(embedding_backward, (float* dw, const float* d, const int32_t* t, int N, int D), (dw, d, t, N, D))
  FWD(rmsnorm_forward, (float* o, float* r, const float* x, const float* w, int N, int D, float e,
                        const ReduceCtx& c), (o, r, x, w, N, D, e, c))
  FWD(rmsnorm_backward, (float* dx, float* dw, const float* d, const float* x, const float* w,
                         const float* r, int N, int D), (dx, dw, d, x, w, r, N, D))
  FWD(rope_forward, (float* x, const int32_t* p, int N, int H, int Dh, float th), (x, p, N, H, Dh, th))
  FWD(rope_backward, (float* x, const int32_t* p, int N, int H, int Dh, float th), (x, p, N, H, Dh, th))
  FWD(attention_forward, (float* o, float* a, const float* q, const float* k, const float* v, int B,
                          int T, int H, int Dh, const ReduceCtx& c), (o, a, q, k, v, B, T, H, Dh, c))
  FWD(attention_backward, (float* dq, float* dk, float* dv, const float* d, const float* a,
                           const float* q, const float* k, const float* v, int B, int T, int H,
                           int Dh), (dq, dk, dv, d, a, q, k, v, B, T, H, Dh))
  FWD(attention_decode, (float* o, const float* q, const float* kc, const float* vc,
                         const int32_t* len, int B, int Tm, int H, int Dh, const ReduceCtx& c),
      (o, q, kc, vc, len, B, Tm, H, Dh, c))
  FWD(softmax_forward, (float* o, const float* x, int N, int C), (o, x, N, C))
  FWD(log_softmax_forward, (float* o, const float* x, int N, int C), (o, x, N, C))
  FWD(softmax_backward, (float* dx, const float* dy, const float* y, int N, int C), (dx, dy, y, N, C))
  FWD(swiglu_forward, (float* o, const float* g, const float* u, int N, int F), (o, g, u, N, F))
  FWD(swiglu_backward, (float* dg, float* du, const float* d, const float* g, const float* u, int N,
                        int F), (dg, du, d, g, u, N, F))
  FWD(topk_forward, (int32_t* i, float* v, const float* s, int N, int E, int K, TieBreak t,
                     const NoiseKey& k), (i, v, s, N, E, K, t, k))
  FWD(logprob_forward, (float* lp, const float* z, const int32_t* t, int N, int V), (lp, z, t, N, V))
  FWD(logprob_backward, (float* dz, const float* d, const float* z, const int32_t* t, int N, int V),
      (dz, d, z, t, N, V))
  FWD(adamw_update, (float* w, float* m, float* v, const float* g, int64_t n, float c, float b1,
                     float b2, double bc1, double bc2, float lr, float dec, float eps),
      (w, m, v, g, n, c, b1, b2, bc1, bc2, lr, dec, eps))
  FWD(linear_pack_weight, (PackedWeight* o, const float* w, int N, int K, const LinearNumerics& nm),
      (o, w, N, K, nm))
  FWD(linear_forward, (float* o, const float* x, const PackedWeight& w, int M,
                       const LinearNumerics& nm), (o, x, w, M, nm))
  FWD(linear_forward_grouped, (float* o, const float* x, const PackedWeight* w, const int* off,
                               int E, const LinearNumerics& nm), (o, x, w, off, E, nm))
  FWD(linear_backward, (float* dx, float* dw, const float* d, const float* x, const float* w, int M,
                        int N, int K), (dx, dw, d, x, w, M, N, K))
  FWD(linear_backward_grouped, (float* dx, float* dw, const float* d, const float* x,
                                const float* w, const int* off, int E, int N, int K),
      (dx, dw, d, x, w, off, E, N, K))
#undef FWD
};

// One training step and 2 decode steps on `backend` (null: the model's default).
test::StepOutputs run_step(const ModelConfig& cfg, const Backend* backend) {
  Model m(cfg);
  params_init(&m.params(), cfg, 11);
  if (backend) m.set_backend(*backend);
  const int B = 3, T = 9;
  return test::forward_backward_generate(m, test::builtin("bf16-train"),
                                         test::random_tokens(B * T, cfg.vocab_size, 12), B, T, 4, 2);
}

TEST(Backend, OpNamesAndParsing) {
  std::set<std::string> names;
  for (int i = 0; i < kOpCount; ++i) names.insert(op_name(static_cast<Op>(i)));
  EXPECT_EQ(static_cast<int>(names.size()), kOpCount) << "op names must be distinct";
  BackendKind k = BackendKind::cuda;
  EXPECT_TRUE(backend_parse("cpu", &k));
  EXPECT_EQ(k, BackendKind::cpu);
  EXPECT_TRUE(backend_parse("cuda", &k));
  EXPECT_EQ(k, BackendKind::cuda);
  EXPECT_FALSE(backend_parse("gpu", &k));
  EXPECT_STREQ(backend_name(BackendKind::cuda), "cuda");
  EXPECT_EQ(cpu_backend().kind(), BackendKind::cpu);
}

TEST(Backend, EveryModelOpGoesThroughTheBackendAndChangesNoBit) {
  for (bool moe : {true, false}) {
    ModelConfig cfg = test::tiny_moe_config();
    if (!moe) cfg.n_experts = 0;
    const test::StepOutputs plain = run_step(cfg, nullptr);
    CountingBackend counting;
    const test::StepOutputs seen = run_step(cfg, &counting);
    EXPECT_EQ(plain.logp, seen.logp) << "moe=" << moe;
    EXPECT_EQ(plain.grads, seen.grads);
    EXPECT_EQ(plain.gen_logits, seen.gen_logits);
    // What a step without the optimizer must use; the MoE model adds the router and experts.
    std::vector<Op> used = {Op::embedding_forward, Op::embedding_backward, Op::rmsnorm_forward,
                            Op::rmsnorm_backward, Op::rope_forward, Op::rope_backward,
                            Op::attention_forward, Op::attention_backward, Op::attention_decode,
                            Op::swiglu_forward, Op::swiglu_backward, Op::logprob_forward,
                            Op::logprob_backward, Op::linear_pack_weight, Op::linear_forward,
                            Op::linear_backward};
    if (moe)
      for (Op op : {Op::softmax_forward, Op::topk_forward, Op::linear_forward_grouped,
                    Op::linear_backward_grouped})
        used.push_back(op);
    for (Op op : used)
      EXPECT_GT(counting.calls[static_cast<size_t>(op)], 0) << op_name(op) << " moe=" << moe;
  }
}

}  // namespace
}  // namespace moerl
