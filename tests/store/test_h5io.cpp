// test_h5io.cpp — HDF5 helpers: typed round trips, attributes, block I/O, atomic commit, and the
// error messages for missing, non-HDF5 and mismatched data.
#include <cstdio>
#include <cstring>
#include <fstream>

#include <gtest/gtest.h>

#include "kernels/rng.h"
#include "store/h5io.h"
#include "../sim/sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

TEST(H5io, DatasetsRoundTripEveryTypeAndShape) {
  ScratchDir dir;
  const std::string path = dir.file("a.h5");
  Rng rng(rng_derive(1, static_cast<uint64_t>(Stream::data), {7}));
  std::vector<float> f(2 * 3 * 4);
  for (float& x : f) x = rng.normal();
  f[5] = -0.0f;  // signs and odd values must survive bit-exactly
  f[6] = 1e-40f;  // subnormal
  std::vector<double> d = {1.0 / 3.0, -2.5e300};
  std::vector<int32_t> i32 = {-7, 0, 2147483647, -2147483647 - 1};
  std::vector<int64_t> i64 = {int64_t{1} << 62, -3};
  const double scalar = 0.125;
  {
    H5File w = H5File::create(path);
    w.write("x/y/f", {2, 3, 4}, f.data());
    w.write("d", {2}, d.data());
    w.write("i/i32", {2, 2}, i32.data());
    w.write("i/i64", {2}, i64.data());
    w.write("scalar", {}, &scalar);
    w.write("empty", {0, 5}, static_cast<const float*>(nullptr));
    w.commit();
  }
  const H5File r = H5File::open(path);
  EXPECT_EQ(r.shape("x/y/f"), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r.type("x/y/f"), H5Type::f32);
  std::vector<float> f2(f.size());
  r.read("x/y/f", {2, 3, 4}, f2.data());
  EXPECT_EQ(0, std::memcmp(f.data(), f2.data(), f.size() * sizeof(float)));
  std::vector<double> d2(2);
  r.read("d", {2}, d2.data());
  EXPECT_EQ(d, d2);
  EXPECT_EQ(r.read_i32("i/i32"), i32);
  std::vector<int64_t> i642(2);
  r.read("i/i64", {2}, i642.data());
  EXPECT_EQ(i64, i642);
  double s2 = 0;
  r.read("scalar", {}, &s2);
  EXPECT_EQ(s2, scalar);
  EXPECT_EQ(r.shape("empty"), (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(r.exists("x/y"));
  EXPECT_FALSE(r.is_dataset("x/y"));
  EXPECT_TRUE(r.is_dataset("x/y/f"));
  EXPECT_FALSE(r.exists("x/nope/f"));
  EXPECT_EQ(r.children("i"), (std::vector<std::string>{"i32", "i64"}));
  EXPECT_EQ(r.datasets_below("/"),
            (std::vector<std::string>{"d", "empty", "i/i32", "i/i64", "scalar", "x/y/f"}));
}

TEST(H5io, AttributesRoundTripAndOverwrite) {
  ScratchDir dir;
  const std::string path = dir.file("attrs.h5");
  {
    H5File w = H5File::create(path);
    w.set_attr("/", "name", "first");
    w.set_attr("/", "name", std::string("second, with ünïcode"));  // overwrite
    w.set_attr("/", "n", int64_t{-42});
    w.set_attr("/", "x", 0.1);
    w.set_attr("state/deep", "step", int64_t{9});  // creates the groups
    w.commit();
  }
  const H5File r = H5File::open(path);
  EXPECT_EQ(r.attr_string("/", "name"), "second, with ünïcode");
  EXPECT_EQ(r.attr_int("/", "n"), -42);
  EXPECT_EQ(r.attr_double("/", "x"), 0.1);
  EXPECT_EQ(r.attr_double("/", "n"), -42.0);  // integers read as numbers too
  EXPECT_EQ(r.attr_int("state/deep", "step"), 9);
  EXPECT_TRUE(r.has_attr("/", "n"));
  EXPECT_FALSE(r.has_attr("/", "m"));
  EXPECT_FALSE(r.has_attr("nowhere", "m"));
  EXPECT_EQ(r.attr_names("/"), (std::vector<std::string>{"n", "name", "x"}));
  expect_throw_with<H5Error>([&] { r.attr_int("/", "name"); },
                             {path, "attribute 'name'", "expected an integer"});
  expect_throw_with<H5Error>([&] { r.attr_string("/", "x"); },
                             {path, "attribute 'x'", "float64", "expected a string"});
  expect_throw_with<H5Error>([&] { r.attr_int("/", "missing"); },
                             {path, "missing attribute 'missing'"});
}

TEST(H5io, BlockWritesAndReads) {
  ScratchDir dir;
  const std::string path = dir.file("blocks.h5");
  // [3, 4, 2] written as two blocks along dimension 1.
  std::vector<int32_t> all(24);
  for (int i = 0; i < 24; ++i) all[i] = i * 3 - 5;
  {
    H5File w = H5File::create(path);
    w.create_dataset("ids", H5Type::i32, {3, 4, 2});
    for (int64_t j0 : {0, 2}) {
      std::vector<int32_t> block;
      for (int a = 0; a < 3; ++a)
        for (int64_t j = j0; j < j0 + 2; ++j)
          for (int c = 0; c < 2; ++c) block.push_back(all[(a * 4 + j) * 2 + c]);
      w.write_block("ids", {0, j0, 0}, {3, 2, 2}, block.data());
    }
    expect_throw_with<H5Error>(
        [&] { w.write_block("ids", {0, 3, 0}, {3, 2, 2}, all.data()); },
        {"ids", "outside shape [3, 4, 2]"});
    w.commit();
  }
  const H5File r = H5File::open(path);
  EXPECT_EQ(r.read_i32("ids"), all);
  std::vector<int32_t> row(8);
  r.read_block("ids", {1, 0, 0}, {1, 4, 2}, row.data());
  EXPECT_EQ(row, std::vector<int32_t>(all.begin() + 8, all.begin() + 16));
}

TEST(H5io, CommitIsAtomicAndAbandonedWritesLeaveNothing) {
  ScratchDir dir;
  const std::string path = dir.file("out.h5");
  const float v[2] = {1, 2};
  try {
    H5File w = H5File::create(path);
    w.write("v", {2}, v);
    // Before commit only the temporary file exists.
    const auto names = dir.entries();
    ASSERT_EQ(names.size(), 1u);
    EXPECT_EQ(names[0].rfind("out.h5.tmp-", 0), 0u) << names[0];
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(dir.entries().empty()) << "no final file and no temporary file";

  // A committed file replaces an old one in one step.
  {
    H5File w = H5File::create(path);
    w.write("v", {2}, v);
    w.commit();
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  {
    H5File w = H5File::create(path);
    w.write("w", {2}, v);
    // The old file is still intact at the final name while the new one is being written.
    EXPECT_TRUE(H5File::open(path).exists("v"));
  }  // destroyed without commit
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  EXPECT_TRUE(H5File::open(path).exists("v"));
}

TEST(H5io, ReadChecksShapeTypeAndPresence) {
  ScratchDir dir;
  const std::string path = dir.file("checks.h5");
  const float v[6] = {1, 2, 3, 4, 5, 6};
  {
    H5File w = H5File::create(path);
    w.write("g/m", {2, 3}, v);
    w.commit();
  }
  const H5File r = H5File::open(path);
  float out[6];
  expect_throw_with<H5Error>([&] { r.read("g/m", {3, 2}, out); },
                             {path, "g/m", "has shape [2, 3], expected [3, 2]"});
  int32_t iout[6];
  expect_throw_with<H5Error>([&] { r.read("g/m", {2, 3}, iout); },
                             {path, "g/m", "has dtype float32, expected int32"});
  expect_throw_with<H5Error>([&] { r.read("g/q", {2, 3}, out); }, {path, "g/q", "missing dataset"});
  expect_throw_with<H5Error>([&] { r.read("g", {2, 3}, out); }, {path, "g", "not a dataset"});
}

TEST(H5io, OpenErrorsNameTheFileAndTheProblem) {
  ScratchDir dir;
  const std::string missing = dir.file("missing.h5");
  expect_throw_with<H5Error>([&] { H5File::open(missing); }, {missing, "No such file"});
  const std::string garbage = dir.file("garbage.h5");
  {
    std::ofstream out(garbage, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>(i * 37));
  }
  expect_throw_with<H5Error>([&] { H5File::open(garbage); }, {garbage, "not an HDF5 file"});
  expect_throw_with<H5Error>([&] { H5File::open(dir.path()); }, {dir.path(), "is a directory"});
  expect_throw_with<H5Error>([&] { H5File::create(dir.file("no/such/dir/x.h5")); },
                             {"no/such/dir/x.h5", "cannot create"});
}

}  // namespace
}  // namespace moerl
