// The variant tables (sim/rl/registry.h, sim/rl/corrections.h, sim/rl/step_hooks.h,
// sim/tasks/task.h, kernels/numerics_profiles.h): every row is reachable by its name, does what
// its row says, and every list and message is derived from the table; RSPO's γ from the
// widened algorithm seam; the response slice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "kernels/numerics_profiles.h"
#include "kernels/rng.h"
#include "models/config.h"
#include "sim/io/results.h"
#include "sim/rl/corrections.h"
#include "sim/rl/positions.h"
#include "sim/rl/registry.h"
#include "sim/rl/step_hooks.h"
#include "sim/tasks/task.h"

namespace moerl {
namespace {

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Registry, EveryAlgorithmRowCreatesItsLossAndIsNamedInTheMessages) {
  std::set<std::string> seen;
  for (const AlgorithmInfo& a : algorithm_registry()) {
    SCOPED_TRACE(a.name);
    EXPECT_TRUE(seen.insert(a.name).second);
    EXPECT_EQ(algorithm_find(a.name), &a);
    LossConfig c;
    c.algorithm = a.name;
    const auto algo = algorithm_create(c);
    ASSERT_TRUE(algo);
    // a row alone (r3: grpo's loss with a routing choice) is the class of the row it names; every
    // other row names its own class
    EXPECT_EQ(std::string(algo->name()), a.loss_of ? a.loss_of : a.name);
    EXPECT_EQ(a.create == nullptr, a.loss_of != nullptr);  // a factory or a row to take it from
    EXPECT_NE(algorithm_must_be().find(a.name), std::string::npos);
    EXPECT_NE(algorithm_key_doc().find(a.name), std::string::npos);
    EXPECT_NE(what_of([] {
                LossConfig bad;
                bad.algorithm = "ppo9";
                algorithm_create(bad);
              }).find(a.name),
              std::string::npos);
  }
  EXPECT_EQ(algorithm_find("ppo9"), nullptr);
  const std::vector<std::string> names = algorithm_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));  // the order every list is written in
}

TEST(Registry, ResolveTakesDefaultsAndForcedChoicesFromTheRow) {
  for (const AlgorithmInfo& a : algorithm_registry()) {
    SCOPED_TRACE(a.name);
    RlConfig rl;
    rl.loss.algorithm = a.name;
    rl.resolve();
    EXPECT_EQ(rl.loss.clip_low, a.clip_low);
    EXPECT_EQ(rl.loss.clip_high, a.clip_high);
    EXPECT_EQ(rl.routing_replay, a.routing_replay.value_or(RoutingReplay::none));
    EXPECT_EQ(rl.loss.correction, a.correction.value_or(Correction::none));
    rl.validate();
    RlConfig set;  // a clip set by the scenario wins over the row's default
    set.loss.algorithm = a.name;
    set.loss.clip_low = 0.1f;
    set.resolve();
    EXPECT_EQ(set.loss.clip_low, 0.1f);
  }
  const AlgorithmInfo* gspo = algorithm_find("gspo");  // GSPO paper §5.1
  ASSERT_TRUE(gspo);
  EXPECT_EQ(gspo->clip_low, 3e-4f);
  EXPECT_EQ(gspo->clip_high, 4e-4f);
  RlConfig r3;
  r3.loss.algorithm = "r3";
  r3.resolve();
  r3.routing_replay = RoutingReplay::old;
  EXPECT_NE(what_of([&] { r3.validate(); }).find("r3 means routing_replay = rollout"), std::string::npos);
}

TEST(Registry, EachAlgorithmRecordsExactlyTheExtraMetricsOfItsRow) {
  std::set<std::string> all;
  for (const AlgorithmInfo& a : algorithm_registry())
    for (const ExtraMetric& x : a.metrics) EXPECT_TRUE(all.insert(x.name).second) << x.name;
  for (const AlgorithmInfo& a : algorithm_registry()) {
    SCOPED_TRACE(a.name);
    LossConfig c;
    c.algorithm = a.name;
    auto algo = algorithm_create(c);
    RunResults res;
    res.begin_step(0);
    algo->record(&res);
    for (const std::string& name : all) {
      const bool own = std::any_of(a.metrics.begin(), a.metrics.end(), [&](const ExtraMetric& x) { return name == x.name; });
      EXPECT_EQ(res.series(name) != nullptr, own) << name;
      // with nothing observed, an algorithm reports what runs without it record
      if (own) {
        for (const ExtraMetric& x : a.metrics) {
          if (name == x.name) {
            EXPECT_EQ(res.last(name), x.off);
          }
        }
      }
    }
  }
}

TEST(Registry, OnlyRspoAsksForTheRouterShift) {
  for (const AlgorithmInfo& a : algorithm_registry()) {
    LossConfig c;
    c.algorithm = a.name;
    EXPECT_EQ(algorithm_create(c)->needs().router_shift, std::string(a.name) == "rspo") << a.name;
  }
}

