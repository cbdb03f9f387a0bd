// `moerl bench` (sim/bench/bench.h, sim/cli/cmd_bench.cpp) on a tiny model: the steps it times, the
// analytic FLOPs and routing-record size it reports, the targets it derives (the peer's ratio
// among them), the JSON and table it writes, and the errors of a bench section that does not fit.
// The long-answer workload (sim/bench/workload.h): its lengths follow the schedule, padding gets
// no gradient and is not counted, and the report has its rows.
// Times are not checked (the machine is shared); only what the report must contain.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "kernels/rng.h"
#include "models/model.h"
#include "sim/bench/bench.h"
#include "sim/bench/bench_backend.h"
#include "sim/bench/bench_shape.h"
#include "sim/cli/cli.h"
#include "sim/bench/flops.h"
#include "sim/bench/workload.h"
#include "sim/rl/rollout.h"
#include "sim/rl/routing_record.h"
#include "sim/scenario/scenario.h"
#include "sim/tasks/task.h"
#include "../sim_test_util.h"

namespace moerl {
namespace {

const std::vector<std::string> kTiny = {
    "model.vocab_size=16", "model.d_model=32",  "model.n_layers=2",      "model.n_heads=2",
    "model.n_experts=4",   "model.top_k=2",     "model.d_ff=32",         "model.max_seq_len=24",
    "bench.sequences=6",   "bench.seq_len=12",  "bench.prompt_len=4",    "bench.decode_steps=8"};

BenchOptions quick() {
  BenchOptions o;
  o.rounds = 1;
  o.gemm_n = 32;
  o.gemm_seconds = 0.001;
  return o;
}

TEST(Bench, ReportsStepsFlopsRoutingAndTargets) {
  const Scenario s = Scenario::defaults(kTiny);
  BenchOptions o = quick();
  o.peer_rollout_s = 1.0;
  o.peer_train_s = 2.0;
  o.peer_name = "peer";
  const BenchReport r = bench_run(s, "tiny", o, ModelParallel{});
  // fp32-ref, bf16-train, fp8-rollout, and the [engines] recipe fp8-rollout + bf16-train
  ASSERT_EQ(r.steps.size(), 4u);
  ASSERT_NE(r.step("fp8-rollout", "bf16-train"), nullptr);
  for (const BenchStep& st : r.steps) {
    EXPECT_GT(st.rollout_s, 0.0);
    EXPECT_GT(st.train_s, 0.0);
    EXPECT_GE(st.total_s, st.rollout_s + st.train_s);  // one round: the parts of the same step
  }
  double fr = flops_prefill(s.model, 4);
  for (int r8 = 0; r8 < 8; ++r8) fr += flops_decode_step(s.model, 4 + r8);
  EXPECT_DOUBLE_EQ(r.flops_rollout, 6 * fr);
  EXPECT_DOUBLE_EQ(r.flops_train, 6 * flops_train_sequence(s.model, 12));
  EXPECT_EQ(r.routing_bits, 4);  // 4² = 16 pairs of ids
  EXPECT_EQ(r.routing_bytes, routing_record_bytes({2, 6 * 12, 2, 4}));
  EXPECT_EQ(r.routing_bytes_int32, 2 * 6 * 12 * 2 * 4);
  EXPECT_GT(r.ceiling, 0.0);
  EXPECT_GT(r.peak_rss_mib, 0.0);
  // peer, train share, rollout floor, and step + rollout + train for bf16-train and fp8-rollout
  ASSERT_EQ(r.targets.size(), 9u);
  EXPECT_NEAR(r.targets[0].value, 3.0 / r.step("fp32-ref", "fp32-ref")->total_s, 1e-9);
  EXPECT_EQ(r.targets[0].pass, r.targets[0].value >= 5.0);
  const BenchStep* f32 = r.step("fp32-ref", "fp32-ref");
  const BenchStep* f8 = r.step("fp8-rollout", "fp8-rollout");
  ASSERT_NE(f8, nullptr);
  EXPECT_EQ(r.targets[6].name, "RL step fp8-rollout / fp32-ref");
  EXPECT_NEAR(r.targets[6].value, f8->total_s / f32->total_s, 1e-12);
  EXPECT_EQ(r.targets[6].pass, r.targets[6].value <= 1.5);

  const std::string json = bench_format_json(r);
  for (const char* key : {"\"ceiling_gflops\"", "\"steps\"", "\"routing_bytes\"", "\"targets\"", "\"load_begin\"",
                          "\"peak_rss_mib\"", "\"peer_rollout_s\""})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  const std::string table = bench_format_table(r);
  EXPECT_NE(table.find("targets:"), std::string::npos);
  EXPECT_NE(table.find("R3 routing record: 4 bits"), std::string::npos);
}

// On a GPU the report says what one step moved between host and device, per phase and kind
// (kernels/transfers.h), and names the ceilings it measured there (SGEMM, BF16, the FP32 peak);
// a CPU report has neither.
TEST(Bench, ReportsTransfersAndTheGpuCeilingWhereThereIsADevice) {
  const Scenario s = Scenario::defaults(kTiny);
  BenchReport r = bench_run(s, "tiny", quick(), ModelParallel{});
  for (const BenchStep& st : r.steps) EXPECT_TRUE(st.transfer_bytes.empty());
  EXPECT_EQ(bench_format_json(r).find("transfer_bytes"), std::string::npos);
  EXPECT_EQ(bench_format_table(r).find("host<->device"), std::string::npos);
  r.gpu_n = 8192;
  r.ceiling_blas = r.ceiling = 50000;
  r.ceiling_own = 0;
  r.ceiling_bf16 = 600000;
  r.fp32_peak = 66900;
  BenchStep& st = r.steps.front();
  st.transfer_bytes.assign(static_cast<size_t>(kTransferPhases) * kCrossKinds, 0);
  st.transfer_bytes[static_cast<size_t>(TransferPhase::rollout) * kCrossKinds +
                    static_cast<size_t>(CrossKind::activations)] = 2500000;
  const std::string table = bench_format_table(r), json = bench_format_json(r);
  EXPECT_NE(table.find("SGEMM FP32 50000.0 GFLOP/s (the FP32 peak: 66900.0), BF16 tensor cores 600000.0"),
            std::string::npos) << table;
  EXPECT_EQ(table.find("WARNING"), std::string::npos);
  EXPECT_NE(table.find("host<->device crossings of one RL step"), std::string::npos);
  EXPECT_NE(table.find("2.500"), std::string::npos);
  EXPECT_NE(json.find("\"transfer_bytes\": {\"rollout\": {\"activations\": 2500000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ceiling_bf16_gflops\""), std::string::npos);
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  r.ceiling_blas = 185000;  // the old bench's BF16 rate printed as FP32: above the peak
  EXPECT_NE(bench_format_table(r).find("WARNING: the SGEMM rate is above the GPU's FP32 peak"), std::string::npos);
}

TEST(Bench, RejectsABenchSectionThatDoesNotFit) {
  std::vector<std::string> bad = kTiny;
  bad.back() = "bench.decode_steps=7";  // 4 + 7 != 12
  test::expect_throw_with<std::invalid_argument>(
      [&] { bench_run(Scenario::defaults(bad), "tiny", quick(), ModelParallel{}); },
      {"bench.prompt_len + bench.decode_steps = 11", "bench.seq_len = 12"});
  BenchOptions o = quick();
  o.phase = "decode";
  test::expect_throw_with<std::invalid_argument>(
      [&] { bench_run(Scenario::defaults(kTiny), "tiny", o, ModelParallel{}); }, {"phase 'decode'"});
}

TEST(Bench, CommandWritesJsonWithThePeer) {
  test::ScratchDir dir;
  {
    std::ofstream f(dir.file("peer.json"));
    f << "{\"peer\": \"pytorch-eager\", \"rollout_s\": 0.5, \"train_s\": 1.5}\n";
  }
  std::vector<std::string> args = {"--rounds", "1", "--gemm-n", "32", "--gemm-seconds", "0.001",
                                   "--profiles", "fp32-ref", "--recipe", "false",
                                   "--json", dir.file("b.json"), "--peer-json", dir.file("peer.json")};
  for (const std::string& s : kTiny) {
    args.push_back("--set");
    args.push_back(s);
  }
  testing::internal::CaptureStdout();
  ASSERT_EQ(0, cmd_bench(comms_local(), args));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("fp32 vs peer pytorch-eager"), std::string::npos);
  std::ifstream f(dir.file("b.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("\"peer_train_s\": 1.5"), std::string::npos);
  EXPECT_NE(ss.str().find("RL step fp32: peer time / moerl time"), std::string::npos);
}

TEST(Bench, LengthScheduleHasItsMeanAndMaximum) {
  // the reference batch: 256 quantiles of the uniform distribution on [1, 255]
  for (int B : {256, 4000, 7}) {
    const std::vector<int32_t> len = bench_length_schedule(0, B, 128);
    ASSERT_EQ(static_cast<int>(len.size()), B);
    int64_t sum = 0;
    for (int32_t l : len) sum += l;
    EXPECT_EQ(sum, 128LL * B) << "B " << B;  // the mean exactly
    EXPECT_EQ(*std::max_element(len.begin(), len.end()), B >= 128 ? 255 : 237) << "B " << B;
    EXPECT_EQ(*std::min_element(len.begin(), len.end()), B >= 128 ? 1 : 19) << "B " << B;
    std::vector<int32_t> sorted = len;
    std::sort(sorted.begin(), sorted.end());
    for (int k = 0; k < B; ++k)  // the k-th quantile, 1 + ⌊(k + ½)·255/B⌋
      EXPECT_EQ(sorted[k], 1 + (2 * k + 1) * 255 / (2 * B)) << "B " << B << " k " << k;
  }
  const std::vector<int32_t> len = bench_length_schedule(0, 256, 128);
  EXPECT_EQ(len, bench_length_schedule(0, 256, 128));  // seeded
  const std::vector<int32_t> other = bench_length_schedule(1, 256, 128);
  EXPECT_NE(len, other);  // another order of the same lengths
  EXPECT_TRUE(std::is_permutation(len.begin(), len.end(), other.begin()));
  EXPECT_FALSE(std::is_sorted(len.begin(), len.end()));
  EXPECT_THROW(bench_length_schedule(0, 4, 0), std::invalid_argument);
}

NumericsProfile test_profile() {
  NumericsProfile p;
  profile_builtin("fp32-ref", &p);
  return p;
}

// The long workload's rollout on a tiny model through BenchBackend: the RL step's
// rollout_generate ends every sequence at its scheduled length with EOS.
struct LongRollout {
  ModelConfig cfg;
  int B = 12, P = 4, R_max = 12, eos = 0;
  std::vector<int32_t> prompts, targets;
  RolloutBatch rb;
};

LongRollout long_rollout(Model& model, BenchBackend& watch, const ModelConfig& cfg) {
  LongRollout lr;
  lr.cfg = cfg;
  lr.eos = cfg.vocab_size - 1;
  lr.targets = bench_length_schedule(3, lr.B, 5);  // 1 .. 9
  lr.prompts.resize(static_cast<size_t>(lr.B) * lr.P);
  Rng rng(17);
  for (int32_t& t : lr.prompts) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cfg.vocab_size)));
  watch.rollout_begin(lr.P, lr.eos, lr.targets.data(), lr.B);
  rollout_generate(&lr.rb, model, test_profile(), lr.prompts.data(), lr.B, lr.P, lr.R_max, SamplingConfig{}, 5, 0, 0,
                   1, lr.eos);
  watch.rollout_end();
  return lr;
}

