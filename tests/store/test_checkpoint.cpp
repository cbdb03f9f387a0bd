// test_checkpoint.cpp — checkpoints round-trip bit-exactly (MoE and dense, with extras), and every
// kind of damaged or mismatched file is rejected with a message naming the file and the problem.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "store/checkpoint.h"
#include "store/h5io.h"
#include "../model_configs.h"
#include "../sim/sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

ModelConfig small_moe() { return test::off_default_moe_config(); }

ModelConfig small_dense() {
  ModelConfig c = small_moe();
  c.n_experts = 0;
  c.shared_expert_ff = 0;
  c.expert_bias = false;
  c.scoring = Scoring::softmax;
  c.load_balance = LoadBalance::none;
  return c;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_experts, b.n_experts);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.shared_expert_ff, b.shared_expert_ff);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.rope_theta, b.rope_theta);  // exact: float → float64 → float
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.scoring, b.scoring);
  EXPECT_EQ(a.expert_bias, b.expert_bias);
  EXPECT_EQ(a.bias_update_rate, b.bias_update_rate);
  EXPECT_EQ(a.load_balance, b.load_balance);
  EXPECT_EQ(a.aux_loss_coef, b.aux_loss_coef);
  EXPECT_EQ(a.z_loss_coef, b.z_loss_coef);
  EXPECT_EQ(a.init_std, b.init_std);
}

