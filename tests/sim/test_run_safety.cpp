// test_run_safety.cpp — a run is one thing (docs/reliability.md): its results, its checkpoint and
// its scenario belong together. Rerunning over results needs --force; --resume refuses another
// scenario (naming the keys) and a missing checkpoint; a base or resumed checkpoint must be the
// scenario's model in every field; a run whose last write fails is never marked complete; output
// paths are checked before any work.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "sim/cli/cli.h"
#include "sim/io/model_io.h"
#include "sim/run.h"
#include "store/checkpoint.h"
#include "store/h5io.h"
#include "sim_test_util.h"
#include "../rl/rl_fixture.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

class RunSafety : public ::testing::Test {
 protected:
  RunSummary run(const Scenario& s, const std::string& out, bool resume = false, int max_steps = -1,
                 bool force = false, const std::string& base = "") {
    RunOptions o;
    o.out = out;
    o.cache_dir = dir_.file("cache");
    o.progress = false;
    o.resume = resume;
    o.force = force;
    o.max_steps = max_steps;
    o.base = base;
    return run_rl(s, o);
  }
  static int64_t steps_of(const std::string& out) { return H5File::open(out).attr_int("/", "steps"); }
  static std::string status_of(const std::string& out) { return H5File::open(out).attr_string("/", "status"); }
  ScratchDir dir_;
};

TEST_F(RunSafety, ResultsRecordTheScenarioAndItsHash) {
  const Scenario s = test::tiny_scenario({"rl.steps=1"});
  const std::string out = dir_.file("a.h5");
  run(s, out);
  const H5File f = H5File::open(out);
  EXPECT_EQ(f.attr_string("/", "scenario"), s.effective_text());
  EXPECT_EQ(f.attr_string("/", "scenario_hash"), run_scenario_hash(s.effective_text()));
  EXPECT_NE(run_scenario_hash(s.effective_text()),
            run_scenario_hash(test::tiny_scenario({"rl.steps=2"}).effective_text()));
}

TEST_F(RunSafety, RunOverExistingResultsNeedsForce) {
  const Scenario s = test::tiny_scenario({"rl.steps=3"});
  const std::string out = dir_.file("a.h5");
  run(s, out);
  expect_throw_with<std::invalid_argument>([&] { run(s, out, false, 1); },
                                           {out, "earlier run", "--force", "--resume"});
  EXPECT_EQ(steps_of(out), 3) << "the finished run was touched";
  EXPECT_EQ(status_of(out), "complete");
  run(s, out, false, 1, /*force=*/true);
  EXPECT_EQ(steps_of(out), 1);
}

TEST_F(RunSafety, ResumeRefusesAnotherScenarioNamingTheKeys) {
  const Scenario s = test::tiny_scenario({"rl.steps=3"});
  const std::string out = dir_.file("a.h5");
  run(s, out, false, 1);
  const Scenario other = test::tiny_scenario({"rl.steps=3", "rl.algorithm=r3", "run.seed=4"});
  expect_throw_with<std::invalid_argument>([&] { run(other, out, true); },
                                           {out, "different scenario", "rl.algorithm: grpo → r3", "run.seed: 3 → 4"});
  EXPECT_EQ(steps_of(out), 1);
  EXPECT_EQ(run(s, out, true).status, "complete");  // the same scenario resumes
}

TEST_F(RunSafety, ResumeWithTheCheckpointMissingIsAnError) {
  const Scenario s = test::tiny_scenario({"rl.steps=3"});
  const std::string out = dir_.file("a.h5");
  run(s, out, false, 2);
  std::filesystem::remove(run_checkpoint_path(out));
  expect_throw_with<std::invalid_argument>([&] { run(s, out, true); },
                                           {out, run_checkpoint_path(out), "missing", "--force"});
  EXPECT_EQ(steps_of(out), 2) << "the results were truncated";
  EXPECT_EQ(run(s, out, true, -1, /*force=*/true).steps, 3);  // --force starts over
}

