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

#include <cmath>
#include <cstring>

#include "kernels/test_device.h"
#include "models/model.h"
#include "rl_fixture.h"
#include "sim/rl/rollout.h"
#include "sim/rl/trainer.h"

namespace moerl {
namespace {

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
    // partial credit: rewards that differ within a group, so the steps have a loss and a gradient
    // and the bits compared below could differ
    const Scenario s = test::tiny_scenario({std::string("engines.rollout=") + engines, "task.partial_credit=true"});
    test::TwinTrainers tw(s, 5);
    const Model& cpu = tw.cpu;
    Model& dev_model = tw.on;
    TransferLog& log = *tw.dev.transfers();
    log.reset();  // the moments' first upload (AdamW::set_backend) is the run's setup, not the step's
    RunResults rc, rd;
    for (int64_t step = 0; step < 2; ++step) tw.step(step, &rc, &rd);
    std::printf("%s rollout: crossings of 2 RL steps on the test device\n%s", engines, log.table(true).c_str());

    for (int p = 0; p < kTransferPhases; ++p) {
      const auto ph = static_cast<TransferPhase>(p);
      EXPECT_EQ(log.bytes(ph, CrossKind::kv_cache), 0) << transfer_phase_name(ph);
      EXPECT_EQ(log.bytes(ph, CrossKind::optimizer), 0) << transfer_phase_name(ph);
      // the sampler, the rollout's record of μ and the mismatch measure's reductions run where
      // the logits are: no activation crosses, either way, in any phase
      EXPECT_EQ(log.bytes(ph, CrossKind::activations), 0) << transfer_phase_name(ph);
    }
    // Every phase of the step was counted under its name.
    for (TransferPhase ph : {TransferPhase::eval, TransferPhase::rollout, TransferPhase::old_logprobs,
                             TransferPhase::train, TransferPhase::optimizer})
      EXPECT_GT(log.bytes(ph), 0) << transfer_phase_name(ph);
    // The parameters: uploaded once, by the run's first op (the base evaluation), never again and
    // never back during the steps. The gradients: never cross; the clip's norm is reduced where
    // they are (sum_squares: the CPU's serial sum here), one FP64 down per update, and the tensors'
    // ranges up (16 B a trained tensor). AdamW moves nothing else.
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
    EXPECT_EQ(grads_down, 0);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer, CrossKind::per_token, CrossDir::down), updates * 8);
    EXPECT_EQ(log.copies(TransferPhase::optimizer, CrossKind::per_token, CrossDir::down), updates);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer, CrossKind::activations), 0);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer, CrossKind::indices, CrossDir::down), 0);
    EXPECT_EQ(log.bytes(TransferPhase::optimizer),
              updates * 8 + log.bytes(TransferPhase::optimizer, CrossKind::indices, CrossDir::up));
    EXPECT_LE(log.bytes(TransferPhase::optimizer, CrossKind::indices, CrossDir::up),
              updates * 16 * static_cast<int64_t>(cpu.params().infos().size()));
    // The train phase: no activation crosses, and the policy loss runs where the log-probs are
    // (policy_loss_rows): per step its inputs go up once (π_old, μ and the mask [S, R], the
    // advantages [S]: 4 copies), per mini-batch the aggregation's factors go up (S/M doubles) and
    // the totals come down (48 B), with one read of every MoE layer's routing (bf16-train's experts
    // are sized where the ids are: Forward::read_routing). Neither the log-probs nor their gradient
    // cross.
    const int64_t S = static_cast<int64_t>(s.rl.prompts_per_step) * s.rl.group_size, T = s.model.max_seq_len;
    EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::activations), 0);
    EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::up), 2 * 4 + updates);
    EXPECT_LE(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::up),
              2 * (3 * S * T * 4 + S * 4) + updates * (S / s.rl.minibatches) * 8);
    EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), updates * 2);
    // The parameters read back (a checkpoint, the end of the run): one download, the CPU run's bits.
    log.reset();
    expect_same_bits(cpu.params().data(), dev_model.params().data(), "parameters after 2 steps");
    EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::weights, CrossDir::down), n);
    EXPECT_EQ(log.total(), n);
    // The moments can still be read (a checkpoint): downloaded, with the CPU run's bits.
    log.reset();
    expect_same_bits(saved(*tw.t_cpu, "optim/m"), saved(*tw.t_dev, "optim/m"), "first moments");
    expect_same_bits(saved(*tw.t_cpu, "optim/v"), saved(*tw.t_dev, "optim/v"), "second moments");
    // two save_state calls on the device run, each downloading both moments
    EXPECT_EQ(log.bytes(TransferPhase::other, CrossKind::optimizer, CrossDir::down), 4 * n);
    EXPECT_EQ(log.total(), 4 * n);
  }
}