ModelConfig tiny_long_model() {
  ModelConfig cfg = Scenario::defaults(kTiny).model;
  cfg.load_balance = LoadBalance::none;  // no loss on the padding's routing: only the policy loss
  cfg.z_loss_coef = 0.0f;
  return cfg;
}

// What the long workload's tests start from: the tiny model on BenchBackend, its long rollout done.
struct LongWorkload {
  ModelConfig cfg = tiny_long_model();
  BenchBackend watch{cpu_backend()};  // outlives the model (kernels/backend.h)
  Model model{cfg};
  LongRollout lr;
  LongWorkload() {
    params_init(&model.params(), cfg, 2);
    model.set_backend(watch);
    lr = long_rollout(model, watch, cfg);
  }
};

TEST(Bench, LongRolloutEndsAtTheScheduledLengths) {
  LongWorkload x;
  auto& [cfg, watch, model, lr] = x;
  EXPECT_EQ(lr.rb.len, lr.targets);
  EXPECT_EQ(lr.rb.truncated, std::vector<int32_t>(lr.B, 0));
  EXPECT_EQ(lr.rb.R, *std::max_element(lr.targets.begin(), lr.targets.end()));  // trimmed to the longest
  for (int s = 0; s < lr.B; ++s)
    for (int r = 0; r < lr.rb.R; ++r)  // EOS at the scheduled position and after it, nowhere before
      EXPECT_EQ(lr.rb.tokens[static_cast<size_t>(s) * lr.rb.T + lr.P + r] == lr.eos, r >= lr.targets[s] - 1)
          << "s " << s << " r " << r;
  // one decode step per generated position (MoE: the last records the final routing)
  EXPECT_EQ(static_cast<int>(watch.step_seconds().size()), lr.rb.R);
  EXPECT_EQ(watch.step_attention_seconds().size(), watch.step_seconds().size());
  EXPECT_GT(watch.attention_seconds(), 0.0);
  // Without the schedule the same rollout runs to the limit: the untrained model's EOS draws do
  // not end every sequence by themselves at these lengths.
  watch.rollout_begin(lr.P, lr.eos, nullptr, lr.B);
  RolloutBatch free;
  rollout_generate(&free, model, test_profile(), lr.prompts.data(), lr.B, lr.P, lr.R_max, SamplingConfig{}, 5, 0, 0, 1,
                   lr.eos);
  watch.rollout_end();
  EXPECT_NE(free.len, lr.targets);
}

