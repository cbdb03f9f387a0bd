// test_commands.cpp — the commands end to end, in-process, on a tiny model: sft writes the
// initialised checkpoint; score is deterministic and lays out [L, N, T, K] routing correctly;
// an audit of a profile against itself finds exactly nothing, against another profile something.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "kernels/rng.h"
#include "store/checkpoint.h"
#include "store/h5io.h"
#include "models/model.h"
#include "sim/cli/cli.h"
#include "sim/io/results.h"
#include "sim/scenario/scenario.h"
#include "../sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;

const std::string kTiny = "[model]\nvocab_size = 16\n" + test::kTinyMoeLines + R"([run]
seed = 7
[audit]
prompts = 6
prompt_len = 4
response_len = 6
)";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Commands : public ::testing::Test {
 protected:
  void SetUp() override {
    scenario_ = dir_.file("tiny.ini");
    std::ofstream(scenario_) << kTiny;
    ckpt_ = dir_.file("tiny.h5");
    ASSERT_EQ(0, cmd_sft(comms_, {scenario_, "--steps", "0", "--out", ckpt_}));
  }
  // tokens [N, T] uniform in [0, V), seeded.
  std::string write_tokens(const std::string& name, int N, int T, int V,
                           const std::vector<int32_t>& lengths = {}) {
    std::vector<int32_t> t(static_cast<size_t>(N) * T);
    Rng rng(rng_derive(3, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(N)}));
    for (int32_t& x : t) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    const std::string path = dir_.file(name);
    H5File f = H5File::create(path);
    f.write("tokens", {N, T}, t.data());
    if (!lengths.empty()) f.write("lengths", {static_cast<int64_t>(lengths.size())}, lengths.data());
    f.commit();
    tokens_ = t;
    return path;
  }

  ScratchDir dir_;
  Comms comms_ = comms_local();
  std::string scenario_, ckpt_;
  std::vector<int32_t> tokens_;
};

TEST_F(Commands, SftWritesTheInitialisedModel) {
  const Scenario s = Scenario::load(scenario_);
  ModelConfig cfg;
  ParamStore p;
  CheckpointExtras ex;
  checkpoint_load(ckpt_, &cfg, &p, &ex);
  EXPECT_EQ(cfg.d_model, 32);
  EXPECT_EQ(cfg.n_experts, 4);
  ParamStore expected(s.model);
  params_init(&expected, s.model, 7);
  EXPECT_EQ(p.data(), expected.data());
  EXPECT_EQ(ex.scalars, (std::vector<std::pair<std::string, int64_t>>{{"seed", 7}, {"sft_steps", 0}, {"step", 0}}));
}

TEST_F(Commands, SftStepsTrainTheBasePolicyOnTheTask) {
  const std::string out = dir_.file("sft.h5");
  ASSERT_EQ(0, cmd_sft(comms_, {scenario_, "--steps", "3", "--out", out, "--set", "sft.batch=4",
                                "--set", "task.length=4", "--set", "rl.eval_prompts=4"}));
  ModelConfig cfg;
  ParamStore init, trained;
  CheckpointExtras ex;
  checkpoint_load(ckpt_, &cfg, &init, nullptr);
  checkpoint_load(out, &cfg, &trained, &ex);
  EXPECT_NE(init.data(), trained.data());
  EXPECT_EQ(ex.scalars[1], (std::pair<std::string, int64_t>{"sft_steps", 3}));
}

TEST_F(Commands, UsageErrorsExitWithTwo) {
  auto code_of = [&](auto&& fn) {
    try {
      fn();
    } catch (const ExitError& e) {
      return e.code();
    }
    return 0;
  };
  EXPECT_EQ(2, code_of([&] { cmd_sft(comms_, {scenario_, "--steps", "-1", "--out", dir_.file("x.h5")}); }));
  EXPECT_EQ(2, code_of([&] { cmd_sft(comms_, {scenario_, "--out", dir_.file("x.h5"), "--bogus"}); }));
  EXPECT_EQ(2, code_of([&] { cmd_score(comms_, {"--checkpoint", ckpt_}); }));  // missing options
  EXPECT_EQ(2, code_of([&] {
    cmd_audit(comms_, {"--checkpoint", ckpt_, "--out", dir_.file("a.txt")});
  }));
  EXPECT_EQ(0, cmd_score(comms_, {"--help"}));
  EXPECT_FALSE(std::ifstream(dir_.file("x.h5")).good());
}