// The dense twin's step. Its activations stay on the device from the embedding to the logits, and
// the policy loss runs there too: in the train phase no activation crosses, nor the targets'
// log-probs or their gradient; the loss's inputs go up once a step (4 copies), the aggregation's
// factors once a mini-batch, and the mini-batch's totals come down (one copy of 48 B) — and the
// bits are the CPU's.
TEST(StepTransfers, ADenseTrainPhaseMovesOnlyTheLossInputsAndTotals) {
  const Scenario s = test::tiny_scenario({"model.n_experts=0", "task.partial_credit=true"});
  test::TwinTrainers tw(s, 6);
  TransferLog& log = *tw.dev.transfers();
  log.reset();
  RunResults rc, rd;
  const int64_t steps = 2;
  for (int64_t step = 0; step < steps; ++step) tw.step(step, &rc, &rd);
  expect_same_bits(tw.cpu.params().data(), tw.on.params().data(), "parameters after 2 steps");
  std::printf("dense model: crossings of 2 RL steps on the test device\n%s", log.table().c_str());
  const int64_t passes = steps * s.rl.minibatches;  // forward + backward pairs
  EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::activations), 0);
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), passes);
  EXPECT_EQ(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::down), passes * kLossTotals * 8);
  EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::up), steps * 4 + passes);
  // [old, μ, mask] of at most S·T tokens and S advantages a step; S/M doubles a mini-batch
  const int64_t S = static_cast<int64_t>(s.rl.prompts_per_step) * s.rl.group_size;
  const int64_t T = s.model.max_seq_len;
  EXPECT_GT(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::up), 0);
  EXPECT_LE(log.bytes(TransferPhase::train, CrossKind::per_token, CrossDir::up),
            steps * (3 * S * T * 4 + S * 4) + passes * (S / s.rl.minibatches) * 8);
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    EXPECT_EQ(log.bytes(ph, CrossKind::kv_cache), 0) << transfer_phase_name(ph);
    EXPECT_EQ(log.bytes(ph, CrossKind::optimizer), 0) << transfer_phase_name(ph);
  }
}