TEST(Bench, PaddingGetsNoGradientAndIsNotCounted) {
  LongWorkload x;
  auto& [cfg, watch, model, lr] = x;
  const int B = lr.B, P = lr.P, T = lr.rb.T;
  int64_t N = 0;
  for (int32_t l : lr.targets) N += l;

  BenchWorkload w;
  w.name = "long";
  w.B = B;
  w.P = P;
  w.R_max = lr.R_max;
  w.eos = lr.eos;
  bench_workload_measure(&w, cfg, lr.rb.len.data(), lr.rb.R);
  EXPECT_EQ(w.tokens_real, static_cast<int64_t>(B) * P + N);
  EXPECT_EQ(w.tokens_computed, static_cast<int64_t>(B) * T);
  EXPECT_EQ(w.decode_real, N);                                    // MoE: a row per response token
  EXPECT_EQ(w.decode_computed, static_cast<int64_t>(B) * lr.rb.R);
  EXPECT_DOUBLE_EQ(w.train_padding(), 1.0 - static_cast<double>(B * P + N) / (B * T));
  EXPECT_NEAR(w.len_mean, static_cast<double>(N) / B, 1e-12);
  EXPECT_EQ(w.len_max, lr.rb.R);
  double fr = 0.0, ft = 0.0;
  for (int s = 0; s < B; ++s) {
    fr += flops_prefill(cfg, P);
    for (int r = 0; r < lr.targets[s]; ++r) fr += flops_decode_step(cfg, P + r);
    ft += flops_train_sequence(cfg, P + lr.targets[s]);
  }
  EXPECT_NEAR(w.flops_rollout_real, fr, 1e-6 * fr);
  EXPECT_NEAR(w.flops_train_real, ft, 1e-6 * ft);
  EXPECT_DOUBLE_EQ(w.flops_train, B * flops_train_sequence(cfg, T));

  // −1/N on the positions scoring each response's own tokens (P−1 .. P−2+ℓ), 0 elsewhere
  const std::vector<float> d = bench_loss_dlogp(lr.rb.len.data(), B, P, T, N);
  ASSERT_EQ(d.size(), static_cast<size_t>(B) * (T - 1));
  for (int s = 0; s < B; ++s)
    for (int t = 0; t < T - 1; ++t)
      EXPECT_EQ(d[static_cast<size_t>(s) * (T - 1) + t],
                t >= P - 1 && t < P - 1 + lr.targets[s] ? -1.0f / static_cast<float>(N) : 0.0f)
          << "s " << s << " t " << t;

  // Padding tokens (past each response's EOS) do not reach the gradient: any other padding gives
  // the same bits. A response token does (the check can fail).
  auto grads = [&](const std::vector<int32_t>& tokens) {
    model.grads().zero();
    ForwardResult res;
    ForwardRequest req;
    req.tokens = tokens.data();
    req.B = B;
    req.T = T;
    req.save_for_backward = true;
    model.forward(&res, req);
    model.backward(d.data());
    return model.grads().data();
  };
  const std::vector<float> g = grads(lr.rb.tokens);
  std::vector<int32_t> other = lr.rb.tokens;
  int changed = 0;
  for (int s = 0; s < B; ++s)
    for (int t = P + lr.targets[s]; t < T; ++t, ++changed)
      other[static_cast<size_t>(s) * T + t] = (s + 3 * t) % (cfg.vocab_size - 1);
  ASSERT_GT(changed, 0);
  EXPECT_EQ(grads(other), g);
  std::vector<int32_t> real = lr.rb.tokens;
  int s_long = 0;
  for (int s = 0; s < B; ++s)
    if (lr.targets[s] > 1) s_long = s;
  real[static_cast<size_t>(s_long) * T + P] = (real[static_cast<size_t>(s_long) * T + P] + 1) % (cfg.vocab_size - 1);
  EXPECT_NE(grads(real), g);
}

