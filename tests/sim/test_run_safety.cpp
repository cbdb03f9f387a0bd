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
#include "sim/jobs/run.h"
#include "store/checkpoint.h"
#include "store/h5io.h"
#include "store/output_lock.h"
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
  const std::string out = dir_.file("a.h5"), ckpt = run_checkpoint_path(out);
  RunOptions o;
  o.out = out;
  o.cache_dir = dir_.file("cache");
  o.progress = false;
  // after the first step (a directory there beforehand is refused before any work)
  o.on_step = [&] {
    std::filesystem::remove(ckpt);
    std::filesystem::create_directories(ckpt + "/blocker");
  };
  EXPECT_THROW(run_rl(s, o), std::exception);
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
  // the attributes every step sets survive a resume that takes no step
  EXPECT_EQ(H5File::open(out).attr_int("/", "position_bucket_width"), H5File::open(ref).attr_int("/", "position_bucket_width"));
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

// ---- the run's files are one thing (issue 26) ---------------------------------------------------

namespace {
// Rewrites root attributes of an HDF5 file in place (and renews its integrity header), as an
// older moerl or another tool would have written it: `drop` removed, `ints` set.
void edit_attrs(const std::string& path, const std::string& obj, const std::vector<std::string>& drop,
                const std::vector<std::pair<std::string, int64_t>>& ints) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t g = H5Oopen(f, obj.c_str(), H5P_DEFAULT);
  for (const std::string& k : drop) H5Adelete(g, k.c_str());
  for (const auto& [k, v] : ints) {
    if (H5Aexists(g, k.c_str()) > 0) H5Adelete(g, k.c_str());
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(g, k.c_str(), H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
  }
  H5Oclose(g);
  H5Fclose(f);
  h5_seal_file(path);
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

// Case 1: a results file of the format before the integrity work has no `scenario` attribute; it
// was resumed, relabelled with the new scenario and marked complete.
TEST_F(RunSafety, ResumeRefusesResultsWithoutTheirScenario) {
  const Scenario s = test::tiny_scenario({"rl.steps=4"});
  const std::string out = dir_.file("a.h5");
  run(s, out, false, 2);
  edit_attrs(out, "/", {"scenario"}, {{"version", 1}});
  const std::string before = bytes_of(out);
  const Scenario r3 = test::tiny_scenario({"rl.steps=4", "rl.algorithm=r3"});
  expect_throw_with<std::invalid_argument>([&] { run(r3, out, true); },
                                           {out, "no 'scenario' attribute", "--resume --force", "inspect"});
  EXPECT_EQ(bytes_of(out), before) << "the old results were touched";
  EXPECT_EQ(run(s, out, true, -1, /*force=*/true).steps, 4);  // --resume --force starts over
  const std::string v1 = dir_.file("v1.h5");  // with its scenario, but of another format version
  run(s, v1, false, 2);
  edit_attrs(v1, "/", {}, {{"version", 1}});
  expect_throw_with<std::invalid_argument>([&] { run(s, v1, true); }, {v1, "version 1", "resumes version 2"});
}

// Case 2: a checkpoint of another seed's run (the same model) beside these results.
TEST_F(RunSafety, ResumeRefusesAnotherRunsCheckpointNamingTheField) {
  const Scenario s = test::tiny_scenario({"rl.steps=4"}), other = test::tiny_scenario({"rl.steps=4", "run.seed=9"});
  const std::string out = dir_.file("a.h5"), foreign = dir_.file("b.h5");
  run(s, out, false, 2);
  run(other, foreign, false, 2);
  std::filesystem::copy_file(run_checkpoint_path(foreign), run_checkpoint_path(out),
                             std::filesystem::copy_options::overwrite_existing);
  expect_throw_with<std::invalid_argument>([&] { run(s, out, true); },
                                           {out, "not one run", "seed = 9 in " + run_checkpoint_path(out), "3 in"});
  EXPECT_EQ(steps_of(out), 2);
}

// Case 9 (one process): the rank layout is part of the identity, checked before any step.
TEST_F(RunSafety, ResumeRefusesAnotherRankLayoutBeforeAnyStep) {
  const Scenario s = test::tiny_scenario({"rl.steps=4"});
  const std::string out = dir_.file("a.h5");
  run(s, out, false, 2);
  EXPECT_EQ(H5File::open(out).attr_int("/", "ranks"), 1);
  EXPECT_EQ(H5File::open(run_checkpoint_path(out)).attr_int("state", "ranks"), 1);
  edit_attrs(out, "/", {}, {{"ranks", 2}});
  edit_attrs(run_checkpoint_path(out), "state", {}, {{"ranks", 2}});
  const std::string before = bytes_of(out);
  expect_throw_with<std::invalid_argument>([&] { run(s, out, true); },
                                           {"ranks = 2 in " + out, "ranks = 2 in " + run_checkpoint_path(out), "1 now"});
  EXPECT_EQ(bytes_of(out), before);
}

// Case 3: one writer per output — a held lock refuses, naming the holder; the lock goes with the run.
TEST_F(RunSafety, ASecondWriterOfTheSameOutputIsRefused) {
  const Scenario s = test::tiny_scenario({"rl.steps=1"});
  const std::string out = dir_.file("a.h5");
  {
    const OutputLock held = OutputLock::take(out, "--out");
    expect_throw_with<std::runtime_error>([&] { run(s, out); },
                                          {out, "being written by another moerl", "pid " + std::to_string(getpid())});
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  run(s, out);
  EXPECT_FALSE(std::filesystem::exists(output_lock_path(out))) << "the run left its lock file";
}

// Cases 6 and 13: an output that is an input, or a directory, is refused by what it is.
TEST_F(RunSafety, AnOutputThatIsAnInputOrADirectoryIsRefused) {
  const std::string ini = dir_.file("tiny.ini");
  std::ofstream(ini) << test::kTinyScenario;
  const std::string text = bytes_of(ini);
  const Scenario s = Scenario::load(ini, {"rl.steps=1"});
  expect_throw_with<std::invalid_argument>([&] { run(s, ini, false, -1, /*force=*/true); }, {ini, "scenario file", "--out"});
  const Comms c = comms_local();
  expect_throw_with<std::invalid_argument>([&] { cmd_sft(c, {ini, "--steps", "0", "--out", ini}); }, {ini, "scenario file"});
  EXPECT_EQ(bytes_of(ini), text) << "the scenario file was replaced";
  std::filesystem::create_directories(dir_.file("d"));
  expect_throw_with<std::invalid_argument>([&] { run(s, dir_.file("d")); }, {dir_.file("d"), "is a directory"});
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
