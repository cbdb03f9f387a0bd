// test_step_transfers.cpp — what an RL step moves between host and device, phase by phase
// (kernels/transfers.h): a whole step (base evaluation, rollout with its KV cache and
// compaction, π_old, mismatch, two mini-batches of forward, backward and AdamW) runs on
// TestDeviceBackend, the CPU kernels with a device the host cannot touch, against the same step
// on the CPU backend.
//
// The contract asserted here is the part of docs/gpu.md's "Where memory lives" that is resident
// today:
//  * the KV cache never crosses (it lives in device memory for the whole rollout; prefill and
//    decode write their positions into it from the resident keys and values);
//  * the optimizer moments never cross (device-resident from AdamW::set_backend on);
//  * the parameters cross once, up, at the run's first op, and the gradients only down, once per
//    update, for the clip's norm (models/model.h, "resident"; sim/step/optimizer.h, adamw_step);
//  * in the train phase no activation byte crosses, for the MoE model (its router, dispatch,
//    experts and combine run on the device) and the dense twin alike; what crosses are per-token
//    results: per mini-batch the targets' log-probs down and their gradient up, and per MoE layer
//    the router's log-probs at the selected ids down (one copy each);
//  * no activation goes up in any phase (the rollout's and the mismatch measure's log-softmax run
//    where the logits are; only their results come down);
//  * the step changes no bit: the parameters after it equal the CPU backend's.
// What still crosses is counted and printed (the logits a sampler reads, the full-vocabulary
// log-probs of the mismatch measure, indices per op), and the parameters' and gradients' crossings
// are checked to the byte. The CUDA backend counts with the same table (kernels/op_crossings.h); its
// numbers on a GPU come from tests/gpu/device_checks.sh.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/test_device.h"
#include "models/model.h"
#include "rl_fixture.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

RlSetup setup_of(const Scenario& s) {
  RlSetup u;
  u.rl = s.rl;
  u.task = s.task;
  u.optim = s.optim;
  u.rollout = s.profile(s.engines.rollout);
  u.train = s.profile(s.engines.train);
  u.eval = s.profile(s.rl.eval_profile);
  u.seed = s.run.seed;
  u.rl.resolve();
  return u;
}

