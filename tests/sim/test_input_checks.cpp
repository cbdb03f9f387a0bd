// test_input_checks.cpp — bad input found by the reliability review (docs/reliability.md): a value
// too large for its type says so; an invalid value from --set blames --set, not the file;
// `run --max-steps -5` and `sweep --ranks-per-run 0` are usage errors.
#include <fstream>

#include <gtest/gtest.h>

#include "sim/cli/cli.h"
#include "sim/scenario.h"
#include "sim_test_util.h"
#include "../rl/rl_fixture.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

TEST(InputChecks, AnIntegerTooLargeSaysSo) {
  expect_throw_with<std::invalid_argument>(
      [] { Scenario::parse(test::kTinyScenario, "tiny.ini", {"model.d_model=99999999999"}); },
      {"--set", "model.d_model = 99999999999", "outside the range of a 32-bit integer"});
}

TEST(InputChecks, ARangeErrorFromSetBlamesSet) {
  try {
    Scenario::parse(test::kTinyScenario, "tiny.ini", {"model.d_model=-3"});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--set: model.d_model = -3", 0), 0u) << e.what();
  }
  // the same value in the file blames the file
  std::string text = test::kTinyScenario;
  text.replace(text.find("d_model = 16"), 12, "d_model = -3");
  expect_throw_with<std::invalid_argument>([&] { Scenario::parse(text, "tiny.ini"); }, {"tiny.ini: model.d_model = -3"});
}

TEST(InputChecks, NegativeMaxStepsAndZeroRanksPerRunAreUsageErrors) {
  ScratchDir dir;
  const std::string ini = dir.file("tiny.ini");
  std::ofstream(ini) << test::kTinyScenario;
  const Comms c = comms_local();
  try {
    cmd_run(c, {ini, "--max-steps", "-5", "--out", dir.file("a.h5")});
    ADD_FAILURE() << "--max-steps -5 accepted";
  } catch (const ExitError& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_NE(std::string(e.what()).find("--max-steps -5"), std::string::npos) << e.what();
  }
  const std::string grid = dir.file("grid.ini");
  std::ofstream(grid) << test::kTinyScenario << "[sweep]\nseeds = 0, 1\n";
  try {
    cmd_sweep(c, {grid, "--ranks-per-run", "0", "--out", dir.file("sw")});
    ADD_FAILURE() << "--ranks-per-run 0 accepted";
  } catch (const ExitError& e) {
    EXPECT_EQ(e.code(), 2);
    EXPECT_NE(std::string(e.what()).find("--ranks-per-run 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moerl
