// The whole model on the CUDA backend against the CPU backend on the same checkpoint: training
// forward, backward and KV-cache generation. Under fp32-ref both are FP32 throughout (cuBLAS
// pedantic, no TF32) and differ only in summation order, so log-probs and gradients agree to
// FP32 rounding and routing is identical but for near-ties; under bf16-train and fp8-rollout the
// GPU's real tensor-core arithmetic meets the emulation: log-probs agree within the format's
// rounding and the flip rate is of the order the emulation's own audits show.
// Deterministic mode on the GPU (no atomics): two runs are bit-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../models/model_fixture.h"
#include "gpu_test.h"
#include "kernels/cuda/backend_cuda.h"
#include "models/params.h"

namespace moerl {
namespace {

using Pass = test::StepOutputs;

// The step and 4 decode steps of a 64-wide model on `be`.
Pass run_pass(const Backend& be, const NumericsProfile& p, bool moe) {
  ModelConfig cfg = test::tiny_moe_config();
  cfg.d_model = 64; cfg.n_heads = 4; cfg.d_ff = 96; cfg.vocab_size = 37; cfg.max_seq_len = 24;
  cfg.init_std = 0.1f;
  if (!moe) cfg.n_experts = 0;
  Model m(cfg);
  params_init(&m.params(), cfg, 21);
  m.set_backend(be);
  const int B = 4, T = 20;
  return test::forward_backward_generate(m, p, test::random_tokens(B * T, cfg.vocab_size, 22), B, T,
                                         8, 4);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}
double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}
double flip_rate(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return a.empty() ? 0.0 : static_cast<double>(d) / static_cast<double>(a.size());
}

TEST(ModelGpu, Fp32RefMatchesTheCpuBackend) {
  MOERL_REQUIRE_GPU();
  for (bool moe : {true, false}) {
    const Pass c = run_pass(cpu_backend(), test::builtin("fp32-ref"), moe);
    const Pass g = run_pass(cuda::cuda_backend(), test::builtin("fp32-ref"), moe);
    // FP32 in both; only summation orders differ: K·eps(fp32)-sized relative errors, a few
    // layers deep. 1e-4 absolute on log-probs of magnitude ~4 leaves 10x room.
    EXPECT_LT(max_abs_diff(c.logp, g.logp), 1e-4) << "moe=" << moe;
    EXPECT_LT(max_abs_diff(c.gen_logits, g.gen_logits), 1e-4);
    EXPECT_LT(max_abs_diff(c.grads, g.grads), 1e-4 * std::max(1.0, max_abs(c.grads)));
    // A flip needs two router logits within ~1e-6 of each other: none expected at this size.
    EXPECT_LE(flip_rate(c.ids, g.ids), 0.005);
  }
}

TEST(ModelGpu, LowPrecisionProfilesStayCloseToTheEmulation) {
  MOERL_REQUIRE_GPU();
  for (const char* name : {"bf16-train", "fp8-rollout"}) {
    const NumericsProfile p = test::builtin(name);
    const Pass c = run_pass(cpu_backend(), p, true);
    const Pass g = run_pass(cuda::cuda_backend(), p, true);
    // Both round operands to the same format with the same scales; the GPU accumulates in its
    // tensor cores, the emulation in FP32 (bf16) or its 13-bit model (fp8). Where routing agrees
    // the gap is of the format's rounding (bf16 2^-8, fp8 2^-4 relative per operand); a flipped
    // token can move by nats (the emulated fp8-vs-bf16 audit shows up to ~5), so the bounds are on
    // the mean and on the share of large gaps, not on the maximum.
    const bool fp8 = std::string(name) == "fp8-rollout";
    double sum = 0.0;
    int64_t large = 0;
    for (size_t i = 0; i < c.logp.size(); ++i) {
      const double d = std::fabs(static_cast<double>(c.logp[i]) - g.logp[i]);
      sum += d;
      large += d > 0.5;
    }
    const double n = static_cast<double>(c.logp.size());
    EXPECT_LT(sum / n, fp8 ? 0.05 : 0.01) << name << ": mean |dlogp|";
    EXPECT_LE(static_cast<double>(large) / n, 0.05) << name << ": share of |dlogp| > 0.5";
    EXPECT_LT(flip_rate(c.ids, g.ids), 0.2) << name;
    for (float x : g.grads) ASSERT_TRUE(std::isfinite(x)) << name;
  }
}

TEST(ModelGpu, DeterministicRunToRun) {
  MOERL_REQUIRE_GPU();
  for (const char* name : {"fp32-ref", "bf16-train", "fp8-rollout"}) {
    const Pass a = run_pass(cuda::cuda_backend(), test::builtin(name), true);
    const Pass b = run_pass(cuda::cuda_backend(), test::builtin(name), true);
    EXPECT_EQ(a.logp, b.logp) << name;
    EXPECT_EQ(a.grads, b.grads) << name;
    EXPECT_EQ(a.gen_logits, b.gen_logits) << name;
    EXPECT_EQ(a.ids, b.ids) << name;
  }
}

}  // namespace
}  // namespace moerl