// A step's crossings have bounds with no term in the model's width, written from the rows each
// phase runs (sequences × max_seq_len at most; the train phase counts its forward and backward):
//   activations = 0                          nothing with a width crosses, either way;
//   per_token   ≤ Σ_p rows_p · 4·(2 + 2·L·K) the targets' log-probs (the evaluation, π_old) and
//                                           the policy loss's inputs and totals (train), the
//                 + R_rows · (8 + 12 + 32)   router's ids and its log-probs at them (one read a
//                                           layer); per sampled position
//                                           its uniform up (8 B), its token, log μ and entropy
//                                           down (12 B, one read), and per response token the
//                                           mismatch's four FP64 reductions (32 B) — R_rows the
//                                           sampled positions, ≤ (eval prompts + steps · S) · T;
//   indices     ≤ Σ_p rows_p · 4·(4 + L·(2K + E + 1))  the tokens and positions up, the
//                                           replayed ids up, the row maps of the reductions, the
//                                           expert GEMMs' E + 1 row offsets per layer and call (a
//                                           call has a row at least; the dispatch plan's rows are
//                                           drawn where the ids are: they do not cross);
// and the bytes do not grow with d_model: 16 times the width (16 → 256) moves at most 1.5 times
// the bytes (the rollouts' lengths may differ), where one residual-stream array per layer and row
// would multiply them by about 16. In E only the GEMMs' offsets: the router's scores stay on the
// device.
struct Crossed {
  int64_t act = 0;                                  // activations, both ways
  int64_t tok_up = 0, tok_down = 0, tok_bound = 0;  // per_token
  int64_t idx = 0, idx_bound = 0;                   // indices, both ways
  int64_t flow() const { return act + tok_up + tok_down + idx; }  // all but the parameters' and gradients' bytes
};
Crossed two_steps(const std::string& set) {
  const Scenario s = test::tiny_scenario({set});
  const RlSetup setup = test::rl_setup(s);
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
  const int64_t sampled = (static_cast<int64_t>(s.rl.eval_prompts) + steps * S) * T;
  const int64_t LK = static_cast<int64_t>(c.n_layers) * c.top_k;
  Crossed x;
  x.tok_bound = rows * 4 * (2 + 2 * LK) + sampled * (8 + 12 + 32);
  x.idx_bound = rows * 4 * (4 + static_cast<int64_t>(c.n_layers) * (2 * c.top_k + c.n_experts + 1));
  for (int p = 0; p < kTransferPhases; ++p) {
    const auto ph = static_cast<TransferPhase>(p);
    x.act += log.bytes(ph, CrossKind::activations);
    x.tok_up += log.bytes(ph, CrossKind::per_token, CrossDir::up);
    x.tok_down += log.bytes(ph, CrossKind::per_token, CrossDir::down);
    x.idx += log.bytes(ph, CrossKind::indices);
  }
  std::printf("%s: activations %lld B; per_token up %lld B, down %lld B (bound %lld B); indices %lld B (bound %lld B)\n",
              set.c_str(), static_cast<long long>(x.act), static_cast<long long>(x.tok_up),
              static_cast<long long>(x.tok_down), static_cast<long long>(x.tok_bound), static_cast<long long>(x.idx),
              static_cast<long long>(x.idx_bound));
  return x;
}

void expect_within_bounds(const Crossed& x) {
  EXPECT_EQ(x.act, 0) << "no activation crosses";
  EXPECT_GT(x.tok_down, 0);
  EXPECT_LE(x.tok_up, x.tok_bound);
  EXPECT_LE(x.tok_down, x.tok_bound);
  EXPECT_GT(x.idx, 0);
  EXPECT_LE(x.idx, x.idx_bound);
}

TEST(StepTransfers, AStepsBytesDoNotGrowWithTheWidth) {
  const Crossed narrow = two_steps("model.d_model=16"), wide = two_steps("model.d_model=256");
  for (const Crossed& x : {narrow, wide}) expect_within_bounds(x);
  EXPECT_LE(2 * wide.flow(), 3 * narrow.flow());
}

// Nor with the number of experts (4 → 32 at the same top-k): the router's N·E scores per layer
// stay on the device. With the scores coming down once per layer (one line added to router.cpp),
// activations cross again, growing with E, and this test fails.
TEST(StepTransfers, AStepsBytesDoNotGrowWithTheExperts) {
  const Crossed few = two_steps("model.n_experts=4"), many = two_steps("model.n_experts=32");
  for (const Crossed& x : {few, many}) expect_within_bounds(x);
  EXPECT_LE(2 * many.flow(), 3 * few.flow());
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
    if (Op::name == Op::kv_cache_keep) ++keep_[static_cast<size_t>(transfers()->phase())];      \
    inner_.name args;                                                                \
  }
#include "kernels/ops.def"
  int64_t decode_calls(TransferPhase p) const { return decode_[static_cast<size_t>(p)]; }
  int64_t keep_calls(TransferPhase p) const { return keep_[static_cast<size_t>(p)]; }

 private:
  const Backend& inner_;
  mutable int64_t decode_[kTransferPhases] = {}, keep_[kTransferPhases] = {};
};