TEST(Bench, ReportHasTheLongAnswerRows) {
  const Scenario s = Scenario::defaults(kTiny);
  BenchOptions o = quick();
  o.profiles = {"fp32-ref"};
  o.recipe = false;
  o.workloads = {"short", "long", "long-fixed"};
  o.long_mean = 4;  // 1 .. 7
  o.long_max = 8;
  const BenchReport r = bench_run(s, "tiny", o, ModelParallel{});
  ASSERT_EQ(r.workloads.size(), 3u);
  const BenchWorkload* ws = r.find_workload("short");
  const BenchWorkload* wl = r.find_workload("long");
  ASSERT_NE(ws, nullptr);
  ASSERT_NE(wl, nullptr);
  EXPECT_EQ(ws->tokens_real, 6 * 12);
  EXPECT_EQ(ws->train_padding(), 0.0);
  const std::vector<int32_t> len = bench_length_schedule(s.run.seed, 6, 4);
  int64_t n = 0;
  for (int32_t l : len) n += l;
  EXPECT_EQ(n, 6 * 4);  // mean 4
  EXPECT_EQ(wl->len_mean, 4.0);
  EXPECT_EQ(wl->tokens_real, 6 * 4 + n);
  EXPECT_EQ(wl->len_max, *std::max_element(len.begin(), len.end()));
  EXPECT_EQ(wl->T, 4 + wl->len_max);
  EXPECT_EQ(wl->tokens_computed, 6 * wl->T);
  EXPECT_EQ(wl->eos, 15);
  const BenchStep* sl = r.step("fp32-ref", "fp32-ref", "long");
  ASSERT_NE(sl, nullptr);
  EXPECT_GT(sl->train_s, 0.0);
  EXPECT_GT(sl->attention_train_s, 0.0);
  EXPECT_EQ(static_cast<int>(sl->decode_step_s.size()), wl->R);
  // the train phase's time by op (BenchBackend), within the phase's own time
  ASSERT_EQ(sl->ops_train_s.size(), static_cast<size_t>(kOpCount));
  double in_ops = 0.0;
  for (double v : sl->ops_train_s) in_ops += v;
  EXPECT_LE(in_ops, sl->train_s);
  EXPECT_GT(sl->ops_train_s[static_cast<size_t>(Op::linear_backward_grouped)], 0.0);
  EXPECT_EQ(sl->ops_train_s[static_cast<size_t>(Op::attention_decode)], 0.0);
  EXPECT_GT(sl->ops_rollout_s[static_cast<size_t>(Op::attention_decode)], 0.0);
  // long-fixed: the long answers' real tokens at one length, no padding
  const BenchWorkload* wf = r.find_workload("long-fixed");
  ASSERT_NE(wf, nullptr);
  EXPECT_EQ(wf->tokens_real, wl->tokens_real);
  EXPECT_EQ(wf->tokens_computed, wf->tokens_real);
  EXPECT_EQ(wf->T, 4 + 4);
  EXPECT_EQ(wf->eos, -1);
  EXPECT_EQ(wf->train_padding(), 0.0);
  EXPECT_EQ(wf->decode_padding(), 0.0);
  EXPECT_GT(wl->train_padding(), 0.0);
  EXPECT_NE(r.step("fp32-ref", "fp32-ref", "long-fixed"), nullptr);
  EXPECT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[0].workload, "short");  // the short step first: compare.py reads steps[...] by profile
  // the short targets, then the long-answer token cost (whole step, fp32-ref)
  ASSERT_EQ(r.targets.size(), 3u);
  const BenchStep* ss = r.step("fp32-ref", "fp32-ref");
  EXPECT_EQ(r.targets[2].name, "long-answer token cost: s per real token, long / short (fp32)");
  EXPECT_NEAR(r.targets[2].value, (sl->total_s / wl->tokens_real) / (ss->total_s / ws->tokens_real), 1e-12);
  EXPECT_EQ(r.targets[2].pass, r.targets[2].value <= 1.5);

  const std::string table = bench_format_table(r);
  for (const char* key : {"long answers:", "long fp32-ref", "long / short, fp32-ref", "real tokens per second",
                          "decode step time against its context", "pad tok",
                          "where the time goes", "long / short per computed position",
                          "long-fixed / short, fp32-ref", "long-fixed: the same prompts, every response 4 tokens"})
    EXPECT_NE(table.find(key), std::string::npos) << key;
  const std::string json = bench_format_json(r);
  for (const char* key : {"\"workloads\"", "\"token_cost\"", "\"tokens_per_s_step\"", "\"train_padding\"",
                          "\"decode_step_s\"", "\"workload\": \"long\"", "long-answer token cost",
                          "\"ops_train_s\": {\"embedding_forward\"", "\"workload\": \"long-fixed\""})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  EXPECT_EQ(std::count(json.begin(), json.end(), '['), std::count(json.begin(), json.end(), ']'));
}

