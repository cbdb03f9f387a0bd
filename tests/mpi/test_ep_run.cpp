// RL runs over the ranks of test_mpi against the same run in one process (deterministic mode:
// every metric and the final checkpoint bit for bit), and bad input that must fail on every rank
// at once instead of leaving ranks waiting in a collective.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "../rl/rl_fixture.h"
#include "ep_fixture.h"
#include "store/checkpoint.h"
#include "store/h5io.h"
#include "mpi_env.h"
#include "sim/jobs/run.h"

namespace moerl {
namespace {

// A scratch directory named by the root, shared by every rank, removed at the end.
class SharedDir {
 public:
  SharedDir() {
    const RankGrid& g = test::mpi_grid();
    std::string p;
    if (g.is_root()) {
      std::string tmpl = std::filesystem::temp_directory_path().string() + "/moerl-mpi-XXXXXX";
      p = mkdtemp(tmpl.data()) ? tmpl : "";
    }
    path_ = g.broadcast(p);
  }
  ~SharedDir() {
    test::mpi_grid().wait();
    std::error_code ec;
    if (test::mpi_grid().is_root()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<double> metric(const H5File& f, const std::string& name) {
  const auto shape = f.shape(name);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  f.read(name, shape, v.data());
  return v;
}

// The tiny RL scenario in deterministic mode with rank-invariant engines (FP8 with fixed orders
// for the rollout, BF16 for training).
Scenario scenario(std::vector<std::string> sets) {
  for (const char* s : {"run.deterministic=true", "rl.steps=2", "model.n_experts=4",
                        "profile.fp8det.base=fp8-rollout", "profile.fp8det.gemm_order=fixed",
                        "profile.fp8det.attn_order=fixed", "profile.fp8det.norm_order=fixed",
                        "profile.fp8det.combine_order=fixed", "profile.fp8det.batch_invariant=true",
                        "profile.fp8det.tie_break=lowest", "engines.rollout=fp8det",
                        "engines.train=bf16-train"})
    sets.insert(sets.begin(), s);
  return test::tiny_scenario(sets);
}

TEST(EpRun, TwoStepRunMetricsAndCheckpointBitIdenticalToOneRank) {
  const RankGrid& g = test::mpi_grid();
  const SharedDir dir;
  const std::vector<std::vector<std::string>> variants = {
      {"rl.algorithm=grpo", "model.load_balance=aux_loss", "model.z_loss_coef=0.01", "rl.kl_coef=0.05",
       "rl.drift_probes=8"},
      {"rl.algorithm=r3", "model.expert_bias=true", "profile.fp8det.ep_layout=strided:2"},
      {"rl.algorithm=rspo", "model.load_balance=seq_aux_loss", "rl.shared_prefix_routing=true"},
      {"rl.algorithm=gspo", "rl.routing_replay=old", "rl.rollout_staleness=1"},
      // responses of their own length (EOS or truncated at 12), different within a group; the
      // decode loop ends together on every rank
      {"task.name=bubble", "task.length=4", "task.base=6", "model.max_seq_len=24", "rl.max_response_len=12",
       "rl.truncated_reward=0.5", "rl.filter_groups=true", "rl.drift_probes=6"},
      {"task.name=bubble", "task.length=4", "task.base=6", "model.max_seq_len=24", "rl.max_response_len=12",
       "rl.algorithm=r3", "rl.aggregation=seq-mean-token-sum-norm", "rl.overlong_buffer=4",
       "rl.mask_truncated=true"}};
  for (size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE(variants[v].front());
    const Scenario s = scenario(variants[v]);
    const std::string tag = std::to_string(v);
    RunOptions one;  // this rank alone
    one.out = dir.file("one" + tag + "_rank" + std::to_string(g.rank()) + ".h5");
    one.cache_dir = dir.file("cache_rank" + std::to_string(g.rank()));
    one.progress = false;
    const RunSummary a = run_rl(s, one);
    RunOptions all = one;  // all ranks together
    all.out = dir.file("all" + tag + ".h5");
    all.cache_dir = dir.file("cache_all");
    all.grid = &g;
    const RunSummary b = run_rl(s, all);
    EXPECT_EQ(a.status, b.status);
    if (!g.is_root()) continue;  // the root holds both files
    const H5File fa = H5File::open(one.out), fb = H5File::open(all.out);
    int compared = 0;
    for (const std::string& name : fa.datasets_below("metrics")) {
      if (name.find("time_") != std::string::npos) continue;  // wall-clock
      const auto x = metric(fa, name), y = metric(fb, name);
      if (name == "metrics/a2a_bytes" || name == "metrics/tokens_received") {
        EXPECT_EQ(x.size() * g.size(), y.size()) << name;  // [steps, L, ranks]
        continue;
      }
      EXPECT_TRUE(test::bits_equal(x, y)) << name;
      ++compared;
    }
    EXPECT_GT(compared, 20);
    if (v == 0 || v == 4) {
      EXPECT_TRUE(fa.exists("metrics/router_drift"));  // the probe's DP split compared too
    }
    ModelConfig ca, cb;
    ParamStore pa, pb;
    CheckpointExtras ea, eb;
    checkpoint_load(run_checkpoint_path(one.out), &ca, &pa, &ea);
    checkpoint_load(run_checkpoint_path(all.out), &cb, &pb, &eb);
    EXPECT_TRUE(test::bits_equal(pa.data(), pb.data())) << "checkpoint parameters";
    ASSERT_EQ(ea.arrays.size(), eb.arrays.size());
    for (size_t i = 0; i < ea.arrays.size(); ++i)
      EXPECT_TRUE(test::bits_equal(ea.arrays[i].second, eb.arrays[i].second)) << ea.arrays[i].first;
  }
}

TEST(EpRun, BadInputFailsOnEveryRankAtOnce) {
  const RankGrid& g = test::mpi_grid();
  const int n = g.size();
  if (n > 1) {  // n_experts not divisible by the expert-parallel ranks
    ModelConfig cfg = test::ep_config();
    cfg.n_experts = n + 1;
    Model m(cfg);
    EXPECT_THROW(m.set_parallel(g.model_parallel(0)), std::invalid_argument);
    // more ranks than sequences per step
    const SharedDir dir;
    const Scenario s = scenario({"rl.prompts_per_step=1", "rl.group_size=" + std::to_string(n - 1 > 0 ? n - 1 : 1),
                                 "rl.minibatches=1"});
    RunOptions o;
    o.out = dir.file("r.h5");
    o.cache_dir = dir.file("cache");
    o.progress = false;
    o.grid = &g;
    try {
      run_rl(s, o);
      ADD_FAILURE() << "expected an error";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("fewer sequences than the"), std::string::npos) << e.what();
    }
  }
  // an error on one rank only, inside a checked phase, reaches every rank with its message
  try {
    g.checked([&] {
      if (g.rank() == n - 1) throw std::runtime_error("disk full on the last rank");
    });
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("disk full on the last rank"), std::string::npos);
  }
  // a world that does not divide into groups of 3
  if (test::mpi_world().size % 3 != 0) {
    EXPECT_THROW(RankGrid(test::mpi_world(), 3), ExitError);
  }
}

}  // namespace
}  // namespace moerl
