// Whole-model gradient checks by finite differences: for each parameter tensor, the directional
// derivative g·u along a seeded random direction u is compared with the central difference
// (L(θ+hu) − L(θ−hu)) / 2h of the scalar objective L = Σ w·logprobs + aux_loss.
// Directional derivatives sum many elements, so FP32 forward noise (~1e-7·|L|) stays far below
// the signal. A step that changes any top-k choice makes L non-smooth: such h are halved.
#include <gtest/gtest.h>

#include <cmath>

#include "model_fixture.h"
#include "models/params.h"

namespace moerl {
namespace {

double objective(Model& m, const std::vector<int32_t>& tok, int B, int T,
                 const std::vector<float>& w, std::vector<int32_t>* ids, float temperature) {
  ForwardRequest req;
  req.tokens = tok.data(); req.B = B; req.T = T; req.temperature = temperature;
  ForwardResult r;
  m.forward(&r, req);
  double L = r.aux_loss;
  for (size_t i = 0; i < r.logprobs.size(); ++i) L += static_cast<double>(w[i]) * r.logprobs[i];
  if (ids) *ids = r.topk_ids;
  return L;
}

void check_gradients(ModelConfig cfg, uint64_t seed, float temperature = 1.0f,
                     bool router_control = false) {
  cfg.init_std = 0.1f;  // smooth enough for central differences at h ~ 1e-3
  Model m(cfg);
  params_init(&m.params(), cfg, seed);
  const int B = 3, T = 7;
  std::vector<float> kl_full, kl_topk;
  if (router_control) {  // router temperature and both KL regularisers against random targets
    RouterControl& rc = m.router_control();
    rc.temperature.assign(cfg.n_layers, 0.7f);
    rc.temperature.back() = 1.4f;
    kl_full = test::random_vector(cfg.n_layers * B * T * cfg.n_experts, seed + 5);
    kl_topk = test::random_vector(cfg.n_layers * B * T * cfg.n_experts, seed + 6);
    rc.kl_full_target = kl_full.data();
    rc.kl_full_weight = 0.5f;
    rc.kl_topk_target = kl_topk.data();
    rc.kl_topk_weight = 0.3f;
    rc.kl_topk_temperature = 0.8f;
  }
  const auto tok = test::random_tokens(B * T, cfg.vocab_size, seed);
  const auto w = test::random_vector(B * (T - 1), seed + 1);

  ForwardRequest req;
  req.tokens = tok.data(); req.B = B; req.T = T; req.save_for_backward = true;
  req.temperature = temperature;
  ForwardResult r;
  m.forward(&r, req);
  m.grads().zero();
  m.backward(w.data());
  std::vector<int32_t> base_ids = r.topk_ids;

  int checked = 0;
  for (size_t pi = 0; pi < m.params().infos().size(); ++pi) {
    const ParamInfo& info = m.params().infos()[pi];
    const auto u = test::random_vector(static_cast<int>(info.size), seed * 131 + pi);
    double analytic = 0.0;
    const float* g = m.grads().data().data() + info.offset;
    for (int64_t j = 0; j < info.size; ++j) analytic += static_cast<double>(g[j]) * u[j];
    float* theta = m.params().data().data() + info.offset;
    const std::vector<float> saved(theta, theta + info.size);
    double numeric = 0.0, h_used = 0.0;
    bool smooth = false;
    for (double h = 4e-3; h > 1e-5 && !smooth; h /= 2) {
      std::vector<int32_t> ids_p, ids_m;
      for (int64_t j = 0; j < info.size; ++j) theta[j] = saved[j] + static_cast<float>(h) * u[j];
      m.invalidate_packed_weights();
      const double lp = objective(m, tok, B, T, w, &ids_p, temperature);
      for (int64_t j = 0; j < info.size; ++j) theta[j] = saved[j] - static_cast<float>(h) * u[j];
      m.invalidate_packed_weights();
      const double lm = objective(m, tok, B, T, w, &ids_m, temperature);
      std::copy(saved.begin(), saved.end(), theta);
      m.invalidate_packed_weights();
      smooth = ids_p == base_ids && ids_m == base_ids;
      // the step actually taken in float, not the nominal h
      double du = 0.0;
      for (int64_t j = 0; j < info.size; ++j)
        du += static_cast<double>((saved[j] + static_cast<float>(h) * u[j]) -
                                  (saved[j] - static_cast<float>(h) * u[j])) * u[j];
      double uu = 0.0;
      for (int64_t j = 0; j < info.size; ++j) uu += static_cast<double>(u[j]) * u[j];
      numeric = (lp - lm) / (du / uu);
      h_used = h;
    }
    ASSERT_TRUE(smooth) << info.name << ": every step flipped routing";
    // Truncation error O(h²) → 2% relative; FP32 forward noise on L (~2e-5 absolute, measured)
    // divided by the step 2h → the absolute term.
    EXPECT_NEAR(analytic, numeric, 2e-2 * std::fabs(numeric) + 2e-5 / h_used)
        << info.name << " analytic " << analytic << " numeric " << numeric;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(m.params().infos().size()));
}

TEST(ModelGrad, MoeSoftmaxRenormalised) { check_gradients(test::tiny_moe_config(), 11); }

TEST(ModelGrad, MoeSoftmaxNotRenormalisedWithAuxAndZLoss) {
  ModelConfig c = test::tiny_moe_config();
  c.norm_topk_prob = false;
  c.load_balance = LoadBalance::aux_loss;
  c.aux_loss_coef = 0.1f;
  c.z_loss_coef = 0.01f;
  check_gradients(c, 12);
}

TEST(ModelGrad, MoeSigmoidSeqAuxSharedExpert) {
  ModelConfig c = test::tiny_moe_config();
  c.scoring = Scoring::sigmoid;
  c.load_balance = LoadBalance::seq_aux_loss;
  c.aux_loss_coef = 0.1f;
  c.shared_expert_ff = 12;
  check_gradients(c, 13);
}

TEST(ModelGrad, MoeWithSamplingTemperature) { check_gradients(test::tiny_moe_config(), 15, 0.7f); }

TEST(ModelGrad, MoeWithRouterTemperatureAndKlRegularisers) {
  check_gradients(test::tiny_moe_config(), 16, 1.0f, true);
}

TEST(ModelGrad, DenseTwin) {
  ModelConfig c = test::tiny_moe_config();
  c.n_experts = 0;
  check_gradients(c, 14);
}

}  // namespace
}  // namespace moerl