// A saved array of the trainer's state ("optim/m", "optim/v").
std::vector<float> saved(const RlTrainer& t, const std::string& name) {
  CheckpointExtras ex;
  t.save_state(&ex);
  for (const auto& [n, v] : ex.arrays)
    if (n == name) return v;
  return {};
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

TEST(StepTransfers, TheStateStaysOnTheDevice) {
  for (const char* engines : {"fp32-ref", "fp8-rollout"}) {
    const Scenario s = test::tiny_scenario({std::string("engines.rollout=") + engines});
    const RlSetup setup = setup_of(s);
    TestDeviceBackend dev;  // outlives the model, whose activations live in its memory
    Model cpu(s.model), dev_model(s.model);
    params_init(&cpu.params(), s.model, 5);
    params_init(&dev_model.params(), s.model, 5);
    dev_model.set_backend(dev);
    RlTrainer on_cpu(setup, &cpu), on_dev(setup, &dev_model);
    TransferLog& log = *dev.transfers();
    log.reset();  // the moments' first upload (AdamW::set_backend) is the run's setup, not the step's
    RunResults rc, rd;
    for (int64_t step = 0; step < 2; ++step) {
      on_cpu.step(step, &rc);
      on_dev.step(step, &rd);
    }
    std::printf("%s rollout: crossings of 2 RL steps on the test device\n%s", engines, log.table(true).c_str());

    for (int p = 0; p < kTransferPhases; ++p) {
      const auto ph = static_cast<TransferPhase>(p);
      EXPECT_EQ(log.bytes(ph, CrossKind::kv_cache), 0) << transfer_phase_name(ph);
      EXPECT_EQ(log.bytes(ph, CrossKind::optimizer), 0) << transfer_phase_name(ph);
      // the sampler's and the mismatch measure's log-softmax run where the logits are: no
      // activation goes up, in any phase
      EXPECT_EQ(log.bytes(ph, CrossKind::activations, CrossDir::up), 0) << transfer_phase_name(ph);
    }
    // Every phase of the step was counted under its name.
    for (TransferPhase ph : {TransferPhase::eval, TransferPhase::rollout, TransferPhase::old_logprobs,
                             TransferPhase::train, TransferPhase::optimizer})
      EXPECT_GT(log.bytes(ph), 0) << transfer_phase_name(ph);
    // The parameters: uploaded once, by the run's first op (the base evaluation), never again and
    // never back during the steps. The gradients: never up; down once per update, for the clip's
    // norm (the serial sum's bits on the host). AdamW moves nothing else.
    const int64_t n = cpu.params().size() * static_cast<int64_t>(sizeof(float));
    const int64_t updates = 2 * s.rl.minibatches;
    int64_t weights_up = 0, weights_down = 0, grads_up = 0, grads_down = 0;
    for (int p = 0; p < kTransferPhases; ++p) {
      const auto ph = static_cast<TransferPhase>(p);
      weights_up += log.bytes(ph, CrossKind::weights, CrossDir::up);
      weights_down += log.bytes(ph, CrossKind::weights, CrossDir::down);
      grads_up += log.bytes(ph, CrossKind::grads, CrossDir::up);
      grads_down += log.bytes(ph, CrossKind::grads, CrossDir::down);
    }
    EXPECT_EQ(log.bytes(TransferPhase::eval, CrossKind::weights, CrossDir::up), n);
    EXPECT_EQ(log.copies(TransferPhase::eval, CrossKind::weights, CrossDir::up), 1);
    EXPECT_EQ(weights_up, n);
    EXPECT_EQ(weights_down, 0);
    EXPECT_EQ(grads_up, 0);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer, CrossKind::grads, CrossDir::down), updates * n);
    EXPECT_EQ(log.copies(TransferPhase::optimizer, CrossKind::grads, CrossDir::down), updates);
    EXPECT_EQ(grads_down, updates * n);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer, CrossKind::activations), 0);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer), updates * n);
    // The train phase: no activation crosses; per mini-batch one copy of the log-probs down and of
    // their gradient up, and one copy of each MoE layer's router log-probs down.
    EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::activations), 0);
    EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::up), updates);
    EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), updates * (1 + s.model.n_layers));
    // The parameters read back (a checkpoint, the end of the run): one download, the CPU run's bits.
    log.reset();
    expect_same_bits(cpu.params().data(), dev_model.params().data(), "parameters after 2 steps");
    EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::weights, CrossDir::down), n);
    EXPECT_EQ(log.total(), n);
    // The moments can still be read (a checkpoint): downloaded, with the CPU run's bits.
    log.reset();
    expect_same_bits(saved(on_cpu, "optim/m"), saved(on_dev, "optim/m"), "first moments");
    expect_same_bits(saved(on_cpu, "optim/v"), saved(on_dev, "optim/v"), "second moments");
    // two save_state calls on the device run, each downloading both moments
    EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::optimizer, CrossDir::down), 4 * n);
    EXPECT_EQ(log.total(), 4 * n);
  }
}

// The dense twin's step. Its activations stay on the device from the embedding to the logits: in
// the train phase no activation crosses, and exactly one per-token copy crosses each way per
// mini-batch forward and backward — the targets' log-probs down (rows × 4 bytes), their gradients
// up (the same rows) — and the bits are the CPU's.
TEST(StepTransfers, ADenseTrainPhaseMovesOnlyTheLogProbs) {
  const Scenario s = test::tiny_scenario({"model.n_experts=0"});
  const RlSetup setup = setup_of(s);
  TestDeviceBackend dev;
  Model cpu(s.model), dev_model(s.model);
  params_init(&cpu.params(), s.model, 6);
  params_init(&dev_model.params(), s.model, 6);
  dev_model.set_backend(dev);
  RlTrainer on_cpu(setup, &cpu), on_dev(setup, &dev_model);
  TransferLog& log = *dev.transfers();
  log.reset();
  RunResults rc, rd;
  const int64_t steps = 2;
  for (int64_t step = 0; step < steps; ++step) {
    on_cpu.step(step, &rc);
    on_dev.step(step, &rd);
  }
  expect_same_bits(cpu.params().data(), dev_model.params().data(), "parameters after 2 steps");
  std::printf("dense model: crossings of 2 RL steps on the test device\n%s", log.table().c_str());
  const int64_t passes = steps * s.rl.minibatches;  // forward + backward pairs
  EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::activations), 0);
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), passes);
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::up), passes);
  EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::up),
            log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::down));
  // the rows: every sequence's prompt and response, at most S·T per step
  const int64_t S = static_cast<int64_t>(s.rl.prompts_per_step) * s.rl.group_size;
  const int64_t T = s.model.max_seq_len;
  EXPECT_GT(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::down), 0);
  EXPECT_LE(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::down), steps * S * T * 4);
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    EXPECT_EQ(log.bytes(ph, CrossKind::kv_cache), 0) << transfer_phase_name(ph);
    EXPECT_EQ(log.bytes(ph, CrossKind::optimizer), 0) << transfer_phase_name(ph);
  }
}

