// test_audit.cpp — the audit's metric math on hand-made inputs whose values are worked out by hand
// (no model involved), and its three report formats.
#include <cmath>

#include <gtest/gtest.h>

#include "store/h5io.h"
#include "sim/jobs/audit.h"
#include "sim_test_util.h"

namespace moerl {
namespace {

TEST(Audit, TopkSetsIgnoreOrder) {
  const int32_t a[3] = {4, 1, 7}, b[3] = {7, 4, 1}, c[3] = {7, 4, 2};
  EXPECT_FALSE(audit_topk_sets_differ(a, b, 3));
  EXPECT_TRUE(audit_topk_sets_differ(a, c, 3));
}

// L = 2 layers, N = 3 tokens, K = 2. Layer 0: token 0 same set in another order, token 1 flips.
// Layer 1: tokens 1 and 2 flip. So flips per layer 1/3 and 2/3; token 1 has two flipped layers,
// token 2 one, token 0 none.
const int32_t kIdsA[2 * 3 * 2] = {0, 1, 2, 3, 4, 5, /* layer 1 */ 1, 2, 3, 4, 5, 6};
const int32_t kIdsB[2 * 3 * 2] = {1, 0, 2, 4, 4, 5, /* layer 1 */ 1, 2, 3, 5, 6, 7};

TEST(Audit, RoutingFlipsByHand) {
  AuditAccum acc;
  audit_init(&acc, 2);
  audit_add_routing(&acc, kIdsA, kIdsB, nullptr, 2, 3, 2);
  const AuditMetrics m = audit_finish(acc);
  ASSERT_EQ(m.flip_rate.size(), 2u);
  EXPECT_DOUBLE_EQ(m.flip_rate[0], 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.flip_rate[1], 2.0 / 3.0);
  EXPECT_EQ(m.layer_flips, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.routing_tokens, 3);
  EXPECT_DOUBLE_EQ(m.any_flip_share, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.mean_flipped_layers, 1.0);
  EXPECT_TRUE(m.alarm);
  EXPECT_EQ(m.worst_layer, 1);
}

// The same pairs with B's margins (K-th − (K+1)-th logit): layer 0 {0.5, 0.1, 0.9}, layer 1
// {0.3, 0.2, 0.05}. Sorted: 0.05 (flip), 0.1 (flip), 0.2 (flip), 0.3, 0.5, 0.9; six pairs in fifths
// of sizes 1, 1, 1, 1, 2 (n·q/5 bounds 0, 1, 2, 3, 4, 6): flip rates 1, 1, 1, 0, 0.
TEST(Audit, MarginsAndTheirFlipsByHand) {
  const float top[2 * 3 * 2] = {1.5f, 1.0f, 0.3f, 0.2f, 2.0f, 1.1f, /* layer 1 */ 0.8f, 0.5f, 0.4f, 0.2f, 0.15f, 0.1f};
  AuditAccum acc;
  audit_init(&acc, 2);
  audit_add_routing(&acc, kIdsA, kIdsB, nullptr, 2, 3, 2);
  audit_add_margins(&acc, kIdsA, kIdsB, top, nullptr, 2, 3, 2);
  audit_add_load(&acc, kIdsB, nullptr, 2, 3, 2, 8);
  const AuditMetrics m = audit_finish(acc);
  ASSERT_TRUE(m.has_margins);
  EXPECT_NEAR(m.router_margin_mean, (0.5 + 0.1 + 0.9 + 0.3 + 0.2 + 0.05) / 6.0, 1e-6);
  EXPECT_NEAR(m.router_margin_p10, 0.05, 1e-6);  // rank (6 − 1) / 10 = 0
  EXPECT_NEAR(m.router_margin_p50, 0.2, 1e-6);   // rank (6 − 1) / 2 = 2
  ASSERT_EQ(m.flip_rate_by_margin.size(), 5u);
  const double want[5] = {1.0, 1.0, 1.0, 0.0, 0.0};
  for (int q = 0; q < 5; ++q) EXPECT_DOUBLE_EQ(m.flip_rate_by_margin[q], want[q]) << q;
  // B's load: layer 0 ids {1,0,2,4,4,5} → experts 0,1,2,5 once, 4 twice, 3,6,7 dead; layer 1
  // {1,2,3,5,6,7} → 0 and 4 dead. Mean 6/8 per layer.
  ASSERT_TRUE(m.has_load);
  EXPECT_EQ(m.dead_experts, 5);
  EXPECT_DOUBLE_EQ(m.load_max_over_mean, 2.0 / 0.75);
  const double var0 = (4 * 0.0625 + 1.5625 + 3 * 0.5625) / 8.0;  // {1,1,1,0,2,1,0,0} − 0.75
  const double var1 = (6 * 0.0625 + 2 * 0.5625) / 8.0;                       // {0,1,1,1,0,1,1,1} − 0.75
  EXPECT_NEAR(m.load_cv, (std::sqrt(var0) + std::sqrt(var1)) / 0.75 / 2.0, 1e-12);
  // the reports carry them
  AuditInfo info;
  EXPECT_NE(audit_format_json(m, info).find("\"flip_rate_by_margin\": [1, 1, 1, 0, 0]"), std::string::npos);
  EXPECT_NE(audit_format_table(m, info).find("dead (layer, expert) pairs"), std::string::npos);
}

TEST(Audit, RoutingMaskAndBatchesAccumulate) {
  // Tokens 0 and 2 only, fed as two calls: layer 0 has no flip, layer 1 one flip in two tokens.
  const uint8_t mask[3] = {1, 0, 1};
  AuditAccum acc;
  audit_init(&acc, 2);
  audit_add_routing(&acc, kIdsA, kIdsB, mask, 2, 3, 2);
  const AuditMetrics m = audit_finish(acc);
  EXPECT_EQ(m.routing_tokens, 2);
  EXPECT_DOUBLE_EQ(m.flip_rate[0], 0.0);
  EXPECT_DOUBLE_EQ(m.flip_rate[1], 0.5);
  EXPECT_DOUBLE_EQ(m.any_flip_share, 0.5);
  EXPECT_DOUBLE_EQ(m.mean_flipped_layers, 0.5);

  audit_add_routing(&acc, kIdsA, kIdsA, nullptr, 2, 3, 2);  // three more tokens, no flips
  const AuditMetrics m2 = audit_finish(acc);
  EXPECT_EQ(m2.routing_tokens, 5);
  EXPECT_DOUBLE_EQ(m2.flip_rate[1], 1.0 / 5.0);
}

TEST(Audit, AlarmIsStrictlyAboveTwoPercent) {
  // 1 flip in 50 tokens = exactly 2%: no alarm; 1 in 49: alarm.
  for (int n : {50, 49}) {
    std::vector<int32_t> a(static_cast<size_t>(n), 0), b(static_cast<size_t>(n), 0);
    b[0] = 1;
    AuditAccum acc;
    audit_init(&acc, 1);
    audit_add_routing(&acc, a.data(), b.data(), nullptr, 1, n, 1);
    EXPECT_EQ(audit_finish(acc).alarm, n == 49) << n;
  }
}

// Row 0: A = [0, 0] (p = ½, ½), B = [1, 0] (p = e/(1+e), 1/(1+e)), target 0.
// Row 1: A = [0, 0], B = [0, 3] (p_b(0) = 1/(1+e³)), target 0: ratio r ≈ 0.095, extreme.
// Row 2: masked out (wildly different, must not count).
TEST(Audit, LogprobMetricsByHand) {
  const float la[3 * 2] = {0, 0, 0, 0, 0, 0};
  const float lb[3 * 2] = {1, 0, 0, 3, 50, -50};
  const int32_t targets[3] = {0, 0, 1};
  const uint8_t mask[3] = {1, 1, 0};
  AuditAccum acc;
  audit_init(&acc, 0);
  audit_add_logprobs(&acc, la, lb, targets, mask, 3, 2);
  const AuditMetrics m = audit_finish(acc);

  const double e = std::exp(1.0), e3 = std::exp(3.0);
  const double pb0_row0 = e / (1 + e), pb1_row0 = 1 / (1 + e);
  const double pb0_row1 = 1 / (1 + e3), pb1_row1 = e3 / (1 + e3);
  const double kl0 = 0.5 * std::log(0.5 / pb0_row0) + 0.5 * std::log(0.5 / pb1_row0);
  const double kl1 = 0.5 * std::log(0.5 / pb0_row1) + 0.5 * std::log(0.5 / pb1_row1);
  const double r0 = pb0_row0 / 0.5, r1 = pb0_row1 / 0.5;
  const double k3_0 = r0 - 1 - std::log(r0), k3_1 = r1 - 1 - std::log(r1);
  // The code computes in double from the same float logits (exactly representable here); the
  // only differences are the order of double roundings: a few ulps.
  const double tol = 1e-14;
  EXPECT_EQ(m.tokens, 2);
  EXPECT_NEAR(m.kl, (kl0 + kl1) / 2, tol);
  EXPECT_NEAR(m.k3, (k3_0 + k3_1) / 2, tol);
  EXPECT_DOUBLE_EQ(m.extreme_share, 0.5);  // row 1 only: 1/r1 ≈ 10.5 > 2; r0 ≈ 1.46 ≤ 2
  EXPECT_NEAR(m.max_abs_dlogp, std::fabs(std::log(r1)), tol);
  EXPECT_TRUE(m.flip_rate.empty());
  EXPECT_FALSE(m.alarm);
}

TEST(Audit, IdenticalInputsGiveExactZeros) {
  const float logits[2 * 4] = {0.3f, -1.2f, 2.5f, 0.0f, 7.0f, 7.0f, -3.0f, 1e-3f};
  const int32_t targets[2] = {2, 1};
  AuditAccum acc;
  audit_init(&acc, 2);
  audit_add_logprobs(&acc, logits, logits, targets, nullptr, 2, 4);
  audit_add_routing(&acc, kIdsA, kIdsA, nullptr, 2, 3, 2);
  const AuditMetrics m = audit_finish(acc);
  EXPECT_EQ(m.kl, 0.0);
  EXPECT_EQ(m.k3, 0.0);
  EXPECT_EQ(m.max_abs_dlogp, 0.0);
  EXPECT_EQ(m.extreme_share, 0.0);
  EXPECT_EQ(m.flip_rate, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(m.any_flip_share, 0.0);
  EXPECT_FALSE(m.alarm);
}

AuditMetrics flipped_metrics() {
  AuditAccum acc;
  audit_init(&acc, 2);
  audit_add_routing(&acc, kIdsA, kIdsB, nullptr, 2, 3, 2);
  const float la[2] = {0, 0}, lb[2] = {1, 0};
  const int32_t t[1] = {0};
  audit_add_logprobs(&acc, la, lb, t, nullptr, 1, 2);
  return audit_finish(acc);
}

AuditInfo info() {
  AuditInfo i;
  i.checkpoint = "c.h5";
  i.profile_a = "fp8-rollout";
  i.profile_b = "bf16-train";
  i.tokens_source = "sampled under fp8-rollout";
  i.positions = "response positions 16..47";
  i.sequences = 3;
  i.scenario = "model.d_model = 128\n";
  return i;
}

TEST(Audit, TableShowsEveryLayerAndTheAlarm) {
  const std::string t = audit_format_table(flipped_metrics(), info());
  EXPECT_NE(t.find("layer 0 flip rate"), std::string::npos) << t;
  EXPECT_NE(t.find("33.333%"), std::string::npos) << t;
  EXPECT_NE(t.find("66.667%"), std::string::npos) << t;
  EXPECT_NE(t.find("ALARM: routing flip rate above 2% (layer 1: 66.67%)"), std::string::npos) << t;
  AuditAccum quiet;
  audit_init(&quiet, 2);
  audit_add_routing(&quiet, kIdsA, kIdsA, nullptr, 2, 3, 2);
  EXPECT_EQ(audit_format_table(audit_finish(quiet), info()).find("ALARM"), std::string::npos);
}

TEST(Audit, JsonAndHdf5CarryTheSameNumbers) {
  const AuditMetrics m = flipped_metrics();
  const std::string j = audit_format_json(m, info());
  char kl[64];
  std::snprintf(kl, sizeof kl, "\"kl\": %.17g,", m.kl);
  EXPECT_NE(j.find(kl), std::string::npos) << j;
  EXPECT_NE(j.find("\"alarm\": true"), std::string::npos) << j;
  EXPECT_NE(j.find("\"layer_flips\": [1, 2]"), std::string::npos) << j;
  EXPECT_NE(j.find("\"scenario\": \"model.d_model = 128\\n\""), std::string::npos) << j;

  test::ScratchDir dir;
  const std::string path = dir.file("audit.h5");
  audit_write_h5(path, m, info());
  const H5File f = H5File::open(path);
  EXPECT_EQ(f.attr_string("/", "format"), "moerl-audit");
  EXPECT_EQ(f.attr_double("/", "kl"), m.kl);
  EXPECT_EQ(f.attr_double("/", "k3"), m.k3);
  EXPECT_EQ(f.attr_int("/", "alarm"), 1);
  EXPECT_EQ(f.attr_string("/", "profile_b"), "bf16-train");
  std::vector<double> rate(2);
  f.read("flip_rate", {2}, rate.data());
  EXPECT_EQ(rate, m.flip_rate);
}

}  // namespace
}  // namespace moerl
