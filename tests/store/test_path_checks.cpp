// test_path_checks.cpp — what a path names, checked before a command reads or writes it
// (store/path_checks.h): inputs are regular files, outputs are file names, an output is not an
// input, and HDF5 inputs and outputs get the same checks.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "store/h5io.h"
#include "store/path_checks.h"
#include "../sim/sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

TEST(PathChecks, InputsMustBeRegularFiles) {
  ScratchDir dir;
  const std::string f = dir.file("s.ini");
  std::ofstream(f) << "x";
  path_check_input_file(f, "scenario file");
  expect_throw_with<std::invalid_argument>([&] { path_check_input_file(dir.path(), "scenario file"); },
                                           {dir.path(), "is a directory, not a scenario file"});
  expect_throw_with<std::invalid_argument>([] { path_check_input_file("/dev/zero", "scenario file"); },
                                           {"/dev/zero", "is a character device"});
  const std::string fifo = dir.file("p");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  expect_throw_with<std::invalid_argument>([&] { path_check_input_file(fifo, "scenario file"); }, {fifo, "FIFO"});
}

TEST(PathChecks, OutputsMustBeFileNames) {
  ScratchDir dir;
  path_check_output_file(dir.file("new.h5"), "--out");
  expect_throw_with<std::invalid_argument>([&] { path_check_output_file(dir.path(), "--out"); },
                                           {dir.path(), "is a directory", "--out names a file"});
  expect_throw_with<std::invalid_argument>([] { path_check_output_file("/dev/null", "--out"); },
                                           {"/dev/null", "character device"});
  // through HDF5's own entry points too
  expect_throw_with<H5Error>([&] { h5_check_writable(dir.path()); }, {dir.path(), "is a directory"});
  expect_throw_with<H5Error>([] { H5File::open("/dev/zero"); }, {"/dev/zero", "character device, not an HDF5 file"});
}

TEST(PathChecks, AnOutputThatIsAnInputIsRefusedHoweverItIsSpelled) {
  ScratchDir dir;
  const std::string f = dir.file("s.ini");
  std::ofstream(f) << "x";
  ASSERT_EQ(link(f.c_str(), dir.file("hard.ini").c_str()), 0);
  const std::string dotted = dir.path() + "/./sub/../s.ini";
  std::filesystem::create_directories(dir.file("sub"));
  for (const std::string& out : {f, dir.file("hard.ini"), dotted})
    expect_throw_with<std::invalid_argument>([&] { path_check_not_an_input(out, "--out", {{"scenario file", f}}); },
                                             {out, "--out is the scenario file", "replace its input"});
  path_check_not_an_input(dir.file("r.h5"), "--out", {{"scenario file", f}, {"base checkpoint", ""}});
  EXPECT_TRUE(path_same_file(dir.file("a/../x.h5"), dir.file("x.h5")));  // neither exists yet
}

}  // namespace
}  // namespace moerl