TEST_F(Commands, DispatchFindsCommandsByNameAndRejectsOthers) {
  std::vector<std::string> words = {"moerl", "frob"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  test::expect_usage_error([&] { cli_main(comms_, 2, argv.data()); },
                           {"unknown command 'frob'", "sft", "score", "audit", "bench"});
  words = {"moerl", "--help"};
  argv = {words[0].data(), words[1].data()};
  EXPECT_EQ(0, cli_main(comms_, 2, argv.data()));
  words = {"moerl", "sft", scenario_, "--out", dir_.file("via-cli.h5")};
  argv.clear();
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_EQ(0, cli_main(comms_, 5, argv.data()));
  EXPECT_TRUE(H5File::open(dir_.file("via-cli.h5")).exists("params/embed"));
}

TEST_F(Commands, ScoreIsDeterministicAndLaysOutRoutingAsLNTK) {
  const int N = 5, T = 9, L = 2, K = 2;
  const std::string tok = write_tokens("tok.h5", N, T, 16);
  const std::string o1 = dir_.file("s1.h5"), o2 = dir_.file("s2.h5");
  // Batches of 2 (the last one partial) and of 5: the same numbers under the batch-invariant
  // fp32-ref profile, and the same bytes for the same command.
  ASSERT_EQ(0, cmd_score(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile", "fp32-ref",
                                  "--out", o1, "--batch", "2"}));
  ASSERT_EQ(0, cmd_score(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile", "fp32-ref",
                                  "--out", o2, "--batch", "2"}));
  EXPECT_EQ(slurp(o1), slurp(o2));

  const H5File f = H5File::open(o1);
  EXPECT_EQ(f.attr_string("/", "profile"), "fp32-ref");
  EXPECT_EQ(f.attr_string("/", "checkpoint"), ckpt_);
  std::vector<int64_t> shape;
  const std::vector<float> logp = f.read_f32("logprobs", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{N, T - 1}));
  const std::vector<int32_t> ids = f.read_i32("topk_ids", &shape);
  EXPECT_EQ(shape, (std::vector<int64_t>{L, N, T, K}));

  // Against one direct forward over all N sequences: topk_ids[l, n, t, k] = ids[l, n*T + t, k].
  ModelConfig cfg;
  ParamStore p;
  checkpoint_load(ckpt_, &cfg, &p);
  Model m(cfg);
  m.params().data() = p.data();
  m.invalidate_packed_weights();
  ForwardResult r;
  ForwardRequest req;
  req.tokens = tokens_.data();
  req.B = N;
  req.T = T;
  m.forward(&r, req);
  EXPECT_EQ(0, std::memcmp(r.logprobs.data(), logp.data(), logp.size() * sizeof(float)));
  EXPECT_EQ(r.topk_ids, ids);  // [L, N*T, K] and [L, N, T, K] are the same row-major layout
}

// A tokens file with `lengths`: score leaves the padding NaN and writes the lengths; audit counts
// only each sequence's own positions.
TEST_F(Commands, ScoreAndAuditHonourSequenceLengths) {
  const int N = 4, T = 9;
  const std::vector<int32_t> lengths = {9, 5, 2, 7};
  const std::string tok = write_tokens("len.h5", N, T, 16, lengths);
  const std::string o = dir_.file("len-score.h5");
  ASSERT_EQ(0, cmd_score(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile", "fp32-ref", "--out", o}));
  const H5File f = H5File::open(o);
  const std::vector<float> logp = f.read_f32("logprobs");
  EXPECT_EQ(f.read_i32("lengths"), lengths);
  for (int n = 0; n < N; ++n)
    for (int t = 0; t + 1 < T; ++t)
      EXPECT_EQ(std::isnan(logp[n * (T - 1) + t]), t + 1 >= lengths[n]) << n << "," << t;
  const std::string j = dir_.file("len-audit.json");
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile-a", "fp8-rollout",
                                  "--profile-b", "bf16-train", "--out", j}));
  // positions 1..len−1 of each sequence: 8 + 4 + 1 + 6
  EXPECT_NE(slurp(j).find("\"tokens\": 19,"), std::string::npos) << slurp(j);
  const std::string bad = write_tokens("bad-len.h5", N, T, 16, {9, 5, 10, 7});
  try {
    cmd_score(comms_, {"--checkpoint", ckpt_, "--tokens", bad, "--profile", "fp32-ref"});
    FAIL() << "a length beyond T";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("lengths[2] = 10: must be in [2, T = 9]"), std::string::npos) << e.what();
  }
}

// Audit's sampled responses end at the task's EOS: fewer positions than without it.
TEST_F(Commands, AuditOfSampledResponsesEndsAtEos) {
  const std::string eos_ini = dir_.file("eos.ini");
  std::ofstream(eos_ini) << kTiny << "[task]\nname = bubble\nlength = 3\nbase = 4\n[rl]\nmax_response_len = 6\n";
  const std::string a = dir_.file("plain.json"), b = dir_.file("eos.json");
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", ckpt_, "--scenario", scenario_, "--out", a}));
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", ckpt_, "--scenario", eos_ini, "--out", b}));
  EXPECT_NE(slurp(a).find("\"tokens\": 36,"), std::string::npos);
  const std::string jb = slurp(b);
  const size_t at = jb.find("\"tokens\": ");
  ASSERT_NE(at, std::string::npos);
  const int n = std::stoi(jb.substr(at + 10));
  EXPECT_LT(n, 36) << "some sampled response drew EOS (id 5 of 16) within 6 tokens";
  EXPECT_GE(n, 6) << "every response keeps at least its first token";
  EXPECT_NE(jb.find("ended at EOS"), std::string::npos);
}