// Host reads and writes per decode step of the eval and rollout phases, with the prefills.
struct DecodeTraffic {
  TransferPhase phase = TransferPhase::eval;
  int64_t decode = 0, prefills = 0, compactions = 0;
  int64_t steps = 0, reads = 0, writes = 0;  // steps: decode steps + prefills
  double reads_per_step() const { return static_cast<double>(reads) / static_cast<double>(steps); }
};
std::vector<DecodeTraffic> decode_traffic(const std::vector<std::string>& sets, int64_t* decode_steps_out = nullptr) {
  const Scenario s = test::tiny_scenario(sets);
  const RlSetup setup = test::rl_setup(s);
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
  std::vector<DecodeTraffic> out;
  int64_t decode_steps = 0;
  for (TransferPhase ph : {TransferPhase::eval, TransferPhase::rollout}) {
    DecodeTraffic x;
    const int64_t d = be.decode_calls(ph) / L;
    decode_steps += d;
    x.phase = ph;
    x.decode = d;
    x.compactions = be.keep_calls(ph) / L;
    x.prefills = ph == TransferPhase::eval ? 1 : steps;
    x.steps = x.decode + x.prefills;
    for (int k = 0; k < kCrossKinds; ++k) {
      x.reads += log.copies(ph, static_cast<CrossKind>(k), CrossDir::down);
      x.writes += log.copies(ph, static_cast<CrossKind>(k), CrossDir::up);
    }
    std::printf("%s, %s: %lld steps, %lld host reads (%.2f a step, prefill included), %lld host writes (%.2f)\n",
                sets.empty() ? "default" : sets.back().c_str(), transfer_phase_name(ph), static_cast<long long>(x.steps),
                static_cast<long long>(x.reads), x.reads_per_step(), static_cast<long long>(x.writes),
                static_cast<double>(x.writes) / static_cast<double>(x.steps));
    out.push_back(x);
  }
  if (decode_steps_out) *decode_steps_out = decode_steps;
  return out;
}

// With the experts' GEMMs sized where the ids are (FP32, or BF16 / FP16 without scales, with one
// chunk of K: grouped_sized_on_device), no layer's routing is read on the host in a decode step: each step's
// routing, every layer's, goes into the rollout's record where it is computed
// (Model::generation_record_routing), and a decode step reads the sampler's one array — the floor,
// one read a step, whatever the depth. A rollout adds three reads: its prefill's routing and the
// record's ids and log-probs at the end. Writes: two a decode step, its two units' blocks
// (Model::generation_feed: the tokens, positions, lengths, record rows and the step's call;
// generation_draw: the uniforms and μ's rows), two a prefill (its prompt and positions), one a
// compaction (its sources) and the parameters' one upload at the base evaluation; none per layer (the offsets are drawn there). With scaled experts (FP8) the CUDA
// backend sizes its per-expert calls on the host, so each layer's ids still come down (1 + L a
// step).
TEST(StepTransfers, ResidentRoutingReadsOnceADecodeStepAtAnyDepth) {
  for (const int L : {2, 4}) {
    const std::string depth = "model.n_layers=" + std::to_string(L);
    int64_t decode_steps = 0;
    for (const DecodeTraffic& x : decode_traffic({"engines.rollout=fp32-ref", depth}, &decode_steps)) {
      EXPECT_LE(x.reads, x.decode + 3 * x.prefills) << depth;
      const int64_t params_up = x.phase == TransferPhase::eval ? 1 : 0;  // the run's first op uploads them
      EXPECT_LE(x.writes, 2 * x.decode + 2 * x.prefills + x.compactions + params_up) << depth;
    }
    EXPECT_GT(decode_steps, 0);
    // bf16-train's experts (BF16 operands without scales) are sized where the ids are too
    const DecodeTraffic bf16 = decode_traffic({"engines.rollout=bf16-train", depth})[1];
    EXPECT_LE(bf16.reads, bf16.decode + 3 * bf16.prefills) << depth << " bf16-train";
    const DecodeTraffic fp8 = decode_traffic({"engines.rollout=fp8-rollout", depth})[1];  // the rollout phase
    EXPECT_GT(fp8.reads, 2 * fp8.steps) << depth << ": the FP8 experts' ids come down per layer";
    EXPECT_LE(fp8.reads, (1 + L) * fp8.steps) << depth;
  }
}

