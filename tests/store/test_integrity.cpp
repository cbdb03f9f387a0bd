// test_integrity.cpp — what store/ promises about damaged files and failing disks
// (docs/reliability.md): a checkpoint with any byte flipped or cut off either loads exactly as
// written or is refused with a CheckpointError naming the file; a write that hits a file-size
// limit (EFBIG, the stand-in for a full disk) is one H5Error naming errno, leaves the previous file
// intact and no temporary behind; temporaries of dead processes are removed by the next writer.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "store/checkpoint.h"
#include "store/h5io.h"
#include "../model_configs.h"
#include "../sim/sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

ModelConfig tiny_moe() { return test::smallest_moe_config(); }

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Loaded {
  ModelConfig cfg;
  ParamStore params;
  CheckpointExtras ex;
};

// Exactly what was written: the config attributes, every parameter bit, every extra.
bool same(const Loaded& a, const Loaded& b) {
  if (a.params.size() != b.params.size()) return false;
  if (std::memcmp(a.params.data().data(), b.params.data().data(), a.params.size() * sizeof(float)))
    return false;
  if (a.ex.scalars != b.ex.scalars || a.ex.arrays.size() != b.ex.arrays.size()) return false;
  for (size_t i = 0; i < a.ex.arrays.size(); ++i)
    if (a.ex.arrays[i].first != b.ex.arrays[i].first ||
        std::memcmp(a.ex.arrays[i].second.data(), b.ex.arrays[i].second.data(),
                    a.ex.arrays[i].second.size() * sizeof(float)))
      return false;
  const ModelConfig &x = a.cfg, &y = b.cfg;
  return x.vocab_size == y.vocab_size && x.d_model == y.d_model && x.n_layers == y.n_layers &&
         x.n_heads == y.n_heads && x.n_experts == y.n_experts && x.top_k == y.top_k &&
         x.d_ff == y.d_ff && x.shared_expert_ff == y.shared_expert_ff &&
         x.max_seq_len == y.max_seq_len && x.rope_theta == y.rope_theta &&
         x.norm_eps == y.norm_eps && x.norm_topk_prob == y.norm_topk_prob &&
         x.scoring == y.scoring && x.expert_bias == y.expert_bias &&
         x.bias_update_rate == y.bias_update_rate && x.load_balance == y.load_balance &&
         x.aux_loss_coef == y.aux_loss_coef && x.z_loss_coef == y.z_loss_coef &&
         x.init_std == y.init_std;
}

class Integrity : public ::testing::Test {
 protected:
  void SetUp() override {
    const ModelConfig cfg = tiny_moe();
    ParamStore p(cfg);
    params_init(&p, cfg, 7);
    CheckpointExtras ex;
    ex.arrays.push_back({"router/expert_bias", {0.5f, -0.25f, 0.125f, 1.0f}});
    ex.scalars.push_back({"step", 3});
    good_ = dir_.file("good.h5");
    checkpoint_save(good_, cfg, p, &ex);
    checkpoint_load(good_, &ref_.cfg, &ref_.params, &ref_.ex);
    bytes_ = slurp(good_);
  }
  // Loads a damaged copy: true if refused with the file named, false if it loaded; a load that
  // returns anything but the original content fails the test (a silent wrong result).
  bool refused(const std::vector<char>& damaged, const std::string& what) {
    const std::string path = dir_.file("bad.h5");
    spit(path, damaged);
    Loaded got;
    try {
      checkpoint_load(path, &got.cfg, &got.params, &got.ex);
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << what << ": " << e.what();
      return true;
    }
    EXPECT_TRUE(same(got, ref_)) << what << ": loaded, but not what was written";
    return false;
  }
  ScratchDir dir_;
  std::string good_;
  Loaded ref_;
  std::vector<char> bytes_;
};

// Every byte of the header and of HDF5's first metadata, then a stride through the rest
// (tests/faults/ flips at random offsets of real run files).
TEST_F(Integrity, FlippedBytesAreRefusedOrHarmless) {
  int refusals = 0, tried = 0;
  for (size_t off = 0; off < bytes_.size(); off += off < 1024 ? 5 : 41) {
    ++tried;
    std::vector<char> d = bytes_;
    d[off] = static_cast<char>(d[off] ^ (1 << (off % 8)));
    refusals += refused(d, "bit " + std::to_string(off % 8) + " of byte " + std::to_string(off));
  }
  // Most of a checkpoint is parameter data: most flips must be caught (not merely harmless).
  EXPECT_GT(refusals, tried / 2) << "of " << tried << " flips";
}