TEST(Bench, OnePhaseWritesValidJson) {  // a phase not timed has no rate (JSON has no inf)
  BenchOptions o = quick();
  o.profiles = {"fp32-ref"};
  o.recipe = false;
  o.workloads = {"long"};
  o.long_mean = 4;
  o.long_max = 8;
  o.phase = "rollout";
  const std::string json = bench_format_json(bench_run(Scenario::defaults(kTiny), "tiny", o, ModelParallel{}));
  EXPECT_EQ(json.find("inf"), std::string::npos);
  EXPECT_EQ(json.find("nan"), std::string::npos);
  EXPECT_NE(json.find("\"tokens_per_s_train\": 0,"), std::string::npos);
}

TEST(Bench, RejectsBadWorkloads) {
  const Scenario s = Scenario::defaults(kTiny);
  BenchOptions o = quick();
  o.workloads = {"medium"};
  test::expect_throw_with<std::invalid_argument>([&] { bench_run(s, "tiny", o, ModelParallel{}); },
                                                 {"workloads 'medium'", "each of short, long, long-fixed at most once"});
  o.workloads = {"long", "short", "long"};
  test::expect_throw_with<std::invalid_argument>([&] { bench_run(s, "tiny", o, ModelParallel{}); },
                                                 {"workloads 'long,short,long'"});
  o.workloads = {"long"};
  o.long_mean = 5;
  o.long_max = 8;  // 2·5 − 1 = 9 > 8
  test::expect_throw_with<std::invalid_argument>([&] { bench_run(s, "tiny", o, ModelParallel{}); },
                                                 {"mean 5", "limit 8"});
}