// γ = max(γ_min, exp(−mean_l mean_k |Δ log p_router|)) at the positions scoring the response,
// recomputed here from the same arrays; the view's gather is what puts this rank's rows into the
// mini-batch.
TEST(Registry, RspoPreparesGammaFromTheRouterShiftAtTheScoredPositions) {
  const int L = 2, K = 2, P = 3, R = 4, T = P + R, S_step = 5;
  const std::vector<int> mine = {3, 1};
  const int n = static_cast<int>(mine.size());
  Rng rng(rng_derive(7, 0, {}));
  std::vector<float> lp_new(static_cast<size_t>(L) * n * T * K), lp_old(static_cast<size_t>(L) * S_step * T * K);
  for (float& x : lp_new) x = -2.0f * rng.uniform();
  for (float& x : lp_old) x = -2.0f * rng.uniform();
  LossConfig c;
  c.algorithm = "rspo";
  c.rspo_floor = 0.45f;
  auto rspo = algorithm_create(c);
  MinibatchView v;
  v.slice = ResponseSlice{P, R, T};
  v.L = L;
  v.K = K;
  v.S_step = S_step;
  v.n_mine = n;
  v.mine = mine.data();
  v.router_logp_new = lp_new.data();
  v.router_logp_old = lp_old.data();
  int gathered = 0;
  v.gather = [&](const std::vector<double>& x) {
    ++gathered;
    return x;
  };
  LossBatch b;
  rspo->prepare(&b, v);
  EXPECT_EQ(gathered, 1);
  ASSERT_NE(b.gamma, nullptr);
  double floor_hits = 0.0;
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < R; ++r) {
      const int t = P - 1 + r;  // the position whose output scores response token r
      double d = 0.0;
      for (int l = 0; l < L; ++l)
        for (int k = 0; k < K; ++k)
          d += std::fabs(static_cast<double>(lp_new[((static_cast<size_t>(l) * n + i) * T + t) * K + k]) -
                         lp_old[((static_cast<size_t>(l) * S_step + mine[i]) * T + t) * K + k]);
      const double floor = c.rspo_floor;
      const double expected = std::max(floor, std::exp(-d / (L * K)));
      floor_hits += expected == floor;
      EXPECT_EQ(b.gamma[static_cast<size_t>(i) * R + r], static_cast<float>(expected)) << i << " " << r;
    }
  EXPECT_GT(floor_hits, 0.0);  // the inputs reach the floor and the band above it
  EXPECT_LT(floor_hits, n * R);
  RunResults res;
  res.begin_step(0);
  rspo->record(&res);
  EXPECT_EQ(res.last("rspo_gamma_min"), static_cast<double>(c.rspo_floor));
  EXPECT_LT(res.last("rspo_gamma_mean"), 1.0);
  // a dense model offers no router: γ = 1 (null)
  MinibatchView dense = v;
  dense.router_logp_new = dense.router_logp_old = nullptr;
  rspo->prepare(&b, dense);
  EXPECT_EQ(b.gamma, nullptr);
}

TEST(Registry, CorrectionRowsFollowTheEnumAndCarryTheirWeights) {
  const auto& table = rl::correction_registry();
  ASSERT_EQ(table.size(), kCorrectionNames.size());
  const std::string doc = rl::correction_key_doc();
  for (size_t i = 0; i < table.size(); ++i) {
    const rl::CorrectionInfo& k = table[i];
    const std::string name = correction_name(k.kind);
    SCOPED_TRACE(name);
    EXPECT_EQ(static_cast<size_t>(k.kind), i);
    Correction parsed;
    ASSERT_TRUE(correction_parse(name, &parsed));
    EXPECT_EQ(parsed, k.kind);
    // the level is the row's field, and only the sequence-level ones have a sequence factor
    EXPECT_EQ(rl::correction_is_sequence_level(k.kind), k.level == rl::CorrectionLevel::sequence);
    EXPECT_EQ(k.level == rl::CorrectionLevel::sequence, k.sequence != nullptr);
    // a correction an algorithm's row forces (icepop) is not offered by rl.correction
    const AlgorithmInfo* forced = rl::correction_forced_by(k.kind);
    EXPECT_EQ(forced != nullptr, k.kind == Correction::icepop);
    EXPECT_EQ(doc.find(" " + name + " (") != std::string::npos, forced == nullptr);
    const std::vector<std::string> settable = rl::correction_settable_names();
    EXPECT_EQ(std::count(settable.begin(), settable.end(), name), forced ? 0 : 1);
    if (forced) {
      EXPECT_NE(rl::correction_must_be().find(std::string("rl.algorithm = ") + forced->name), std::string::npos);
    }
  }
  LossConfig c;
  c.correction_cap = 1.5f;
  c.correction_cap_low = 0.5f;
  EXPECT_EQ(rl::correction_weight(c, Correction::none, 3.0), 1.0);
  EXPECT_EQ(rl::correction_weight(c, Correction::tis, 3.0), 1.5);
  EXPECT_EQ(rl::correction_weight(c, Correction::tis, 0.2), 0.5);
  EXPECT_EQ(rl::correction_weight(c, Correction::tis_seq_mis, 0.2), 0.5);
  EXPECT_EQ(rl::correction_weight(c, Correction::mis, 1.2), 1.2);
  EXPECT_EQ(rl::correction_weight(c, Correction::mis, 1.6), 0.0);
  EXPECT_EQ(rl::correction_weight(c, Correction::seq_mis, 9.0), 1.0);  // no token part
  rl::SeqLogRatio s;
  s.sum = 1.0;
  s.len = 4.0;  // geometric mean exp(0.25) ≈ 1.28: outside the default mask band
  EXPECT_EQ(rl::seq_correction_weight(c, Correction::seq_tis, s), 1.5);
  EXPECT_EQ(rl::seq_correction_weight(c, Correction::seq_tis_geo, s), std::exp(0.25));
  EXPECT_EQ(rl::seq_correction_weight(c, Correction::seq_mis, s), 0.0);
  EXPECT_EQ(rl::seq_correction_weight(c, Correction::tis, s), 1.0);  // token-level: no factor
  s.len = 0.0;
  EXPECT_EQ(rl::seq_correction_weight(c, Correction::seq_mis, s), 1.0);  // fully masked sequence
}

