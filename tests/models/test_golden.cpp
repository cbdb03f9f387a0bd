// The whole model against an independent implementation: tests/golden/*.h5 were written by
// tests/golden/torch_reference.py (PyTorch, float64, written from docs/hdf5-schema.md only).
// Each file is a moerl checkpoint plus golden/{tokens, weights, logprobs, topk_ids, grads/*}.
// Regenerate with: /usr/bin/python3 tests/golden/torch_reference.py
#include <gtest/gtest.h>

#include <cmath>

#include "store/checkpoint.h"
#include "store/h5io.h"
#include "models/model.h"

namespace moerl {
namespace {

void check_golden(const std::string& file) {
  const std::string path = std::string(MOERL_SOURCE_DIR) + "/tests/golden/" + file;
  ModelConfig cfg;
  ParamStore params;
  checkpoint_load(path, &cfg, &params);
  Model m(cfg);
  m.params().data() = params.data();
  m.invalidate_packed_weights();

  H5File f = H5File::open(path);
  ASSERT_EQ(f.attr_int("golden", "golden_version"), 1);
  std::vector<int64_t> shape;
  const std::vector<int32_t> tokens = f.read_i32("golden/tokens", &shape);
  const int B = static_cast<int>(shape[0]), T = static_cast<int>(shape[1]);
  const std::vector<float> w = f.read_f32("golden/weights");
  std::vector<double> logp_ref(static_cast<size_t>(B) * (T - 1));
  f.read("golden/logprobs", {B, T - 1}, logp_ref.data());

  ForwardRequest req;
  req.tokens = tokens.data(); req.B = B; req.T = T; req.save_for_backward = true;
  ForwardResult r;
  m.forward(&r, req);
  // FP32 against float64: a few hundred ulps of accumulated rounding on O(1) values
  for (size_t i = 0; i < logp_ref.size(); ++i)
    EXPECT_NEAR(r.logprobs[i], logp_ref[i], 2e-5 * (1.0 + std::fabs(logp_ref[i]))) << file << " logp " << i;
  EXPECT_NEAR(r.aux_loss, f.attr_double("golden", "aux_loss"), 1e-5);
  if (cfg.is_moe()) {
    const std::vector<int32_t> ids_ref = f.read_i32("golden/topk_ids");
    ASSERT_EQ(ids_ref.size(), r.topk_ids.size());
    EXPECT_EQ(ids_ref, r.topk_ids) << file << ": routing differs from the reference";
  }

  m.grads().zero();
  m.backward(w.data());
  int checked = 0;
  for (const ParamInfo& info : m.params().infos()) {
    std::vector<double> g_ref(static_cast<size_t>(info.size));
    f.read("golden/grads/" + info.name, info.shape, g_ref.data());
    const float* g = m.grads().data().data() + info.offset;
    double max_ref = 0.0;
    for (double v : g_ref) max_ref = std::max(max_ref, std::fabs(v));
    for (int64_t j = 0; j < info.size; ++j) {
      // relative to the tensor's largest gradient: FP32 backward over sums of ~100 terms
      ASSERT_NEAR(g[j], g_ref[j], 1e-4 * max_ref + 1e-6) << file << " " << info.name << "[" << j << "]";
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(m.params().infos().size()));
}

TEST(Golden, MoeWithSharedExpertAuxAndZLossMatchesPyTorch) { check_golden("moe_tiny.h5"); }
TEST(Golden, MoeWithUnnormalisedTopkWeightsMatchesPyTorch) { check_golden("moe_tiny_topk_weights.h5"); }
TEST(Golden, DenseTwinMatchesPyTorch) { check_golden("dense_tiny.h5"); }

}  // namespace
}  // namespace moerl
