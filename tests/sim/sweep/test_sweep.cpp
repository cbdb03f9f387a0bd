// test_sweep.cpp — sweep grids and the sweep runner, in-process (one rank): the grid expands to
// the cross product × seeds (zip groups together, base file underneath) and every bad key or value
// rejects it before anything runs; the index survives a round trip through CSV; a tiny sweep
// records a run that fails at run time and finishes the others; --resume skips finished runs and
// continues a partial one to the same numbers a single uninterrupted run gives.
// The MPI side (2 ranks, dynamic hand-out) is tests/sweep_mpi.sh.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "store/h5io.h"
#include "sim/cli/cli.h"
#include "sim/jobs/run.h"
#include "sim/sweep/sweep.h"
#include "sim/sweep/sweep_assemble.h"
#include "sim/sweep/sweep_experiment.h"
#include "sim/sweep/sweep_grid.h"
#include "sim/sweep/sweep_index.h"
#include "../sim_test_util.h"

namespace moerl {
namespace {

using test::expect_throw_with;
using test::ScratchDir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A model and task small enough that SFT (5 steps) and 2 RL steps take well under a second.
const std::string kTinyScenario = "[model]\nvocab_size = 32\n" + test::kTinyMoeLines + R"([task]
name = sort
length = 4
base = 10
[sft]
steps = 5
batch = 16
[rl]
steps = 2
prompts_per_step = 4
group_size = 4
eval_every = 0
eval_prompts = 16
)";

std::string write(const ScratchDir& d, const std::string& name, const std::string& text) {
  std::ofstream(d.file(name)) << text;
  return d.file(name);
}

std::vector<double> series(const std::string& path, const std::string& name) {
  const H5File f = H5File::open(path);
  const auto shape = f.shape("metrics/" + name);
  std::vector<double> v(static_cast<size_t>(shape[0]));
  f.read("metrics/" + name, shape, v.data());
  return v;
}

TEST(SweepGrid, ExpandsTheCrossProductTimesSeedsWithSeedsOutermost) {
  const SweepGrid g = sweep_grid_parse(std::string(kTinyScenario) +
                                           "[sweep]\nseeds = 0, 1, 2\nrl.algorithm = grpo, gspo, r3\n"
                                           "engines.rollout = fp8-rollout, bf16-train\n",
                                       "grid.ini", ".");
  ASSERT_EQ(g.runs.size(), 18u);
  EXPECT_EQ(g.swept_keys, (std::vector<std::string>{"rl.algorithm", "engines.rollout", "run.seed"}));
  EXPECT_EQ(g.runs[0].id, "grpo_fp8-rollout-seed0");
  EXPECT_EQ(g.runs[1].id, "grpo_bf16-train-seed0");  // the last axis varies fastest
  EXPECT_EQ(g.runs[2].id, "gspo_fp8-rollout-seed0");
  EXPECT_EQ(g.runs[6].id, "grpo_fp8-rollout-seed1");  // then the next seed
  for (const SweepRun& r : g.runs) {
    EXPECT_EQ(r.index, &r - &g.runs[0]);
    ASSERT_EQ(r.keys.size(), 3u);
    EXPECT_EQ(r.scenario.rl.loss.algorithm, r.keys[0].second);  // (r3 stays r3, with rollout replay)
    EXPECT_EQ(r.scenario.rl.routing_replay == RoutingReplay::rollout, r.keys[0].second == "r3");
    EXPECT_EQ(r.scenario.engines.rollout, r.keys[1].second);
    EXPECT_EQ(std::to_string(r.scenario.run.seed), r.keys[2].second);
    EXPECT_EQ(r.scenario.model.d_model, 32);  // the grid's own scenario keys apply to every run
  }
}

TEST(SweepGrid, ZipGroupsVaryTogether) {
  const SweepGrid g = sweep_grid_parse(std::string(kTinyScenario) +
                                           "[sweep]\nrl.algorithm = grpo, r3\nmodel.n_experts = 0, 4\n"
                                           "rl.steps = 3, 5, 7\nzip = rl.algorithm + model.n_experts\n",
                                       "grid.ini", ".");
  ASSERT_EQ(g.runs.size(), 6u);  // 2 zipped × 3
  for (const SweepRun& r : g.runs)
    EXPECT_EQ(r.scenario.model.n_experts, r.scenario.rl.routing_replay == RoutingReplay::rollout ? 4 : 0);
  EXPECT_EQ(g.runs[0].id, "grpo_n_experts-0_steps-3");  // numbers are named by their key
  EXPECT_EQ(g.runs[5].id, "r3_n_experts-4_steps-7");
  expect_throw_with<std::invalid_argument>(
      [] {
        sweep_grid_parse("[sweep]\nrl.algorithm = grpo, r3\nrl.steps = 3, 5, 7\nzip = rl.algorithm + rl.steps\n",
                         "grid.ini", ".");
      },
      {"grid.ini", "zip", "rl.algorithm has 2 values but rl.steps has 3"});
  expect_throw_with<std::invalid_argument>(
      [] { sweep_grid_parse("[sweep]\nrl.algorithm = grpo, r3\nzip = rl.algorithm + rl.steps\n", "grid.ini", "."); },
      {"zip", "'rl.steps' is not a swept key"});
}

TEST(SweepGrid, VariantsAreTheFirstAxisEachWithItsOwnKeys) {
  const SweepGrid g = sweep_grid_parse(std::string(kTinyScenario) +
                                           "[sweep]\nseeds = 3, 4\nvariants = grpo, control, r3\n"
                                           "optim.lr = 1e-4, 2e-4\n"
                                           "[variant.control]\nengines.rollout = bf16-train\n"
                                           "[variant.r3]\nrl.algorithm = r3\n",
                                       "grid.ini", ".");
  ASSERT_EQ(g.runs.size(), 12u);  // 3 variants × 2 lr × 2 seeds
  EXPECT_EQ(g.swept_keys, (std::vector<std::string>{"variant", "optim.lr", "run.seed"}));
  EXPECT_EQ(g.runs[0].id, "grpo_lr-1e-4-seed3");
  EXPECT_EQ(g.runs[2].id, "control_lr-1e-4-seed3");
  for (const SweepRun& r : g.runs) {
    const std::string& v = r.keys[0].second;
    EXPECT_EQ(r.keys[0].first, "variant");
    EXPECT_EQ(r.scenario.engines.rollout, v == "control" ? "bf16-train" : "fp8-rollout") << r.id;
    EXPECT_EQ(r.scenario.rl.routing_replay == RoutingReplay::rollout, v == "r3") << r.id;
    EXPECT_EQ(std::to_string(r.scenario.optim.lr).substr(0, 6), r.keys[1].second == "1e-4" ? "0.0001" : "0.0002");
  }
  // --seeds replaces the grid's seeds: the same variants on seeds its author never saw
  const SweepGrid h = sweep_grid_parse(std::string(kTinyScenario) + "[sweep]\nseeds = 0\nvariants = a, b\n"
                                           "[variant.b]\nrl.algorithm = gspo\n",
                                       "grid.ini", ".", {}, {sweep_seed_list("--seeds", "100-102, 7"), {}});
  ASSERT_EQ(h.runs.size(), 8u);
  EXPECT_EQ(h.runs[0].scenario.run.seed, 100u);
  EXPECT_EQ(h.runs[7].id, "b-seed7");
  EXPECT_EQ(h.runs[7].scenario.rl.loss.algorithm, "gspo");
  // --variants keeps a subset, in the grid's order, with the ids the whole grid gives them
  const std::string three = std::string(kTinyScenario) + "[sweep]\nseeds = 0\nvariants = a, b, c\n"
                            "[variant.c]\nrl.algorithm = r3\n";
  const SweepGrid k = sweep_grid_parse(three, "grid.ini", ".", {}, {{}, {"c", "a"}});
  ASSERT_EQ(k.runs.size(), 2u);
  EXPECT_EQ(k.runs[0].id, "a-seed0");
  EXPECT_EQ(k.runs[1].id, "c-seed0");
  EXPECT_EQ(k.runs[1].scenario.rl.routing_replay, RoutingReplay::rollout);
  expect_throw_with<std::invalid_argument>([&] { sweep_grid_parse(three, "grid.ini", ".", {}, {{}, {"d"}}); },
                                           {"--variants", "'d' is not a variant", "a, b, c"});
}

TEST(SweepGrid, BadVariantsAndSeedListsAreRejectedWithTheirNames) {
  const std::string s = std::string(kTinyScenario) + "[sweep]\nvariants = a, b\n";
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[variant.c]\nrl.steps = 3\n", "grid.ini", "."); },
      {"grid.ini", "[variant.c]", "not listed in [sweep] variants"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "rl.steps = 3, 4\n[variant.a]\nrl.steps = 5\n", "grid.ini", "."); },
      {"[variant.a] rl.steps", "also sweeps rl.steps"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[variant.a]\nrl.steps = 5\n", "grid.ini", ".", {"rl.steps=6"}); },
      {"--set rl.steps=6", "variant a sets rl.steps"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[variant.b]\nrl.algorithm = nope\n", "grid.ini", "."); },
      {"1 of 2 combinations", "rl.algorithm = nope", "variant=b"});
  expect_throw_with<std::invalid_argument>([] { sweep_seed_list("--seeds", "9-3"); },
                                           {"--seeds = 9-3", "empty", "allowed"});
  expect_throw_with<std::invalid_argument>([] { sweep_seed_list("--seeds", "1,x"); },
                                           {"--seeds = 1,x", "'x' is not a seed"});
  expect_throw_with<std::invalid_argument>([] { sweep_seed_list("--seeds", "1-3,2"); }, {"listed twice"});
  EXPECT_EQ(sweep_seed_list("--seeds", "4, 0-2"), (std::vector<std::string>{"4", "0", "1", "2"}));
}

TEST(SweepGrid, BaseIsRelativeToTheGridAndTheGridOverridesIt) {
  ScratchDir d;
  std::filesystem::create_directories(d.file("grids"));
  write(d, "base.ini", std::string(kTinyScenario) + "[optim]\nlr = 0.5\n");
  const std::string grid = write(d, "grids/g.ini", "[sweep]\nbase = ../base.ini\nseeds = 4\n[model]\nd_model = 48\n");
  const SweepGrid g = sweep_grid_load(grid);
  ASSERT_EQ(g.runs.size(), 1u);
  EXPECT_EQ(g.runs[0].id, "seed4");
  EXPECT_EQ(g.runs[0].scenario.model.d_model, 48);     // the grid's key wins
  EXPECT_EQ(g.runs[0].scenario.optim.lr, 0.5f);        // the base's key stays
  EXPECT_EQ(g.runs[0].scenario.run.seed, 4u);
  expect_throw_with<std::invalid_argument>([&] { sweep_grid_load(write(d, "g2.ini", "[sweep]\nbase = nope.ini\n")); },
                                           {"g2.ini", "base", "nope.ini", "cannot read"});
}

TEST(SweepGrid, BadKeysAndValuesRejectTheWholeGridBeforeAnythingRuns) {
  const std::string s = kTinyScenario;
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[sweep]\nrl.algorithm = grpo, grpoo\n", "grid.ini", "."); },
      {"grid.ini", "1 of 2 combinations", "nothing was run", "rl.algorithm = grpoo", "rl.algorithm=grpoo"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[sweep]\nrl.algoritm = grpo, gspo\n", "grid.ini", "."); },
      {"2 of 2", "unknown key 'rl.algoritm'", "did you mean rl.algorithm", "every combination"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[sweep]\nmodel.top_k = 2, 9\n", "grid.ini", "."); },
      {"1 of 2", "model.top_k = 9"});
  expect_throw_with<std::invalid_argument>([&] { sweep_grid_parse(s + "[sweep]\nseed = 1, 2\n", "grid.ini", "."); },
                                           {"unknown [sweep] key 'seed'"});
  expect_throw_with<std::invalid_argument>([&] { sweep_grid_parse(s + "[sweep]\nseeds = 1, 1\n", "grid.ini", "."); },
                                           {"listed twice"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[sweep]\nrl.algorithm = grpo,, r3\n", "grid.ini", "."); }, {"an item is empty"});
  expect_throw_with<std::invalid_argument>(
      [&] { sweep_grid_parse(s + "[sweep]\nrl.algorithm = grpo, r3\n", "grid.ini", ".", {"rl.algorithm=gspo"}); },
      {"--set rl.algorithm=gspo", "sweeps rl.algorithm"});
  // --set of other keys applies to every run
  const SweepGrid g = sweep_grid_parse(s + "[sweep]\nrl.algorithm = grpo, r3\n", "grid.ini", ".", {"rl.steps=9"});
  EXPECT_EQ(g.runs[1].scenario.rl.steps, 9);
}

TEST(SweepGrid, AScenarioWithoutSweepIsOneRunAndCollidingNamesFallBackToIndices) {
  const SweepGrid one = sweep_grid_parse(kTinyScenario, "plain.ini", ".");
  ASSERT_EQ(one.runs.size(), 1u);
  EXPECT_EQ(one.runs[0].id, "run");
  // values are made file-safe; names longer than 60 characters fall back to run-NNNN
  const SweepGrid g = sweep_grid_parse(
      std::string(kTinyScenario) +
          "[profile.a]\nbase = bf16-train\n[sweep]\nprofile.a.gemm_order = split_k:2, fixed\nseeds = 0, 1\n",
      "grid.ini", ".");
  EXPECT_EQ(g.runs[0].id, "split_k-2-seed0");
  EXPECT_EQ(g.runs[3].id, "fixed-seed1");
  const std::string longname = "an-fp8-rollout-profile-with-a-rather-long-and-very-descriptive-name";
  const SweepGrid h = sweep_grid_parse(std::string(kTinyScenario) + "[profile." + longname +
                                           "]\nbase = fp8-rollout\n[sweep]\nengines.rollout = fp8-rollout, " +
                                           longname + "\nrl.algorithm = grpo, r3\n",
                                       "grid.ini", ".");
  ASSERT_EQ(h.runs.size(), 4u);
  EXPECT_EQ(h.runs[0].id, "run-0000");
  EXPECT_EQ(h.runs[3].id, "run-0003");
  EXPECT_EQ(h.runs[3].scenario.engines.rollout, longname);
}

TEST(SweepIndex, RoundTripsThroughCsvIncludingAwkwardErrors) {
  ScratchDir d;
  SweepIndex idx;
  idx.grid = "g.ini";
  idx.swept_keys = {"rl.algorithm", "run.seed"};
  SweepIndexRow a;
  a.index = 0;
  a.id = "grpo-seed0";
  a.file = "grpo-seed0.h5";
  a.status = "complete";
  a.keys = {{"rl.algorithm", "grpo"}, {"run.seed", "0"}};
  a.steps = 12;
  a.final_reward = 0.25;
  a.final_eval = 0.125;
  a.seconds = 3.5;
  a.rank = 2;
  SweepIndexRow b = a;
  b.index = 1;
  b.id = "r3-seed0";
  b.status = "failed";
  b.collapse_step = 7;
  b.final_reward = std::nan("");
  b.error = "bad, \"quoted\"\nsecond line";
  idx.rows = {a, b};
  sweep_index_write(d.path(), idx);
  const SweepIndex back = sweep_index_read(d.path());
  EXPECT_EQ(back.swept_keys, idx.swept_keys);
  ASSERT_EQ(back.rows.size(), 2u);
  EXPECT_EQ(back.rows[0].id, "grpo-seed0");
  EXPECT_EQ(back.rows[0].final_reward, 0.25);
  EXPECT_EQ(back.rows[0].rank, 2);
  EXPECT_EQ(back.rows[0].keys, a.keys);
  EXPECT_EQ(back.rows[1].error, b.error);
  EXPECT_EQ(back.rows[1].collapse_step, 7);
  EXPECT_TRUE(std::isnan(back.rows[1].final_reward));
  std::ifstream js(d.file("index.json"));
  const std::string json((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"final_reward\": null"), std::string::npos);
  EXPECT_NE(json.find("bad, \\\"quoted\\\"\\nsecond line"), std::string::npos);
  EXPECT_NE(sweep_index_table(back).find("2 runs: 1 complete, 1 failed"), std::string::npos);
}

class SweepRunner : public ::testing::Test {
 protected:
  // 2 algorithms × MoE/dense: r3 on the dense twin validates but fails when the run starts.
  SweepGrid grid(const std::vector<std::string>& sets = {}) {
    return sweep_grid_parse(std::string(kTinyScenario) + "[sweep]\nrl.algorithm = grpo, r3\nmodel.n_experts = 4, 0\n",
                            "tiny-grid.ini", d_.path(), sets);
  }
  SweepOptions options() {
    SweepOptions o;
    o.out = d_.file("sweep");
    o.progress = false;
    return o;
  }
  ScratchDir d_;
  Comms comms_ = comms_local();
};

TEST_F(SweepRunner, RecordsAFailingRunAndFinishesTheOthers) {
  const SweepSummary sum = sweep_execute(comms_, grid(), options());
  EXPECT_EQ(sum.runs, 4);
  EXPECT_EQ(sum.complete, 3);
  EXPECT_EQ(sum.failed, 1);
  const SweepIndex idx = sweep_index_read(d_.file("sweep"));
  ASSERT_EQ(idx.rows.size(), 4u);
  for (const SweepIndexRow& r : idx.rows) {
    const bool bad = r.id == "r3_n_experts-0";
    EXPECT_EQ(r.status, bad ? "failed" : "complete") << r.id;
    EXPECT_EQ(r.error.find("needs an MoE model") != std::string::npos, bad) << r.error;
    EXPECT_EQ(std::filesystem::exists(d_.file("sweep/" + r.file)), !bad) << r.file;
    if (bad) continue;
    EXPECT_EQ(r.steps, 2);
    EXPECT_EQ(r.rank, 0);
    const H5File f = H5File::open(d_.file("sweep/" + r.file));
    EXPECT_EQ(f.attr_string("/", "status"), "complete");
    EXPECT_NE(f.attr_string("/", "scenario").find("rl.algorithm = " + r.keys[0].second), std::string::npos);
  }
  // one base per distinct model (MoE, dense), trained once into the sweep's cache
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(d_.file("sweep/cache")),
                          std::filesystem::directory_iterator()),
            2);
  EXPECT_TRUE(std::filesystem::exists(d_.file("sweep/index.json")));
  EXPECT_TRUE(std::filesystem::exists(d_.file("sweep/grid.ini")));
  // the same directory again without --resume is refused (exit status 2), nothing is touched
  test::expect_usage_error([&] { sweep_execute(comms_, grid(), options()); }, {"--resume"});
}

TEST_F(SweepRunner, ResumeSkipsFinishedRunsAndContinuesPartialOnesToTheSameNumbers) {
  const SweepGrid g = grid();
  SweepOptions o = options();
  // A finished run, and run 2 (r3 on MoE) stopped after one of its two steps.
  {
    SweepOptions first = o;
    sweep_execute(comms_, g, first);
  }
  const std::string full = d_.file("sweep/r3_n_experts-4.h5");
  const std::vector<double> reward = series(full, "reward_mean"), kl = series(full, "kl_rollout_train");
  std::filesystem::rename(full, d_.file("full.h5"));
  std::filesystem::remove(run_checkpoint_path(full));
  RunOptions ro;
  ro.out = full;
  ro.cache_dir = d_.file("sweep/cache");
  ro.progress = false;
  ro.max_steps = 1;
  EXPECT_EQ(run_rl(g.runs[2].scenario, ro).status, "running");
  const auto mtime = std::filesystem::last_write_time(d_.file("sweep/grpo_n_experts-4.h5"));

  o.resume = true;
  const SweepSummary sum = sweep_execute(comms_, g, o);
  EXPECT_EQ(sum.skipped, 2);   // grpo on MoE and dense
  EXPECT_EQ(sum.complete, 3);  // and r3 on MoE finished now
  EXPECT_EQ(sum.failed, 1);    // r3 on dense tried again, fails again
  EXPECT_EQ(std::filesystem::last_write_time(d_.file("sweep/grpo_n_experts-4.h5")), mtime);
  // resumed from the step-1 checkpoint: bit-equal to the uninterrupted run
  EXPECT_EQ(series(full, "reward_mean"), reward);
  EXPECT_EQ(series(full, "kl_rollout_train"), kl);

  // another scenario in the same directory is refused before anything is written, naming the key
  // (the directory's grid.ini records its experiment: sweep_experiment.h)
  const SweepGrid other = grid({"rl.steps=3"});
  const std::string index_before = read_text(d_.file("sweep/index.csv"));
  expect_throw_with<ExitError>([&] { sweep_execute(comms_, other, o); }, {"not the directory's experiment", "rl.steps: 2 → 3"});
  EXPECT_EQ(read_text(d_.file("sweep/index.csv")), index_before);
  // and in a directory that records none (an older moerl's: grid.ini held the grid's text), a
  // results file from another scenario is still never overwritten: its run files are the
  // directory's identity, so the grid they contradict is refused naming the file and the key, and
  // nothing is written (no grid.ini stamped with the other grid; issue 51, item 3)
  write_text(d_.file("sweep/grid.ini"), "[sweep]\n");
  expect_throw_with<ExitError>([&] { sweep_execute(comms_, other, o); },
                               {"grpo_n_experts-4.h5 is not run grpo_n_experts-4", "rl.steps: 3 → 2"});
  EXPECT_EQ(read_text(d_.file("sweep/grid.ini")), "[sweep]\n");
  EXPECT_EQ(read_text(d_.file("sweep/index.csv")), index_before);
  EXPECT_EQ(series(d_.file("sweep/grpo_n_experts-4.h5"), "reward_mean").size(), 2u);
  // the directory's own grid, which every run file agrees with, records it again
  EXPECT_EQ(sweep_execute(comms_, g, o).skipped, 3);
  EXPECT_TRUE(sweep_experiment_recorded(d_.file("sweep")));
  // a file of another run under a planned name (two runs' files swapped) is never resumed,
  // overwritten or counted as the planned run: "mismatched", naming the key that differs
  std::filesystem::rename(d_.file("sweep/grpo_n_experts-4.h5"), d_.file("sweep/x.h5"));
  std::filesystem::rename(d_.file("sweep/r3_n_experts-4.h5"), d_.file("sweep/grpo_n_experts-4.h5"));
  std::filesystem::rename(d_.file("sweep/x.h5"), d_.file("sweep/r3_n_experts-4.h5"));
  const auto swapped = std::filesystem::last_write_time(d_.file("sweep/r3_n_experts-4.h5"));
  const SweepSummary s3 = sweep_execute(comms_, g, o);
  EXPECT_EQ(s3.mismatched, 2);
  EXPECT_EQ(std::filesystem::last_write_time(d_.file("sweep/r3_n_experts-4.h5")), swapped);
  const SweepIndex idx = sweep_index_assemble(d_.file("sweep"));
  EXPECT_EQ(idx.rows[0].status, "mismatched");
  EXPECT_NE(idx.rows[0].error.find("rl.algorithm: grpo → r3"), std::string::npos) << idx.rows[0].error;
}

TEST(SweepAssemble, ARunFileIsCheckedAgainstThePlannedRun) {
  const std::string planned = "# effective scenario (source a.ini)\nrl.algorithm = r3\noptim.lr = 0.0001\n";
  // the same run: equal, whatever the comment lines say
  EXPECT_EQ(sweep_run_mismatch("# source b.ini\nrl.algorithm = r3\noptim.lr = 0.0001\n", planned, {}), "");
  EXPECT_EQ(sweep_run_mismatch("rl.algorithm = grpo\noptim.lr = 0.0001\n", planned, {}), "rl.algorithm: r3 → grpo");
  // without the planned scenario (an older directory): the plan's swept keys, numbers by value
  const std::vector<std::pair<std::string, std::string>> keys{{"variant", "r3"}, {"optim.lr", "1e-4"}};
  EXPECT_EQ(sweep_run_mismatch("rl.algorithm = r3\noptim.lr = 0.0001\n", "", keys), "");
  EXPECT_EQ(sweep_run_mismatch("rl.algorithm = r3\noptim.lr = 0.0002\n", "", keys), "optim.lr: 1e-4 → 0.0002");
  // a file of the format before runs recorded their scenario cannot be checked
  EXPECT_EQ(sweep_run_mismatch("", planned, keys), "");
}

}  // namespace
}  // namespace moerl