// The record resident routing keeps where it is computed is the host's record: a rollout on the
// test device (FP32 experts, so it routes resident) and on the CPU backend give the same tokens,
// routing ids and router log-probs, bit for bit — with an EOS, so that sequences leave the batch
// (compaction) and the record's rows follow them, with shared-prefix routing (its prefill replayed),
// and at two depths.
TEST(StepTransfers, ResidentRoutingRecordIsTheHostsRecord) {
  for (const int L : {2, 3})
    for (const int shared : {1, 2}) {
      const Scenario s = test::tiny_scenario({"model.n_layers=" + std::to_string(L)});
      TestDeviceBackend dev;
      Model cpu(s.model), on(s.model);
      params_init(&cpu.params(), s.model, 11);
      params_init(&on.params(), s.model, 11);
      on.set_backend(dev);
      const NumericsProfile p = s.profile("fp32-ref");
      const int S = 8, P = 4, R = 9, eos = 3;
      std::vector<int32_t> prompts(static_cast<size_t>(S) * P);
      for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = static_cast<int32_t>((i * 7 + i / P) % 10);
      SamplingConfig sampling;
      RolloutBatch a, b;
      rollout_generate(&a, cpu, p, prompts.data(), S, P, R, sampling, 5, 0, 0, shared, eos, false);
      TransferLog& log = *dev.transfers();
      log.reset();
      rollout_generate(&b, on, p, prompts.data(), S, P, R, sampling, 5, 0, 0, shared, eos, false);
      const std::string what = "L " + std::to_string(L) + " shared " + std::to_string(shared);
      // it routed resident: a read a decode step (R), the prefill's routing and the record's two
      // reads, and with a shared prefix its own prefill's logits and routing — whatever the depth
      int64_t reads = 0;
      for (int k = 0; k < kCrossKinds; ++k)
        reads += log.copies(TransferPhase::other, static_cast<CrossKind>(k), CrossDir::down);
      EXPECT_LE(reads, R + 3 + (shared > 1 ? 2 : 0)) << what;
      EXPECT_EQ(a.tokens, b.tokens) << what;
      EXPECT_EQ(a.len, b.len) << what;
      EXPECT_EQ(a.topk_ids, b.topk_ids) << what;
      expect_same_bits(a.router_logp, b.router_logp, what.c_str());
      int ended_early = 0;  // the EOS made rows leave the batch before the last step
      for (int32_t n : a.len) ended_early += n < R;
      EXPECT_GT(ended_early, 0) << what;
      int routed = 0;  // the decode positions' record is not empty
      for (size_t i = 0; i < a.router_logp.size(); ++i) routed += a.router_logp[i] != 0.0f;
      EXPECT_GT(routed, 0) << what;
    }
}

// Resident routing in the training forward (FP32 train engine, no balance loss): π_old's and the
// mini-batches' forwards read every layer's routing at once, one copy a forward, whatever the
// depth — the train phase's reads are the loss's totals and that one copy per mini-batch; π_old's
// phase reads as many copies at L = 3 as at L = 2 (the router's margins too come down once a
// forward) — and two steps on the test device end with the CPU backend's parameters and routing
// metrics, bit for bit.
TEST(StepTransfers, ResidentRoutingInTheTrainingForward) {
  // the FP32 pair, and the realistic pair (fp8-rollout against bf16-train, whose BF16 experts are
  // sized where the ids are)
  for (const std::string rollout : {"fp32-ref", "fp8-rollout"}) {
  const std::string train = rollout == "fp32-ref" ? "fp32-ref" : "bf16-train";
  std::vector<int64_t> old_reads;
  for (const int L : {2, 3}) {
    const Scenario s = test::tiny_scenario({"engines.rollout=" + rollout, "engines.train=" + train,
                                            "task.partial_credit=true", "model.n_layers=" + std::to_string(L)});
    test::TwinTrainers tw(s, 12);
    TransferLog& log = *tw.dev.transfers();
    log.reset();
    RunResults rc, rd;
    for (int64_t step = 0; step < 2; ++step) tw.step(step, &rc, &rd);
    const std::string what = train + " L " + std::to_string(L);
    const int64_t updates = 2 * s.rl.minibatches;
    EXPECT_EQ(log.copies(TransferPhase::train, CrossKind::per_token, CrossDir::down), 2 * updates) << what;
    old_reads.push_back(0);
    for (int k = 0; k < kCrossKinds; ++k)
      old_reads.back() += log.copies(TransferPhase::old_logprobs, static_cast<CrossKind>(k), CrossDir::down);
    expect_same_bits(tw.cpu.params().data(), tw.on.params().data(), what.c_str());
    for (const char* m : {"loss", "grad_norm", "load_cv", "load_max_over_mean", "dead_experts", "flip_rate_mean",
                          "kl_rollout_train", "router_margin_mean", "router_margin_p10"}) {
      const double a = rc.last(m), b = rd.last(m);
      EXPECT_TRUE(std::memcmp(&a, &b, sizeof a) == 0) << what << " " << m << ": " << a << " vs " << b;
    }
    EXPECT_TRUE(std::isfinite(rd.last("router_margin_mean"))) << what << ": the margins were measured";
  }
  EXPECT_EQ(old_reads[0], old_reads[1]) << train << ": π_old's reads grow with the depth";
  }
}