// The second layer, for readers that skip the header (h5py): Fletcher32 names the dataset.
TEST_F(Integrity, FlippedParameterNamesTheDatasetBehindTheHeader) {
  std::vector<char> d = bytes_;
  const float* v = ref_.params.data().data() + ref_.params.size() / 2;  // 4 parameters, in the file
  const char* pat = reinterpret_cast<const char*>(v);
  auto at = std::search(d.begin(), d.end(), pat, pat + 4 * sizeof(float));
  ASSERT_NE(at, d.end());
  at[1] = static_cast<char>(at[1] ^ 0x10);
  const std::string path = dir_.file("flip.h5");
  spit(path, d);
  ModelConfig c0;
  ParamStore p0;
  expect_throw_with<CheckpointError>([&] { checkpoint_load(path, &c0, &p0); }, {path, "CRC-32"});
  h5_seal_file(path);  // as if the header had not been checked
  ModelConfig c;
  ParamStore p;
  expect_throw_with<CheckpointError>([&] { checkpoint_load(path, &c, &p); },
                                     {path, "params/", "Fletcher32"});
}

TEST_F(Integrity, EveryTruncationIsRefused) {
  for (size_t len = 0; len < bytes_.size(); len += 1 + len / 16) {
    const std::vector<char> d(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_TRUE(refused(d, "cut at " + std::to_string(len))) << "cut at " << len;
  }
}

TEST(IntegrityAttrs, AChangedAttributeValueIsRefused) {
  ScratchDir dir;
  const std::string path = dir.file("a.h5");
  {
    H5File w = H5File::create(path);
    w.set_attr("/", "scenario", "[rl]\nalgorithm = grpo\n");
    const double v[2] = {1, 2};
    w.write("metrics/reward_mean", {2}, v);
    w.commit();
  }
  std::vector<char> bytes = slurp(path);
  // The string lives in HDF5's global heap, which HDF5 itself does not checksum.
  const std::string needle = "grpo";
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  ASSERT_NE(it, bytes.end());
  *it = 'x';
  spit(path, bytes);
  expect_throw_with<H5Error>([&] { H5File::open(path); }, {path, "corrupted", "CRC-32"});
  // A damaged header does not make the file an unchecked one.
  bytes = slurp(path);
  bytes[0] = 'M';
  spit(path, bytes);
  expect_throw_with<H5Error>([&] { H5File::open(path); }, {path, "corrupted", "header"});
}

// A write beyond RLIMIT_FSIZE fails with EFBIG (SIGXFSZ ignored, as `moerl` does): one clear
// error, the previous file intact, no temporary file left. Runs in a child so the limit and the
// signal disposition do not leak into other tests.
TEST(IntegrityDisk, FileSizeLimitIsOneClearErrorAndKeepsThePreviousFile) {
  ScratchDir dir;
  const std::string path = dir.file("big.h5");
  std::vector<float> small(16, 1.0f), big(1 << 20, 2.0f);
  {
    H5File w = H5File::create(path);
    w.write("v", {16}, small.data());
    w.commit();
  }
  const std::string msg_path = dir.file("msg.txt");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &lim);
    int code = 3;
    try {
      H5File w = H5File::create(path);
      w.write("v", {static_cast<int64_t>(big.size())}, big.data());
      w.commit();
      code = 4;  // the limit did not bite
    } catch (const H5Error& e) {
      std::ofstream(msg_path) << e.what();
      code = 0;
    }
    _exit(code);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "the writer died of signal " << WTERMSIG(st);
  ASSERT_EQ(WEXITSTATUS(st), 0);
  std::ifstream in(msg_path);
  const std::string msg((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  std::filesystem::remove(msg_path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"big.h5"}) << "temporary file left behind";
  std::vector<float> back(16);
  H5File::open(path).read("v", {16}, back.data());
  EXPECT_EQ(back, small);
}

TEST(IntegrityDisk, StaleTemporariesOfDeadProcessesAreRemoved) {
  ScratchDir dir;
  const std::string path = dir.file("r.h5");
  // A pid that cannot be running (above pid_max), one that is (ours is kept: it is ours to
  // truncate), and an unrelated file that only looks similar.
  std::ofstream(path + ".tmp-4194399999") << "x";
  std::ofstream(path + ".tmp-1") << "x";  // init is alive
  std::ofstream(dir.file("other.h5.tmp-4194399999")) << "x";
  std::ofstream(path + ".tmp-12ab") << "x";
  {
    H5File w = H5File::create(path);
    w.commit();
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"other.h5.tmp-4194399999", "r.h5",
                                                     "r.h5.tmp-1", "r.h5.tmp-12ab"}));
}

}  // namespace
}  // namespace moerl