TEST_F(Commands, AuditOfAProfileAgainstItselfIsExactlyZero) {
  // Sampled tokens (generation under A), and a noisy profile: its noise is keyed, not random.
  const std::string out = dir_.file("self.json");
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", ckpt_, "--scenario", scenario_, "--profile-a",
                                  "fp8-rollout", "--profile-b", "fp8-rollout", "--out", out}));
  const std::string j = slurp(out);
  EXPECT_NE(j.find("\"flip_rate\": [0, 0]"), std::string::npos) << j;
  EXPECT_NE(j.find("\"any_flip_share\": 0,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"kl\": 0,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"k3\": 0,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"max_abs_dlogp\": 0,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"alarm\": false"), std::string::npos) << j;
  // 6 sequences × 6 response positions.
  EXPECT_NE(j.find("\"tokens\": 36,"), std::string::npos) << j;
  EXPECT_NE(j.find("\"routing_tokens\": 36,"), std::string::npos) << j;
}

TEST_F(Commands, AuditAcrossProfilesSeesTheMismatch) {
  const std::string tok = write_tokens("tok.h5", 8, 12, 16);
  const std::string out = dir_.file("fp8.h5");
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile-a",
                                  "fp8-rollout", "--profile-b", "fp32-ref", "--out", out}));
  const H5File f = H5File::open(out);
  EXPECT_EQ(f.attr_int("/", "tokens"), 8 * 11);  // every position t >= 1 of given tokens
  EXPECT_GT(f.attr_double("/", "kl"), 0.0);
  EXPECT_GT(f.attr_double("/", "max_abs_dlogp"), 0.0);
  EXPECT_EQ(f.attr_string("/", "profile_a"), "fp8-rollout");
}

TEST_F(Commands, DenseCheckpointsAuditWithoutRouting) {
  const std::string dense = dir_.file("dense.h5");
  ASSERT_EQ(0, cmd_sft(comms_, {scenario_, "--out", dense, "--set", "model.n_experts=0"}));
  const std::string out = dir_.file("dense.json");
  ASSERT_EQ(0, cmd_audit(comms_, {"--checkpoint", dense, "--scenario", scenario_, "--profile-a",
                                  "bf16-train", "--profile-b", "fp32-ref", "--out", out}));
  const std::string j = slurp(out);
  EXPECT_NE(j.find("\"flip_rate\": []"), std::string::npos) << j;
  EXPECT_NE(j.find("\"alarm\": false"), std::string::npos) << j;
  const std::string tok = write_tokens("tok.h5", 3, 6, 16);
  const std::string s = dir_.file("dense-score.h5");
  ASSERT_EQ(0, cmd_score(comms_, {"--checkpoint", dense, "--tokens", tok, "--profile", "fp32-ref",
                                  "--out", s}));
  EXPECT_FALSE(H5File::open(s).exists("topk_ids"));
}

TEST_F(Commands, ScoreRejectsTokensOutsideTheVocabulary) {
  const std::string tok = write_tokens("big.h5", 2, 5, 40);  // ids up to 39, vocab 16
  test::expect_throw_with<std::runtime_error>(
      [&] {
        cmd_score(comms_, {"--checkpoint", ckpt_, "--tokens", tok, "--profile", "fp32-ref"});
      },
      {tok, "tokens: id", "outside [0, vocab_size = 16)"});
}

// A results file from before the `correction` attribute: inspect takes the correction the
// algorithm's row forces (icepop), not a comparison with the algorithm's name.
TEST_F(Commands, InspectTakesAnOlderFilesCorrectionFromTheAlgorithmsRow) {
  const std::string path = dir_.file("old.h5");
  RunResults r;
  r.attrs = {{"algorithm", "icepop"}, {"routing_replay", "none"}, {"status", "complete"},
             {"scenario", "rl.algorithm = icepop\nrl.correction = none\n"}};
  r.begin_step(0);
  r.set("reward_mean", 0.5);
  r.write(path);
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(0, cmd_inspect(comms_, {path}));
  std::fflush(stdout);
  const std::string out = ::testing::internal::GetCapturedStdout();
  // the second table's row: the file, its correction, then the numbers
  EXPECT_TRUE(std::regex_search(out, std::regex("old\\.h5 +icepop +(nan|[0-9])"))) << out;
}

}  // namespace
}  // namespace moerl