// A scenario without [bench] (a tiny quickstart): its own RL step — rl.prompts_per_step ×
// rl.group_size sequences, the task's prompt, the response limit, rl.minibatches.
const char* kTinyQuickstart =
    "[model]\nvocab_size = 16\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_experts = 4\ntop_k = 2\nd_ff = 32\n"
    "max_seq_len = 24\n[task]\nname = sort\nlength = 4\nbase = 8\n"
    "[rl]\nprompts_per_step = 3\ngroup_size = 2\nminibatches = 2\n";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Bench, DerivesItsBatchFromAScenarioWithoutABenchSection) {
  test::ScratchDir dir;
  write_file(dir.file("q.ini"), kTinyQuickstart);
  bool has_bench = true;
  const Scenario s = bench_scenario_load(dir.file("q.ini"), {}, &has_bench);
  EXPECT_FALSE(has_bench);
  const std::unique_ptr<Task> task = task_create(s.task);
  const BenchShape sh = bench_shape_derive(s);
  EXPECT_EQ(sh.B, 3 * 2);
  EXPECT_EQ(sh.P, task->prompt_len());
  EXPECT_EQ(sh.R, task->max_answer_len());
  EXPECT_EQ(sh.T, sh.P + sh.R);
  EXPECT_EQ(sh.minibatches, 2);
  EXPECT_TRUE(sh.derived);

  BenchOptions o = quick();
  o.derive_shape = true;
  o.profiles = {"fp32-ref"};
  const BenchReport r = bench_run(s, "q", o, ModelParallel{});
  EXPECT_EQ(r.B, sh.B);
  EXPECT_EQ(r.P, sh.P);
  EXPECT_EQ(r.R, sh.R);
  EXPECT_EQ(r.T, sh.T);
  EXPECT_EQ(r.minibatches, 2);
  EXPECT_TRUE(r.shape_derived);
  ASSERT_EQ(r.steps.size(), 2u);  // fp32-ref, the recipe fp8-rollout + bf16-train
  const BenchWorkload* w = r.find_workload("short");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->tokens_real, static_cast<int64_t>(sh.B) * sh.T);
  for (const BenchStep& st : r.steps)
    for (double sec : {st.rollout_s, st.train_s, st.total_s}) {
      const double rate = static_cast<double>(w->tokens_real) / sec;
      EXPECT_TRUE(std::isfinite(rate) && rate > 0.0) << st.rollout_profile << " " << sec;
    }
  // the ceiling at the model's own sizes: a mini-batch's tokens (3 of the 6 sequences) × d_model × ...
  EXPECT_GT(r.ceiling_model_rollout, 0.0);
  EXPECT_GT(r.ceiling_model_train, 0.0);
  ASSERT_FALSE(r.shapes_train.empty());
  EXPECT_EQ(r.shapes_train[0].name, "qkvo");
  EXPECT_EQ(r.shapes_train[0].M, 3 * sh.T);
  EXPECT_EQ(r.shapes_train[0].N, 32);
  // memory per run
  EXPECT_GT(r.peak_rss_step_mib, 0.0);
  EXPECT_GT(r.params_bytes, 0);
  EXPECT_EQ(r.grads_bytes, r.params_bytes);
  EXPECT_EQ(r.optimizer_bytes, 2 * r.params_bytes);
  EXPECT_EQ(r.kv_bytes, int64_t{2} * 4 * 2 * sh.B * sh.T * 32);

  const std::string table = bench_format_table(r);
  for (const char* key : {"RL step of the scenario (rl.prompts_per_step x rl.group_size = 3 x 2", "2 mini-batches",
                          "at the model's own GEMM sizes", "% model", "memory per run (rank 0): peak RSS of the step"})
    EXPECT_NE(table.find(key), std::string::npos) << key;
  const std::string json = bench_format_json(r);
  for (const char* key : {"\"shape_derived\": true", "\"minibatches\": 2", "\"ceiling_model_train_gflops\"",
                          "\"gemm_shapes_train\"", "\"train_model_ceiling_share\"", "\"peak_rss_step_mib\"",
                          "\"kv_bytes\""})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  EXPECT_EQ(std::count(json.begin(), json.end(), '['), std::count(json.begin(), json.end(), ']'));
}