TEST_F(RunSafety, BaseOfAnotherArchitectureIsRefusedNamingEveryField) {
  const Scenario s = test::tiny_scenario({"rl.steps=1"});
  const std::string base = run_base_checkpoint(s, dir_.file("cache"), false);
  const Scenario other = test::tiny_scenario({"rl.steps=1", "model.top_k=1", "model.d_ff=8"});
  const std::string out = dir_.file("b.h5");
  expect_throw_with<CheckpointError>([&] { run(other, out, false, -1, false, base); },
                                     {base, "model.top_k = 2 in the checkpoint, 1 in the scenario",
                                      "model.d_ff = 16 in the checkpoint, 8 in the scenario"});
  EXPECT_FALSE(std::filesystem::exists(out)) << "a results file was written for the wrong model";
}

TEST_F(RunSafety, ConfigDiffCoversEveryModelField) {
  ModelConfig a;
  EXPECT_TRUE(model_config_diff(a, a).empty());
  ModelConfig b = a;
  b.norm_topk_prob = !a.norm_topk_prob;
  b.z_loss_coef = 0.5f;
  b.scoring = Scoring::sigmoid;
  b.init_std = 0.5f;  // only initialises: not a difference of the trained model
  const auto d = model_config_diff(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NE(d[0].find("model.norm_topk_prob"), std::string::npos);
  EXPECT_NE(d[1].find("model.scoring"), std::string::npos);
  EXPECT_NE(d[2].find("model.z_loss_coef"), std::string::npos);
}

// The final checkpoint cannot be renamed into place (a directory holds its name): the run fails,
// and its results are not marked complete.
TEST_F(RunSafety, ARunWhoseLastWriteFailsIsNotComplete) {
  const Scenario s = test::tiny_scenario({"rl.steps=2"});
  const std::string out = dir_.file("a.h5");
  std::filesystem::create_directories(run_checkpoint_path(out) + "/blocker");
  EXPECT_THROW(run(s, out), std::exception);
  EXPECT_EQ(status_of(out), "running");
}

// Killed after the final checkpoint but before the final status: --resume ends the run with the
// status the uninterrupted run wrote, and changes no number.
TEST_F(RunSafety, ResumeAfterTheLastCheckpointFinishesTheRun) {
  const Scenario s = test::tiny_scenario({"rl.steps=2"});
  const std::string ref = dir_.file("ref.h5"), out = dir_.file("a.h5");
  run(s, ref);
  run(s, out);
  {  // what the kill leaves: status still "running"
    const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, H5T_VARIABLE);
    H5Tset_cset(ty, H5T_CSET_UTF8);
    const hid_t a = H5Aopen(f, "status", H5P_DEFAULT);
    const char* running = "running";
    H5Awrite(a, ty, &running);
    H5Aclose(a);
    H5Tclose(ty);
    H5Fclose(f);
    h5_seal_file(out);
  }
  ASSERT_EQ(status_of(out), "running");
  const RunSummary sum = run(s, out, true);
  EXPECT_EQ(sum.status, "complete");
  EXPECT_EQ(sum.steps, 2);
  EXPECT_EQ(status_of(out), "complete");
  EXPECT_EQ(steps_of(out), 2);
  EXPECT_EQ(test::run_metric(out, "reward_mean"), test::run_metric(ref, "reward_mean"));
}

TEST_F(RunSafety, UnwritableOutputFailsBeforeAnyWork) {
  const Scenario s = test::tiny_scenario({"rl.steps=1000"});
  const std::string out = "/dev/null/a.h5";  // a parent that is a file: unwritable even as root
  const auto t0 = std::chrono::steady_clock::now();
  expect_throw_with<H5Error>([&] { run(s, out); }, {out, "cannot create"});
  // sft too: 100000 warm-up steps would take minutes
  const std::string ini = dir_.file("tiny.ini");
  std::ofstream(ini) << test::kTinyScenario;
  const Comms c = comms_local();
  expect_throw_with<H5Error>([&] { cmd_sft(c, {ini, "--steps", "100000", "--out", "/dev/null/b.h5"}); },
                             {"/dev/null/b.h5", "cannot create"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
}

TEST(RunScenarioDiff, NamesChangedAddedAndRemovedKeysAndIgnoresComments) {
  const auto d = run_scenario_diff("# a\nrl.steps = 3\nrun.seed = 0\nx.y = 1\n", "# b\nrl.steps = 4\nrun.seed = 0\nz.w = 2\n");
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "rl.steps: 3 → 4");
  EXPECT_EQ(d[1], "x.y: 1 → (unset)");
  EXPECT_EQ(d[2], "z.w: (unset) → 2");
}

}  // namespace
}  // namespace moerl
