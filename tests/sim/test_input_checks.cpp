// test_input_checks.cpp — bad input found by the reliability review (docs/reliability.md): a value
// too large for its type says so; an invalid value from --set blames --set, not the file;
// `run --max-steps -5` and `sweep --ranks-per-run 0` are usage errors.
#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "sim/cli/cli.h"
#include "sim/io/text_io.h"
#include "sim/scenario/scenario.h"
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
  test::expect_usage_error([&] { cmd_run(c, {ini, "--max-steps", "-5", "--out", dir.file("a.h5")}); },
                           {"--max-steps -5"});
  const std::string grid = dir.file("grid.ini");
  std::ofstream(grid) << test::kTinyScenario << "[sweep]\nseeds = 0, 1\n";
  test::expect_usage_error([&] { cmd_sweep(c, {grid, "--ranks-per-run", "0", "--out", dir.file("sw")}); },
                           {"--ranks-per-run 0"});
}

// ---- hostile input (issue 26) -----------------------------------------------------------------

// Cases 4 and 7: a directory read as a scenario gave the built-in defaults; /dev/zero read
// without end. Both are refused by kind, before a byte is read; a FIFO too (it would block).
TEST(InputChecks, AScenarioThatIsNotARegularFileIsRefusedByKind) {
  ScratchDir dir;
  expect_throw_with<std::invalid_argument>([&] { Scenario::load(dir.path(), {}); }, {dir.path(), "is a directory", "scenario file"});
  expect_throw_with<std::invalid_argument>([] { Scenario::load("/dev/zero", {}); }, {"/dev/zero", "is a character device"});
  const std::string fifo = dir.file("f.ini");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  expect_throw_with<std::invalid_argument>([&] { Scenario::load(fifo, {}); }, {fifo, "FIFO"});
  expect_throw_with<std::invalid_argument>([&] { Scenario::load(dir.file("none.ini"), {}); },
                                           {dir.file("none.ini"), "No such file"});
}

TEST(InputChecks, AScenarioOverTheSizeLimitIsRefused) {
  ScratchDir dir;
  const std::string big = dir.file("big.ini");
  std::ofstream(big) << test::kTinyScenario << std::string(kScenarioMaxBytes, '#');
  expect_throw_with<std::invalid_argument>([&] { Scenario::load(big, {}); }, {big, "larger than 1024 KiB"});
}

// Case 10: a leading byte-order mark is dropped (the same scenario as without); elsewhere it is shown.
TEST(InputChecks, AByteOrderMarkIsDroppedAtTheStartAndShownElsewhere) {
  const Scenario plain = Scenario::parse(test::kTinyScenario, "tiny.ini");
  const Scenario bom = Scenario::parse(std::string("\xEF\xBB\xBF") + test::kTinyScenario, "tiny.ini");
  EXPECT_EQ(bom.effective_text(), plain.effective_text());
  std::string text = test::kTinyScenario;
  text.replace(text.find("[model]"), 7, "\xEF\xBB\xBF[model]");
  expect_throw_with<std::invalid_argument>([&] { Scenario::parse(text, "tiny.ini"); }, {"tiny.ini", "<U+FEFF>[model]"});
}

// Case 11: a NUL byte in a value cut the message at the NUL.
TEST(InputChecks, ANulByteInAValueIsShownEscaped) {
  std::string text = test::kTinyScenario;
  const size_t at = text.find("d_model = 16");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, std::string("d_model = 1\0" "6", 13));
  try {
    Scenario::parse(text, "tiny.ini");
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.d_model = 1\\x006: must be an integer"), std::string::npos) << e.what();
  }
}

// Case 12: numbers out of a float's range said "must be a number".
TEST(InputChecks, AFloatOutOfRangeSaysSo) {
  for (const char* v : {"1e39", "1e309", "-1e39", "1e-50"})
    expect_throw_with<std::invalid_argument>(
        [&] { Scenario::parse(test::kTinyScenario, "tiny.ini", {std::string("optim.lr=") + v}); },
        {std::string("optim.lr = ") + v, "outside the range of a 32-bit float"});
  expect_throw_with<std::invalid_argument>(
      [] { Scenario::parse(test::kTinyScenario, "tiny.ini", {"run.seed=99999999999999999999"}); },
      {"run.seed = 99999999999999999999", "outside the range of a 64-bit unsigned integer"});
}

TEST(InputChecks, TextVisibleEscapesWhatATerminalHidesAndIsIdempotent) {
  const std::string s = std::string("a\0b\x1b[2J\t\xEF\xBB\xBF\xE2\x80\x8B\xC2\xA0\xFF → é", 24);
  const std::string v = text_visible(s);
  EXPECT_EQ(v, "a\\x00b\\x1B[2J\\t<U+FEFF><U+200B><U+00A0>\\xFF → é");
  EXPECT_EQ(text_visible(v), v);
}

// Case 5: `--seeds ''` ran the grid's own seeds; an empty list is refused (and --variants '').
TEST(InputChecks, EmptySweepListsAreRefused) {
  ScratchDir dir;
  const std::string grid = dir.file("grid.ini");
  std::ofstream(grid) << test::kTinyScenario << "[sweep]\nseeds = 0, 1\n";
  const Comms c = comms_local();
  // an empty value is refused as every option's is (cli_parse), a list of no names by the sweep
  expect_throw_with<ExitError>([&] { cmd_sweep(c, {grid, "--seeds", "", "--dry-run"}); }, {"--seeds ''", "an empty value"});
  expect_throw_with<ExitError>([&] { cmd_sweep(c, {grid, "--variants", "", "--dry-run"}); }, {"--variants ''", "an empty value"});
  expect_throw_with<std::invalid_argument>([&] { cmd_sweep(c, {grid, "--seeds", ",", "--dry-run"}); }, {"--seeds", "is not a seed"});
  expect_throw_with<std::invalid_argument>([&] { cmd_sweep(c, {grid, "--variants", ",", "--dry-run"}); }, {"--variants", "an item is empty"});
  expect_throw_with<std::invalid_argument>([&] { cmd_sweep(c, {dir.path(), "--dry-run"}); }, {dir.path(), "is a directory"});
}

}  // namespace
}  // namespace moerl