TEST(Bench, ABenchSectionKeepsItsMeaning) {
  test::ScratchDir dir;
  write_file(dir.file("b.ini"), std::string(kTinyQuickstart) + "[bench]\nsequences = 6\nseq_len = 12\nprompt_len = 4\n"
                                                                "decode_steps = 8\n");
  bool has_bench = false;
  (void)bench_scenario_load(dir.file("b.ini"), {}, &has_bench);
  EXPECT_TRUE(has_bench);
  write_file(dir.file("q.ini"), kTinyQuickstart);
  (void)bench_scenario_load(dir.file("q.ini"), {"bench.sequences=4"}, &has_bench);
  EXPECT_TRUE(has_bench);  // a --set bench.* names the section too
  const BenchShape sh = bench_shape_from_section(Scenario::defaults(kTiny));
  EXPECT_EQ(sh.B, 6);
  EXPECT_EQ(sh.T, 12);
  EXPECT_EQ(sh.minibatches, 1);
  EXPECT_FALSE(sh.derived);
}

TEST(Bench, ReadsAGridAsItsScenarioWithoutTheSweep) {
  test::ScratchDir dir;
  write_file(dir.file("q.ini"), kTinyQuickstart);
  write_file(dir.file("g.ini"), "[rl]\nminibatches = 3\n[sweep]\nbase = q.ini\nseeds = 0, 1\nvariants = a, b\n"
                                "[variant.b]\nrl.group_size = 4\n");
  bool has_bench = true;
  const Scenario s = bench_scenario_load(dir.file("g.ini"), {"rl.prompts_per_step=6"}, &has_bench);
  EXPECT_FALSE(has_bench);
  const BenchShape sh = bench_shape_derive(s);
  EXPECT_EQ(sh.B, 6 * 2);  // the base's group size, not variant b's; --set over the base
  EXPECT_EQ(sh.minibatches, 3);  // the grid's own key over the base's
  // and through the command, to its JSON
  std::vector<std::string> args = {"--scenario", dir.file("g.ini"), "--rounds", "1", "--gemm-n", "32",
                                   "--gemm-seconds", "0.001", "--profiles", "fp32-ref", "--recipe", "false",
                                   "--json", dir.file("b.json")};
  testing::internal::CaptureStdout();
  ASSERT_EQ(0, cmd_bench(comms_local(), args));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("RL step of the scenario"), std::string::npos) << out;
  const std::string json = read_file(dir.file("b.json"));
  EXPECT_NE(json.find("\"sequences\": 6, "), std::string::npos) << json.substr(0, 400);
  EXPECT_NE(json.find("\"minibatches\": 3"), std::string::npos);
}

TEST(Bench, RejectsADerivedBatchThatDoesNotFit) {
  test::ScratchDir dir;
  write_file(dir.file("q.ini"), kTinyQuickstart);
  bool has_bench = true;
  Scenario s = bench_scenario_load(dir.file("q.ini"), {}, &has_bench);
  s.model.max_seq_len = 6;  // below what the scenario's own validation lets through
  test::expect_throw_with<std::invalid_argument>(
      [&] { bench_shape_derive(s); }, {"task.sort prompt 5 + response limit 4 = 9 tokens", "model.max_seq_len = 6"});
  s.model.max_seq_len = 24;
  s.rl.minibatches = 7;
  test::expect_throw_with<std::invalid_argument>([&] { bench_shape_derive(s); },
                                                 {"rl.minibatches = 7", "the 6 sequences of a rollout"});
}

}  // namespace
}  // namespace moerl