void round_trip(const ModelConfig& cfg) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.h5");
  ParamStore p(cfg);
  params_init(&p, cfg, 1234);
  p.data()[3] = std::numeric_limits<float>::quiet_NaN();  // NaN is stored, not rejected
  CheckpointExtras ex;
  ex.arrays.push_back({"optim/m", std::vector<float>(static_cast<size_t>(p.size()), 0.5f)});
  ex.arrays.push_back({"router/expert_bias", {1.5f, -2.0f, 0.0f}});
  ex.scalars.push_back({"step", 17});
  ex.scalars.push_back({"seed", -5});
  checkpoint_save(path, cfg, p, &ex);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.h5"});

  ModelConfig cfg2;
  ParamStore p2;
  CheckpointExtras ex2;
  checkpoint_load(path, &cfg2, &p2, &ex2);
  expect_same_config(cfg, cfg2);
  ASSERT_EQ(p.infos().size(), p2.infos().size());
  for (size_t i = 0; i < p.infos().size(); ++i) {
    EXPECT_EQ(p.infos()[i].name, p2.infos()[i].name);
    EXPECT_EQ(p.infos()[i].shape, p2.infos()[i].shape);
  }
  ASSERT_EQ(p.size(), p2.size());
  EXPECT_EQ(0, std::memcmp(p.data().data(), p2.data().data(), p.data().size() * sizeof(float)));
  // Extras come back sorted by path; scalars by name.
  ASSERT_EQ(ex2.arrays.size(), 2u);
  EXPECT_EQ(ex2.arrays[0].first, "optim/m");
  EXPECT_EQ(ex2.arrays[0].second, ex.arrays[0].second);
  EXPECT_EQ(ex2.arrays[1].first, "router/expert_bias");
  EXPECT_EQ(ex2.arrays[1].second, ex.arrays[1].second);
  ASSERT_EQ(ex2.scalars.size(), 2u);
  EXPECT_EQ(ex2.scalars[0], (std::pair<std::string, int64_t>{"seed", -5}));
  EXPECT_EQ(ex2.scalars[1], (std::pair<std::string, int64_t>{"step", 17}));

  // The layout is the documented contract: one dataset per parameter at params/<name>.
  const H5File f = H5File::open(path);
  EXPECT_EQ(f.attr_string("/", "format"), "moerl-checkpoint");
  EXPECT_EQ(f.attr_int("/", "version"), 1);
  EXPECT_EQ(f.shape("params/layers.1.attn.wq"), (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(f.children("params").size(), p.infos().size());
}

TEST(Checkpoint, RoundTripMoeIsBitExact) { round_trip(small_moe()); }
TEST(Checkpoint, RoundTripDenseIsBitExact) { round_trip(small_dense()); }

TEST(Checkpoint, LoadWithoutExtrasIgnoresThem) {
  ScratchDir dir;
  const std::string path = dir.file("ckpt.h5");
  const ModelConfig cfg = small_moe();
  ParamStore p(cfg);
  params_init(&p, cfg, 5);
  CheckpointExtras ex;
  ex.arrays.push_back({"optim/v", {1.0f}});
  checkpoint_save(path, cfg, p, &ex);
  ModelConfig cfg2;
  ParamStore p2;
  checkpoint_load(path, &cfg2, &p2);
  EXPECT_EQ(p.data(), p2.data());
}

TEST(Checkpoint, SaveRejectsMismatchedStoreAndBadExtras) {
  ScratchDir dir;
  const std::string path = dir.file("x.h5");
  const ModelConfig cfg = small_moe();
  ParamStore wrong(small_dense());
  expect_throw_with<CheckpointError>([&] { checkpoint_save(path, cfg, wrong); },
                                     {path, "parameter store holds"});
  ParamStore p(cfg);
  CheckpointExtras ex;
  ex.arrays.push_back({"params/evil", {1.0f}});
  expect_throw_with<CheckpointError>([&] { checkpoint_save(path, cfg, p, &ex); },
                                     {path, "params/evil", "collides"});
  EXPECT_TRUE(dir.entries().empty());
}

// ---- damaged files -----------------------------------------------------------------------------

class CheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = small_moe();
    ParamStore p(cfg_);
    params_init(&p, cfg_, 99);
    good_ = dir_.file("good.h5");
    checkpoint_save(good_, cfg_, p);
  }
  // A copy of the good checkpoint to damage.
  std::string copy(const std::string& name) {
    const std::string path = dir_.file(name);
    std::filesystem::copy_file(good_, path);
    return path;
  }
  void expect_load_error(const std::string& path, const std::vector<std::string>& parts) {
    std::vector<std::string> all = parts;
    all.push_back(path);
    ModelConfig c;
    ParamStore p;
    expect_throw_with<CheckpointError>([&] { checkpoint_load(path, &c, &p); }, all);
  }
  // Raw HDF5 edits of a copy (the library itself never edits files in place), then a renewed
  // integrity header: the result stands for a well-formed file that another writer produced.
  template <class Fn>
  void edit(const std::string& path, Fn&& fn) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    fn(f);
    H5Fclose(f);
    h5_seal_file(path);
  }
  static void set_int_attr(hid_t f, const char* key, int64_t v) {
    const hid_t a = H5Aopen(f, key, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
  }
  static void replace_dataset(hid_t f, const char* name, std::vector<hsize_t> dims, hid_t type) {
    H5Ldelete(f, name, H5P_DEFAULT);
    const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t d = H5Dcreate2(f, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(s);
  }

  ScratchDir dir_;
  ModelConfig cfg_;
  std::string good_;
};

TEST_F(CheckpointErrors, MissingFile) { expect_load_error(dir_.file("nope.h5"), {"No such file"}); }

TEST_F(CheckpointErrors, NotHdf5) {
  const std::string path = dir_.file("garbage.h5");
  std::ofstream(path) << "this is not an HDF5 file, just text\n";
  expect_load_error(path, {"not an HDF5 file"});
}

TEST_F(CheckpointErrors, TruncatedToHalf) {
  const std::string path = copy("truncated.h5");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  expect_load_error(path, {"truncated"});
}

TEST_F(CheckpointErrors, WrongVersion) {
  const std::string path = copy("v2.h5");
  edit(path, [](hid_t f) { set_int_attr(f, "version", 2); });
  expect_load_error(path, {"version 2 is not supported"});
}

TEST_F(CheckpointErrors, WrongFormat) {
  const std::string path = copy("fmt.h5");
  edit(path, [](hid_t f) { H5Adelete(f, "format"); });
  expect_load_error(path, {"missing attribute 'format'"});
}

TEST_F(CheckpointErrors, MissingConfigAttribute) {
  const std::string path = copy("noattr.h5");
  edit(path, [](hid_t f) { H5Adelete(f, "d_ff"); });
  expect_load_error(path, {"missing attribute 'd_ff'"});
}

TEST_F(CheckpointErrors, InvalidConfig) {
  const std::string path = copy("badcfg.h5");
  edit(path, [](hid_t f) { set_int_attr(f, "n_heads", 3); });
  expect_load_error(path, {"invalid model config", "model.n_heads = 3"});
}

TEST_F(CheckpointErrors, MissingDataset) {
  const std::string path = copy("missing-ds.h5");
  edit(path, [](hid_t f) { H5Ldelete(f, "params/layers.1.moe.w_up", H5P_DEFAULT); });
  expect_load_error(path, {"params/layers.1.moe.w_up", "missing dataset"});
}

TEST_F(CheckpointErrors, WrongShape) {
  const std::string path = copy("shape.h5");
  edit(path, [](hid_t f) { replace_dataset(f, "params/lm_head", {16, 19}, H5T_IEEE_F32LE); });
  expect_load_error(path, {"params/lm_head", "has shape [16, 19], expected [19, 16]"});
}

TEST_F(CheckpointErrors, WrongDtype) {
  const std::string path = copy("dtype.h5");
  edit(path, [](hid_t f) { replace_dataset(f, "params/final_norm", {16}, H5T_IEEE_F64LE); });
  expect_load_error(path, {"params/final_norm", "float64", "expected float32"});
}

TEST_F(CheckpointErrors, UnexpectedParameter) {
  const std::string path = copy("extra.h5");
  edit(path, [](hid_t f) { replace_dataset(f, "params/layers.2.attn.wq", {16, 16}, H5T_IEEE_F32LE); });
  expect_load_error(path, {"params/layers.2.attn.wq", "unexpected parameter"});
}

}  // namespace
}  // namespace moerl
