// sim_test_util.h — helpers shared by the tests of sim/ and of the HDF5 files: a scratch
// directory removed with its contents, and file listing.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/comm/comms.h"

namespace moerl::test {

// The [model] lines, after its vocab_size, of the tiny MoE the command and sweep tests run.
inline const std::string kTinyMoeLines =
    "d_model = 32\nn_layers = 2\nn_heads = 2\nn_experts = 4\ntop_k = 2\nd_ff = 32\nmax_seq_len = 24\n";

// A fresh directory under $TMPDIR (or /tmp), removed recursively when the object dies.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/moerl-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of the entries in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

// Asserts that fn throws an exception of type E whose what() contains every one of `parts`.
template <class E, class Fn>
void expect_throw_with(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(what.find(p), std::string::npos) << "message: " << what << "\nlacks: " << p;
  }
}

// Asserts that fn is refused as a usage error: an ExitError with exit status 2 whose what()
// contains every one of `parts`.
template <class Fn>
void expect_usage_error(Fn&& fn, const std::vector<std::string>& parts) {
  expect_throw_with<ExitError>(
      [&] {
        try {
          fn();
        } catch (const ExitError& e) {
          EXPECT_EQ(e.code(), 2) << e.what();
          throw;
        }
      },
      parts);
}

}  // namespace moerl::test