// A step's crossings have bounds with no term in the model's width, written from the rows each
// phase runs (sequences × max_seq_len at most; the train phase counts its forward and backward):
//   activations ≤ 4 · Σ_p rows_p · 4·V      what still crosses is a row of V floats a few times,
//                                           down only (the sampler's logits and log-probs, the
//                                           mismatch measure's), and nothing up;
//   per_token   ≤ 4 · Σ_p rows_p · (2 + L·K) the targets' log-probs and their gradient, the
//                                           router's log-probs at the ids;
// and the bytes do not grow with d_model: 16 times the width (16 → 256) moves at most 1.5 times
// the bytes (the rollouts' lengths may differ), where one residual-stream array per layer and row
// would multiply them by about 16. No term in E either: the router's scores stay on the device.
struct Crossed {
  int64_t up = 0, down = 0, bound = 0;            // activations
  int64_t tok_up = 0, tok_down = 0, tok_bound = 0;  // per_token
};
Crossed two_steps(const std::string& set) {
  const Scenario s = test::tiny_scenario({set});
  const RlSetup setup = setup_of(s);
  TestDeviceBackend dev;
  Model m(s.model);
  params_init(&m.params(), s.model, 7);
  m.set_backend(dev);
  RlTrainer t(setup, &m);
  TransferLog& log = *dev.transfers();
  log.reset();
  RunResults res;
  const int64_t steps = 2;
  for (int64_t step = 0; step < steps; ++step) t.step(step, &res);
  const ModelConfig& c = s.model;
  const int64_t S = static_cast<int64_t>(s.rl.prompts_per_step) * s.rl.group_size, T = c.max_seq_len;
  const int64_t eval_rows = static_cast<int64_t>(s.rl.eval_prompts) * T;  // the base evaluation
  const int64_t step_rows = S * T * 4;  // rollout, π_old, the train forward and its backward
  const int64_t rows = eval_rows + steps * step_rows;
  Crossed x;
  x.bound = 4 * rows * 4 * c.vocab_size;
  x.tok_bound = 4 * rows * (2 + static_cast<int64_t>(c.n_layers) * c.top_k);
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    x.up += log.bytes(ph, CrossKind::activations, CrossDir::up);
    x.down += log.bytes(ph, CrossKind::activations, CrossDir::down);
    x.tok_up += log.bytes(ph, CrossKind::per_token, CrossDir::up);
    x.tok_down += log.bytes(ph, CrossKind::per_token, CrossDir::down);
  }
  std::printf("%s: activations up %lld B, down %lld B (bound %lld B); per_token up %lld B, down %lld B "
              "(bound %lld B)\n",
              set.c_str(), static_cast<long long>(x.up), static_cast<long long>(x.down), static_cast<long long>(x.bound),
              static_cast<long long>(x.tok_up), static_cast<long long>(x.tok_down),
              static_cast<long long>(x.tok_bound));
  return x;
}

void expect_within_bounds(const Crossed& x) {
  EXPECT_EQ(x.up, 0) << "no activation goes up";
  EXPECT_GT(x.down, 0);
  EXPECT_LE(x.down, x.bound);
  EXPECT_GT(x.tok_down, 0);
  EXPECT_LE(x.tok_up, x.tok_bound);
  EXPECT_LE(x.tok_down, x.tok_bound);
}

