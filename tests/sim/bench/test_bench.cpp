// `moerl bench` (sim/bench/bench.h, sim/cli/cmd_bench.cpp) on a tiny model: the steps it times, the
// analytic FLOPs and routing-record size it reports, the targets it derives (the peer's ratio
// among them), the JSON and table it writes, and the errors of a bench section that does not fit.
// Times are not checked (the machine is shared); only what the report must contain.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "sim/bench/bench.h"
#include "sim/cli/cli.h"
#include "sim/bench/flops.h"
#include "sim/rl/routing_record.h"
#include "sim/scenario.h"
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

TEST(Bench, RejectsABenchSectionThatDoesNotFit) {
  std::vector<std::string> bad = kTiny;
  bad.push_back("bench.decode_steps=7");  // 4 + 7 != 12
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

}  // namespace
}  // namespace moerl