// CUDA Graphs over the decode loop, on the CPU: the test device records each decode unit
// (Model::generation_feed, generation_draw) once per batch size and replays it with the arguments it
// was recorded with, as a GPU's stream capture does (kernels/test_device.h). The whole RL step —
// sampling with answers of their own length, so that compaction changes the batch size — then
// gives the CPU backend's bits, which holds only if every value that changes from one decode step
// to the next (the tokens, positions, lengths, record rows, uniforms, μ's rows and the step's noise
// call) comes through memory, not through an op's arguments; and most units are replays.
TEST(DecodeGraphs, RecordedDecodeStepsReplayWithTheCpuBits) {
  // the FP32 pair, BF16 rollouts (experts sized where the ids are, so the routing is resident), and
  // a rollout engine whose draws key on the step's call: RMSNorm's split order, the MoE combine's
  // shuffle and the top-k's random tie-break (a replay that kept its recorded call would differ)
  for (const std::string rollout : {"fp32-ref", "bf16-train", "keyed"}) {
    const Scenario s = test::tiny_scenario({"engines.rollout=" + rollout, "task.partial_credit=true",
                                            "profile.keyed.base=fp32-ref", "profile.keyed.norm_order=split_k:4",
                                            "profile.keyed.combine_order=split_k:2",
                                            "profile.keyed.tie_break=random"});
    test::TwinTrainers tw(s, 14);
    tw.dev.set_graphs(true);
    RunResults rc, rd;
    for (int64_t step = 0; step < 2; ++step) tw.step(step, &rc, &rd);
    expect_same_bits(tw.cpu.params().data(), tw.on.params().data(), rollout.c_str());
    for (const char* m : {"loss", "reward_mean", "response_len_mean", "kl_rollout_train", "flip_rate_mean"}) {
      const double a = rc.last(m), b = rd.last(m);
      EXPECT_TRUE(std::memcmp(&a, &b, sizeof a) == 0) << rollout << " " << m << ": " << a << " vs " << b;
    }
    std::printf("%s: %lld decode units recorded, %lld launches\n", rollout.c_str(),
                static_cast<long long>(tw.dev.graphs_recorded()), static_cast<long long>(tw.dev.graph_launches()));
    EXPECT_GT(tw.dev.graphs_recorded(), 0) << rollout;
    EXPECT_GT(tw.dev.graph_launches(), 2 * tw.dev.graphs_recorded()) << rollout << ": mostly replays";
  }
}

// Host reads and writes per decode step, bounded for any numerics: what a step of the rollout
// downloads is the sampler's result (the tokens, log μ at them and the entropies: one read of 3
// values a row) and, per layer at most, the router's choice and its log-probs at it in one read
// (where the expert GEMMs are sized on the host) — 1 + L copies a step at most, prefill included
// (1 with resident routing, above). Writes: 5 + 3·L a step (below). On a GPU every copy of
// pageable memory waits for the work before it, so both counts are the step's host round trips.
TEST(StepTransfers, HostReadsPerDecodeStepAreBounded) {
  const int L = test::tiny_scenario().model.n_layers;
  for (const DecodeTraffic& x : decode_traffic({})) {  // the eval phase, then the rollout
    EXPECT_GT(x.decode, 0);
    EXPECT_LE(x.reads, x.steps * (1 + L));
    // writes: per step the tokens, the uniforms, the rows μ is stored at, the positions (RoPE's) and
    // the sequences' lengths (attention's), each once for every layer; per layer the three expert
    // GEMMs' offsets; one more per compaction (its sources)
    EXPECT_LE(x.writes, x.steps * (5 + 3 * L) + x.decode);
  }
}

}  // namespace
}  // namespace moerl