TEST(Registry, StabilisersHookInWhenOnAndReportTheirMetricsOffOtherwise) {
  ModelConfig moe;
  moe.n_experts = 4;
  moe.top_k = 2;
  RlConfig off;
  const StepHooks none = step_hooks_create(off, moe);
  EXPECT_TRUE(none.active.empty());
  std::set<std::string> off_names;
  for (const ExtraMetric& x : none.off_metrics) off_names.insert(x.name);
  EXPECT_EQ(off_names, (std::set<std::string>{"calib_lambda", "surgery_frac"}));
  RlConfig on;
  on.router_kl_coef = 0.1f;
  on.calib_coef = 0.05f;
  on.grad_surgery = true;
  on.router_temp_every = 2;
  moe.expert_bias = true;
  const StepHooks all = step_hooks_create(on, moe);
  EXPECT_EQ(all.active.size(), stabiliser_registry().size());
  EXPECT_TRUE(all.off_metrics.empty());
  ModelConfig dense = moe;  // the router stabilisers need a router; the bias rule is the model's
  dense.n_experts = 0;
  EXPECT_EQ(step_hooks_create(on, dense).active.size(), 1u);
}

TEST(Registry, EveryTaskRowCreatesItsTask) {
  std::vector<std::string> names;
  for (const TaskInfo& t : task_registry()) {
    SCOPED_TRACE(t.name);
    TaskConfig c;
    c.name = t.name;
    c.length = 3;
    EXPECT_EQ(std::string(task_create(c)->name()), t.name);
    EXPECT_EQ(task_find(t.name), &t);
    EXPECT_NE(task_key_doc().find(t.name), std::string::npos);
    names.push_back(t.name);
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  EXPECT_EQ(task_names(), joined);
  EXPECT_EQ(task_find("parity"), nullptr);
}

TEST(Registry, EveryBuiltinProfileRowIsValidAndNamedInTheList) {
  for (const ProfileInfo& row : profile_registry()) {
    SCOPED_TRACE(row.name);
    NumericsProfile p;
    ASSERT_TRUE(profile_builtin(row.name, &p));
    EXPECT_EQ(p.name, row.name);
    p.validate();
    EXPECT_EQ(p.is_exact_fp32(), std::string(row.name) == "fp32-ref");
    EXPECT_NE(profile_builtin_names().find(row.name), std::string::npos);
  }
  NumericsProfile p;
  EXPECT_FALSE(profile_builtin("fp4", &p));
}

TEST(Registry, ResponseSliceReadsTheScoredPositions) {
  const int S = 3, P = 4, R = 3, T = P + R;
  const ResponseSlice x{P, R, T};
  const std::vector<uint8_t> mask = rl_scored_positions_mask(S, P, T);
  std::vector<float> per_position(static_cast<size_t>(S) * (T - 1));
  for (size_t j = 0; j < per_position.size(); ++j) per_position[j] = static_cast<float>(j);
  const std::vector<float> resp = x.response_logprobs(per_position, S);
  ASSERT_EQ(resp.size(), static_cast<size_t>(S) * R);
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < R; ++r) {
      EXPECT_EQ(resp[static_cast<size_t>(s) * R + r], static_cast<float>(s * (T - 1) + P - 1 + r));
      EXPECT_EQ(mask[x.row_at(s, r)], 1);  // the flip metrics read the same positions
      EXPECT_EQ(x.token_at(s, r), static_cast<size_t>(s) * T + P + r);
    }
  // the gradient goes back to the same entries, zero elsewhere; `first` skips other ranks' rows
  const std::vector<float> back = x.per_position_grad(resp, 1, S - 1);
  ASSERT_EQ(back.size(), static_cast<size_t>(S - 1) * (T - 1));
  for (int s = 0; s < S - 1; ++s)
    for (int t = 0; t < T - 1; ++t) {
      const bool scored = t >= P - 1;
      EXPECT_EQ(back[static_cast<size_t>(s) * (T - 1) + t],
                scored ? static_cast<float>((s + 1) * (T - 1) + t) : 0.0f);
    }
}

}  // namespace
}  // namespace moerl
