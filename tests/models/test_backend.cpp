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
#define MOERL_OP(name, params, args) \
  void name params const override { hit(Op::name); cpu.name args; }
#include "kernels/ops.def"
};

// The ops of the list a model step does not call: the log-softmax of the sampler and of the
// rollout/train mismatch measure, the sampler's draw and record, the mismatch's reductions
// (sim/rl/), the policy loss (sim/rl/trainer.cpp), the optimizer's norm and update
// (sim/step/optimizer.cpp), the expert GEMMs' offsets drawn where the ids are (a decode step on a
// device backend: models/dispatcher.h; this backend's memory is the host's), and the softmax backward
// no caller needs. A new op for sim/ goes here (docs/architecture.md, "Adding an op").
const std::set<Op> kNotInAModelStep = {Op::log_softmax_forward, Op::softmax_backward, Op::adamw_update,
                                       Op::sum_squares,         Op::sample_rows,      Op::scatter_rows,
                                       Op::kl_rows,             Op::logit_stats_rows, Op::policy_loss_rows,
                                       Op::moe_offsets};
// The ops only the MoE layer calls: the router's softmax and top-k, the experts' grouped GEMMs
// (their gate, up and SwiGLU as one op, forward and backward), the dispatch plan and the combine
// (its row gather serves decode compaction too).
const std::set<Op> kMoeOnly = {Op::softmax_forward, Op::topk_forward, Op::linear_forward_grouped,
                               Op::linear_backward_grouped, Op::linear_swiglu_grouped,
                               Op::linear_backward_swiglu_grouped, Op::moe_plan, Op::moe_combine_order,
                               Op::moe_combine, Op::moe_combine_backward, Op::moe_scatter_add,
                               Op::router_gate_forward, Op::router_gate_backward, Op::sigmoid_forward,
                               Op::add_bias_rows};
// The ops only a dense MLP calls (the dense twin's): the SwiGLU on its own (the MoE layer's
// experts, its shared one included, run it inside the grouped ops above).
const std::set<Op> kDenseOnly = {Op::swiglu_forward, Op::swiglu_backward};
// The router's options: sigmoid scoring and the selection bias (and softmax scoring without them).
const std::set<Op> kSigmoidBiasOnly = {Op::sigmoid_forward, Op::add_bias_rows};

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
  for (int variant : {0, 1, 2}) {  // the MoE model, the dense one, the MoE with a sigmoid router and a bias
    const bool moe = variant != 1, sigmoid = variant == 2;
    ModelConfig cfg = test::tiny_moe_config();
    if (!moe) cfg.n_experts = 0;
    if (sigmoid) {
      cfg.scoring = Scoring::sigmoid;
      cfg.expert_bias = true;
    }
    const test::StepOutputs plain = run_step(cfg, nullptr);
    CountingBackend counting;
    const test::StepOutputs seen = run_step(cfg, &counting);
    EXPECT_EQ(plain.logp, seen.logp) << "moe=" << moe;
    EXPECT_EQ(plain.grads, seen.grads);
    EXPECT_EQ(plain.gen_logits, seen.gen_logits);
    // What a step without the optimizer must use: every op of the list (kernels/ops.def) but
    // those outside the model and, for the dense model, those of the router and the experts.
    for (int i = 0; i < kOpCount; ++i) {
      const Op op = static_cast<Op>(i);
      const bool router_option = sigmoid ? op != Op::softmax_forward : !kSigmoidBiasOnly.count(op);
      const bool used = !kNotInAModelStep.count(op) && (moe || !kMoeOnly.count(op)) &&
                        (!moe || !kDenseOnly.count(op)) && router_option;
      if (used) EXPECT_GT(counting.calls[static_cast<size_t>(op)], 0) << op_name(op) << " moe=" << moe;
      else EXPECT_EQ(counting.calls[static_cast<size_t>(op)], 0) << op_name(op) << " moe=" << moe;
    }
  }
}

}  // namespace
}  // namespace moerl
