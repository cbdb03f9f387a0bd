// test_scenario.cpp — scenario parsing: a good file fills every struct, --set overrides win, user
// profiles shadow built-ins, the effective text is itself a scenario, and every kind of bad input
// is rejected with a message naming the key, the value and what is allowed.
#include <fstream>

#include <gtest/gtest.h>

#include "sim/rl/registry.h"
#include "sim/scenario/scenario.h"
#include "sim_test_util.h"

namespace moerl {
namespace {

using test::expect_throw_with;

const char* kGood = R"(# a scenario
[model]
vocab_size = 32
d_model = 64
n_layers = 2
n_heads = 4
n_experts = 8
top_k = 2
d_ff = 128
norm_topk_prob = false   # trailing comments are fine
scoring = sigmoid
load_balance = aux_loss
rope_theta = 500.5

[run]
seed = 18446744073709551615

[engines]
rollout = fast
train = fp32-ref

[audit]
prompts = 64
temperature = 0.7

[profile.fast]
base = fp8-rollout
router = fp32
gemm_order = split_k:4
batch_invariant = off

[profile.bf16-train]
base = fp32-ref
matmul = fp16
)";

TEST(Scenario, GoodFileFillsEveryStruct) {
  const Scenario s = Scenario::parse(kGood, "good.ini");
  EXPECT_EQ(s.model.vocab_size, 32);
  EXPECT_EQ(s.model.d_model, 64);
  EXPECT_EQ(s.model.n_experts, 8);
  EXPECT_FALSE(s.model.norm_topk_prob);
  EXPECT_EQ(s.model.scoring, Scoring::sigmoid);
  EXPECT_EQ(s.model.load_balance, LoadBalance::aux_loss);
  EXPECT_EQ(s.model.rope_theta, 500.5f);
  EXPECT_EQ(s.model.max_seq_len, ModelConfig{}.max_seq_len);  // untouched keys keep defaults
  EXPECT_EQ(s.run.seed, 18446744073709551615ull);
  EXPECT_EQ(s.engines.rollout, "fast");
  EXPECT_EQ(s.audit.prompts, 64);
  EXPECT_EQ(s.audit.prompt_len, 16);
  EXPECT_EQ(s.audit.temperature, 0.7f);

  // The user profile starts from its base and applies its own fields.
  const NumericsProfile fast = s.profile("fast");
  NumericsProfile base;
  ASSERT_TRUE(profile_builtin("fp8-rollout", &base));
  EXPECT_EQ(fast.name, "fast");
  EXPECT_EQ(fast.matmul, base.matmul);
  EXPECT_EQ(fast.act_scaling, base.act_scaling);
  EXPECT_EQ(fast.router, Format::fp32);
  EXPECT_EQ(fast.gemm_order.kind, OrderKind::split_k);
  EXPECT_EQ(fast.gemm_order.split, 4);
  EXPECT_FALSE(fast.batch_invariant);
  // User profiles are found before built-ins of the same name; other built-ins still resolve.
  EXPECT_EQ(s.profile("bf16-train").matmul, Format::fp16);
  EXPECT_EQ(s.profile("fp8-rollout").matmul, base.matmul);
  expect_throw_with<std::invalid_argument>([&] { s.profile("fp9"); },
                                           {"unknown profile 'fp9'", "fp32-ref", "fast"});
}

TEST(Scenario, ADuplicatedSetKeyIsAnErrorAsInAFile) {
  expect_throw_with<std::invalid_argument>(
      [] { Scenario::parse(kGood, "good.ini", {"model.d_model=128", "model.d_model = 256"}); },
      {"--set model.d_model = 256", "given more than once", "also --set model.d_model=128"});
}

TEST(Scenario, OverridesWinAndCanAddKeys) {
  const Scenario s = Scenario::parse(
      kGood, "good.ini",
      {"model.d_model = 256", "profile.fast.tie_break=random",
       "profile.new.base=bf16-train", "engines.train=new", "bench.sequences=8"});
  EXPECT_EQ(s.model.d_model, 256);  // a --set wins over the file
  EXPECT_EQ(s.profile("fast").tie_break, TieBreak::random);
  NumericsProfile bf16;
  ASSERT_TRUE(profile_builtin("bf16-train", &bf16));
  EXPECT_EQ(s.profile("new").matmul, bf16.matmul);
  EXPECT_EQ(s.engines.train, "new");
  EXPECT_EQ(s.bench.sequences, 8);
}

TEST(Scenario, DefaultsAreTheDocumentedOnes) {
  const Scenario s = Scenario::defaults();
  EXPECT_EQ(s.engines.rollout, "fp8-rollout");
  EXPECT_EQ(s.engines.train, "bf16-train");
  EXPECT_EQ(s.audit.prompts, 256);
  EXPECT_EQ(s.audit.prompt_len, 16);
  EXPECT_EQ(s.audit.response_len, 32);
  EXPECT_EQ(s.audit.temperature, 1.0f);
  EXPECT_EQ(s.bench.sequences, 256);
  EXPECT_EQ(s.bench.seq_len, 48);
  EXPECT_EQ(s.run.seed, 0u);
  EXPECT_TRUE(s.profiles.empty());
}

TEST(Scenario, EffectiveTextIsCanonicalAndReparsesToItself) {
  const Scenario s = Scenario::parse(kGood, "good.ini", {"model.init_std=0.013"});
  const std::string& eff = s.effective_text();
  EXPECT_NE(eff.find("model.d_model = 64\n"), std::string::npos) << eff;
  EXPECT_NE(eff.find("model.init_std = 0.013\n"), std::string::npos) << eff;
  EXPECT_NE(eff.find("model.norm_topk_prob = false\n"), std::string::npos) << eff;
  EXPECT_NE(eff.find("profile.fast.gemm_order = split_k:4\n"), std::string::npos) << eff;
  EXPECT_NE(eff.find("run.seed = 18446744073709551615\n"), std::string::npos) << eff;
  const Scenario again = Scenario::parse(eff, "effective");
  // Same text up to the first (source) line.
  EXPECT_EQ(eff.substr(eff.find('\n')), again.effective_text().substr(again.effective_text().find('\n')));
  EXPECT_EQ(again.model.init_std, 0.013f);
  EXPECT_EQ(again.profile("fast").gemm_order.split, 4);
}

TEST(Scenario, ReferenceListsEveryKeyWithItsDoc) {
  const std::string ref = Scenario::reference();
  for (const char* key : {"model.vocab_size = 64", "run.seed = 0", "engines.rollout = fp8-rollout",
                          "audit.prompts = 256", "bench.seq_len = 48", "profile.NAME.matmul",
                          "profile.NAME.base"})
    EXPECT_NE(ref.find(key), std::string::npos) << key;
}

// Each bad input: the text or override, and the parts its message must contain.
struct BadCase {
  std::string text;
  std::vector<std::string> overrides;
  std::vector<std::string> parts;
};

TEST(Scenario, BadInputsAreRejectedWithKeyValueAndAllowed) {
  const std::vector<BadCase> cases = {
      {"[model]\nd_modl = 64\n", {}, {"bad.ini", "unknown key 'model.d_modl'", "did you mean model.d_model?"}},
      {"[modle]\nd_model = 64\n", {}, {"unknown section [modle]", "sections: model"}},
      {"d_model = 64\n", {}, {"'d_model' outside any section"}},
      {"[model]\nd_model = abc\n", {}, {"bad.ini", "model.d_model = abc", "must be an integer"}},
      {"[model]\nd_model = 64.5\n", {}, {"model.d_model = 64.5", "must be an integer"}},
      {"[model]\nn_heads = 5\n", {}, {"model.n_heads = 5", "must divide model.d_model = 128"}},
      {"[model]\nn_experts = -1\n", {}, {"model.n_experts = -1", "must be in [0, 256]"}},
      {"[model]\nnorm_topk_prob = maybe\n", {}, {"model.norm_topk_prob = maybe", "true or false"}},
      {"[model]\nscoring = relu\n", {}, {"model.scoring = relu", "softmax or sigmoid"}},
      {"[model]\nrope_theta = nan\n", {}, {"model.rope_theta = nan", "finite"}},
      {"[model]\ninit_std = 20\n", {}, {"model.init_std = 20", "must be in (0, 10)"}},
      {"[run]\nseed = -1\n", {}, {"run.seed = -1", "integer in [0, 2^64)"}},
      {"[audit]\nprompts = 0\n", {}, {"audit.prompts = 0", "must be >= 1"}},
      {"[audit]\ntemperature = -1\n", {}, {"audit.temperature = -1", "must be >= 0"}},
      {"[bench]\nseq_len = 1\n", {}, {"bench.seq_len = 1", "must be >= 2"}},
      {"[engines]\nrollout = fp9\n", {}, {"engines.rollout = fp9", "unknown profile", "fp8-rollout"}},
      {"[profile.x]\nbase = fp9\n", {}, {"profile.x.base = fp9", "must be a built-in profile", "fp32-ref"}},
      {"[profile.x]\nmatmul = fp7\n", {}, {"profile.x.matmul = fp7", "fp8_e4m3"}},
      {"[profile.x]\nmatmull = bf16\n", {}, {"unknown key 'profile.x.matmull'", "did you mean profile.x.matmul?"}},
      {"[profile.x]\ngemm_order = split_k:99\n", {}, {"profile.x.gemm_order = split_k:99", "split_k:N"}},
      {"[profile.x]\nscale_block = 0\n", {}, {"profile.x.scale_block = 0"}},
      {"[profile.x]\ntie_break = coin\n", {}, {"profile.x.tie_break = coin", "lowest, highest or random"}},
      {"[profile.a.b]\nmatmul = bf16\n", {}, {"profile.a.b.matmul", "profile.NAME.field"}},
      {"[model]\nd_model = 64\nd_model = 128\n", {}, {"bad.ini", "'model.d_model' is given more than once"}},
      {"[model]\nthis line has no equals sign\n", {}, {"bad.ini"}},
      {"", {"model.d_model"}, {"--set model.d_model", "expected section.key=value"}},
      {"", {"seed=3"}, {"--set seed=3", "has no section"}},
      {"", {"model.d_model=x"}, {"--set", "model.d_model = x", "must be an integer"}},
      {"", {"model.d_modle=64"}, {"--set", "unknown key 'model.d_modle'", "did you mean model.d_model?"}},
      // a key of another section: the same field name where it exists
      {"", {"model.steps=20"}, {"--set", "unknown key 'model.steps'", "did you mean", "rl.steps"}},
      // a grid given to moerl run
      {"[sweep]\nseeds = 0, 1\n", {}, {"bad.ini", "this is a grid: use moerl sweep bad.ini"}},
      {"[rl]\nalgorithm = ppo\n", {}, {"rl.algorithm = ppo", algorithm_must_be()}},  // every row's name
      {"[rl]\nminibatches = 3\n", {}, {"rl.minibatches = 3", "must divide the sequences per step"}},
      {"[rl]\nrouting_replay = r4\n", {}, {"rl.routing_replay = r4", "none, old or rollout"}},
      {"[rl]\naggregation = mean\n", {}, {"rl.aggregation = mean", "token-mean"}},
      {"[rl]\ncorrection = seq_mis\n", {}, {"rl.correction = seq_mis", "seq-mis", "tis+seq-mis", "seq-max-k3"}},
      {"[rl]\nseq_mask_low = 1.01\n", {}, {"rl.seq_mask_low = 1.01", "rl.seq_mask_high"}},
      {"[rl]\ncorrection_cap_low = 3\n", {}, {"rl.correction_cap_low = 3", "rl.correction_cap"}},
      {"[precursors]\nwindow = 0\n", {}, {"precursors.window = 0", "must be >= 1"}},
      {"[precursors]\ness_drop = 2\n", {}, {"precursors.ess_drop = 2", "(0, 1)"}},
      {"[rl]\neval_profile = fp9\n", {}, {"rl.eval_profile = fp9", "unknown profile"}},
      {"[task]\nname = parity\n", {}, {"task.name = parity", "modadd, reverse, sort"}},
      {"[task]\nbase = 70\n", {}, {"task.sort", "needs model.vocab_size >= 71", "(is 64)"}},
      {"[task]\nlength = 40\n", {}, {"task.length = 40", "needs model.max_seq_len >= 81"}},
      {"[optim]\nlr = 2\n", {}, {"optim.lr = 2", "must be in (0, 1)"}},
      {"[sft]\nbatch = 0\n", {}, {"sft.batch = 0", "must be in [1, 65536]"}},
      {"[run]\nbackend = gpu\n", {}, {"run.backend = gpu", "must be cpu or cuda"}},
      {"[profile.x]\natomics = true\n", {}, {"profile.x.atomics = true", "needs gemm_order = split_k:N",
                                              "gemm_order is fixed"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.text + (c.overrides.empty() ? "" : " --set " + c.overrides[0]));
    expect_throw_with<std::invalid_argument>([&] { Scenario::parse(c.text, "bad.ini", c.overrides); },
                                             c.parts);
  }
}

TEST(Scenario, LoadReadsFilesAndNamesMissingOnes) {
  test::ScratchDir dir;
  const std::string path = dir.file("s.ini");
  std::ofstream(path) << "[model]\nd_model = 64\n";
  EXPECT_EQ(Scenario::load(path).model.d_model, 64);
  EXPECT_EQ(Scenario::load(path).source(), path);
  expect_throw_with<std::invalid_argument>([&] { Scenario::load(dir.file("none.ini")); },
                                           {"none.ini", "cannot read"});
}

TEST(Scenario, BenchIniIsTheReferenceWorkload) {
  const Scenario s = Scenario::load(std::string(MOERL_SOURCE_DIR) + "/scenarios/bench.ini");
  EXPECT_EQ(s.model.vocab_size, 64);
  EXPECT_EQ(s.model.d_model, 128);
  EXPECT_EQ(s.model.n_layers, 4);
  EXPECT_EQ(s.model.n_heads, 4);
  EXPECT_EQ(s.model.n_experts, 16);
  EXPECT_EQ(s.model.top_k, 2);
  EXPECT_TRUE(s.model.norm_topk_prob);
  EXPECT_EQ(s.model.scoring, Scoring::softmax);
  EXPECT_EQ(s.model.d_ff, 256);
  EXPECT_EQ(s.audit.prompt_len + s.audit.response_len, 48);
  EXPECT_EQ(s.audit.prompts, 256);
  EXPECT_EQ(s.bench.sequences, 256);
  EXPECT_EQ(s.bench.seq_len, 48);
  EXPECT_LE(s.bench.seq_len, s.model.max_seq_len);
}

}  // namespace
}  // namespace moerl