TEST(StepTransfers, AStepsBytesDoNotGrowWithTheWidth) {
  const Crossed narrow = two_steps("model.d_model=16"), wide = two_steps("model.d_model=256");
  for (const Crossed& x : {narrow, wide}) expect_within_bounds(x);
  EXPECT_LE(2 * wide.down, 3 * narrow.down);
  EXPECT_LE(2 * wide.tok_down, 3 * narrow.tok_down);
}

// Nor with the number of experts (4 → 32 at the same top-k): the router's N·E scores per layer
// stay on the device. With the scores coming down once per layer (one line added to router.cpp),
// the bytes down grow 4.1-fold from 4 to 32 experts and this test fails.
TEST(StepTransfers, AStepsBytesDoNotGrowWithTheExperts) {
  const Crossed few = two_steps("model.n_experts=4"), many = two_steps("model.n_experts=32");
  for (const Crossed& x : {few, many}) expect_within_bounds(x);
  EXPECT_LE(2 * many.down, 3 * few.down);
  EXPECT_LE(2 * many.tok_down, 3 * few.tok_down);
}

// The test device, counting the decode steps of each phase: a decode step runs attention_decode
// once per layer.
class DecodeCounting final : public Backend {
 public:
  explicit DecodeCounting(const Backend& inner) : inner_(inner) {}
  BackendKind kind() const override { return inner_.kind(); }
  std::string describe() const override { return inner_.describe(); }
  MOERL_BACKEND_FORWARD_MEMORY(inner_)
#define MOERL_OP(name, params, args)                                                 \
  void name params const override {                                                  \
    if (Op::name == Op::attention_decode) ++decode_[static_cast<size_t>(transfers()->phase())]; \
    inner_.name args;                                                                \
  }
#include "kernels/ops.def"
  int64_t decode_calls(TransferPhase p) const { return decode_[static_cast<size_t>(p)]; }

 private:
  const Backend& inner_;
  mutable int64_t decode_[kTransferPhases] = {};
};

// Host reads per decode step, bounded: what a step of the rollout downloads is the logits of its
// rows and their log-softmax (the sampler's) and, per layer, the router's choice (the top-k ids)
// and its log-probs at them — 2 + 2·L copies a step at most, prefill included (the router's
// scores no longer come down) — and never more as the model grows (the floor is one small read
// a step: the sampler on the device, not yet).
TEST(StepTransfers, HostReadsPerDecodeStepAreBounded) {
  const Scenario s = test::tiny_scenario();
  const RlSetup setup = setup_of(s);
  TestDeviceBackend dev;
  DecodeCounting be(dev);
  Model m(s.model);
  params_init(&m.params(), s.model, 8);
  m.set_backend(be);
  RlTrainer t(setup, &m);
  TransferLog& log = *dev.transfers();
  log.reset();
  RunResults res;
  const int64_t steps = 2;
  for (int64_t step = 0; step < steps; ++step) t.step(step, &res);
  const int L = s.model.n_layers;
  for (TransferPhase ph : {TransferPhase::eval, TransferPhase::rollout}) {
    const int64_t decode_steps = be.decode_calls(ph) / L;
    const int64_t prefills = ph == TransferPhase::eval ? 1 : steps;
    int64_t reads = 0;
    for (int k = 0; k < kCrossKinds; ++k) reads += log.copies(ph, static_cast<CrossKind>(k), CrossDir::down);
    std::printf("%s: %lld decode steps, %lld host reads (%.1f a step, prefill included)\n", transfer_phase_name(ph),
                static_cast<long long>(decode_steps), static_cast<long long>(reads),
                static_cast<double>(reads) / static_cast<double>(decode_steps + prefills));
    EXPECT_GT(decode_steps, 0) << transfer_phase_name(ph);
    EXPECT_LE(reads, (decode_steps + prefills) * (2 + 2 * L)) << transfer_phase_name(ph);
  }
}

}  // namespace
}  // namespace moerl
