// The RL loop end to end on a tiny scenario: every algorithm runs; identical engines are truly
// on-policy; resume is bit-identical; collapse detection; results file contents.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "store/h5io.h"
#include "rl_fixture.h"
#include "sim/io/model_io.h"
#include "sim/rl/precursors.h"
#include "sim/rl/registry.h"
#include "sim/rl/rollout.h"
#include "sim/rl/trainer.h"
#include "sim/jobs/run.h"

namespace moerl {
namespace {


RunSummary run(const Scenario& s, const std::string& out, const std::string& dir, bool resume = false,
               int max_steps = -1) {
  return test::run_quiet(s, out, dir, {.resume = resume, .max_steps = max_steps});
}

TEST(RlLoop, EveryAlgorithmRunsAndWritesFiniteMetrics) {
  const std::string dir = test::tmp_dir("algos");
  std::vector<std::vector<std::string>> variants;  // every algorithm of the table, then choices of grpo
  for (const std::string& name : algorithm_names()) variants.push_back({"rl.algorithm=" + name});
  variants.insert(variants.end(), {
      {"rl.algorithm=grpo", "rl.correction=tis"},
      {"rl.algorithm=grpo", "rl.correction=mis"}, {"rl.algorithm=grpo", "rl.routing_replay=old"},
      {"rl.algorithm=grpo", "rl.old_logprobs=rollout"}, {"rl.algorithm=grpo", "rl.kl_coef=0.1", "rl.freeze_router=true"},
      {"rl.algorithm=grpo", "model.n_experts=0"},
      {"rl.algorithm=grpo", "model.expert_bias=true", "model.load_balance=aux_loss"},
      // the MiniRL paper's arms (arXiv 2512.01374) are keys: without the IS weight, without the
      // mask off-policy, with R2 / R3, with length normalisation; SAPO under a correction
      {"rl.algorithm=minirl", "rl.correction=none"},
      {"rl.algorithm=minirl", "rl.minirl_mask=false", "rl.minibatches=2"},
      {"rl.algorithm=minirl", "rl.routing_replay=old", "rl.minibatches=2"},
      {"rl.algorithm=minirl", "rl.aggregation=seq-mean-token-mean", "rl.routing_replay=rollout"},
      {"rl.algorithm=sapo", "rl.correction=tis", "rl.sapo_tau_neg=2"}});
  for (const auto& sets : variants) {
    const Scenario s = test::tiny_scenario(sets);
    const std::string out = dir + "/run.h5";
    const RunSummary sum = run(s, out, dir);
    EXPECT_EQ(sum.status, "complete") << sets.back();
    EXPECT_EQ(sum.steps, 3);
    for (const char* m : {"reward_mean", "loss", "grad_norm", "kl_rollout_train", "entropy", "is_ratio_mean"}) {
      const auto v = test::run_metric(out, m);
      ASSERT_EQ(v.size(), 3u) << m;
      for (double x : v) EXPECT_TRUE(std::isfinite(x)) << sets.back() << " " << m;
    }
    const H5File f = H5File::open(out);
    EXPECT_EQ(f.attr_string("/", "status"), "complete");
    EXPECT_EQ(f.attr_int("/", "seed"), 3);
    EXPECT_NE(f.attr_string("/", "scenario").find("rl.algorithm"), std::string::npos);
    // the resolved choices are attributes, so readers need not know any row's defaults
    const AlgorithmInfo* a = algorithm_find(f.attr_string("/", "algorithm"));
    ASSERT_TRUE(a);
    const bool row_defaults = sets.size() == 1;
    if (row_defaults) {
      EXPECT_EQ(f.attr_double("/", "clip_low"), a->clip_low);
      EXPECT_EQ(f.attr_double("/", "clip_high"), a->clip_high);
      // the row's forced correction, else its default's (a scenario key: minirl's tis)
      EXPECT_EQ(f.attr_string("/", "correction"), correction_name(a->correction.value_or(s.rl.loss.correction)));
      EXPECT_EQ(s.rl.loss.correction, a->correction.value_or(s.rl.loss.correction));
      // the algorithm's own keys are attributes of its runs only
      for (const AlgorithmInfo& other : algorithm_registry())
        for (const AlgorithmParam& p : other.params)
          EXPECT_EQ(f.has_attr("/", p.key), algorithm_reads_param(a->name, p.key)) << a->name << " " << p.key;
    }
  }
}

// Under the FP8 rollout every diagnostic and flag is written, every step, with plausible values.
TEST(RlLoop, Fp8RolloutWritesEveryCorrectionDiagnostic) {
  const std::string dir = test::tmp_dir("diag");
  const Scenario s = test::tiny_scenario({"rl.steps=3"});
  ASSERT_EQ(s.profile(s.engines.rollout).name, "fp8-rollout");
  const std::string out = dir + "/run.h5";
  run(s, out, dir);
  const double tokens = 16.0 * 4;  // prompts_per_step × group_size sequences × 4 response tokens
  for (const char* m : {"rc_ess_token", "rc_ess_seq"})
    for (double x : test::run_metric(out, m)) {
      EXPECT_GT(x, 0.0) << m;
      EXPECT_LE(x, 1.0) << m;
    }
  EXPECT_LT(test::run_metric(out, "rc_ess_seq")[0], 1.0);  // the mismatch makes the weights unequal
  for (const char* m : {"rc_chi2_token", "rc_chi2_seq", "rc_k3", "rc_seq_log_ratio_abs_mean"})
    for (double x : test::run_metric(out, m)) EXPECT_GE(x, 0.0) << m;
  for (double x : test::run_metric(out, "rc_k3")) EXPECT_GT(x, 0.0);
  const auto k3 = test::run_metric(out, "rc_k3"), k3_audit = test::run_metric(out, "kl_rollout_train");
  for (size_t i = 0; i < k3.size(); ++i) EXPECT_NEAR(k3[i], k3_audit[i], 1e-3 * k3_audit[i]);  // two paths, one quantity
  for (double x : test::run_metric(out, "rc_k1")) EXPECT_TRUE(std::isfinite(x));
  for (const char* m : {"rc_tis_truncated_frac", "rc_mis_masked_frac", "rc_icepop_masked_frac",
                        "rc_seq_tis_truncated_frac", "rc_seq_tis_geo_truncated_frac", "rc_seq_mis_masked_frac",
                        "rc_seq_max_k3_masked_frac"}) {
    const auto v = test::run_metric(out, m);
    ASSERT_EQ(v.size(), 3u) << m;
    for (double x : v) {
      EXPECT_GE(x, 0.0) << m;
      EXPECT_LE(x, 1.0) << m;
    }
  }
  const H5File f = H5File::open(out);
  EXPECT_EQ(f.shape("metrics/rc_bucket_tokens"), (std::vector<int64_t>{3, 5}));
  const auto counts = test::run_metric(out, "rc_bucket_tokens"), gt2 = test::run_metric(out, "rc_bucket_ratio_gt2_frac"),
             absd = test::run_metric(out, "rc_bucket_abs_log_ratio");
  for (int st = 0; st < 3; ++st) {
    double sum = 0;
    for (int b = 0; b < 5; ++b) {
      const double n = counts[st * 5 + b];
      sum += n;
      if (n > 0) {
        EXPECT_GE(gt2[st * 5 + b], 0.0);
        EXPECT_LE(gt2[st * 5 + b], 1.0);
        EXPECT_GE(absd[st * 5 + b], 0.0);
      } else {
        EXPECT_TRUE(std::isnan(absd[st * 5 + b]));
      }
    }
    EXPECT_EQ(sum, tokens) << "step " << st;
  }
  for (double x : test::run_metric(out, "response_length_mean")) EXPECT_EQ(x, 4.0);  // fixed-length answers
  for (const PrecursorFlag& p : precursor_flags())
    for (double x : test::run_metric(out, p.name)) EXPECT_TRUE(x == 0.0 || x == 1.0) << p.name;
}

// Every correction is off by default and, switched on, changes the run (the loss it trains on).
TEST(RlLoop, EverySequenceCorrectionIsOffByDefaultAndChangesARun) {
  const std::string dir = test::tmp_dir("corr");
  // partial credit: a random policy gets nonzero advantages, so the loss is not identically 0
  const Scenario base = test::tiny_scenario({"rl.steps=2", "task.partial_credit=true"});
  EXPECT_EQ(base.rl.loss.correction, Correction::none);
  run(base, dir + "/none.h5", dir);
  const auto loss0 = test::run_metric(dir + "/none.h5", "loss");
  for (const char* c : {"seq-tis", "seq-tis-geo", "seq-mis", "tis+seq-mis", "seq-max-k3"}) {
    for (const char* algo : {"grpo", "gspo", "rspo"}) {
      const Scenario s = test::tiny_scenario({"rl.steps=2", "task.partial_credit=true", std::string("rl.correction=") + c,
                                              std::string("rl.algorithm=") + algo});
      const std::string out = dir + "/" + algo + ".h5";
      const RunSummary sum = run(s, out, dir);
      EXPECT_EQ(sum.status, "complete") << c << " " << algo;
      for (double x : test::run_metric(out, "loss")) EXPECT_TRUE(std::isfinite(x)) << c << " " << algo;
      if (std::string(algo) == "grpo") {
        EXPECT_NE(test::run_metric(out, "loss"), loss0) << c;
      }
    }
  }
}

TEST(RlLoop, IdenticalExactEnginesAreTrulyOnPolicy) {
  const std::string dir = test::tmp_dir("onpolicy");
  for (const char* temp : {"1.0", "0.7"}) {
    const Scenario s = test::tiny_scenario({"engines.rollout=fp32-ref", "engines.train=fp32-ref",
                                            std::string("rl.temperature=") + temp, "rl.steps=2"});
    const std::string out = dir + "/run.h5";
    run(s, out, dir);
    for (double x : test::run_metric(out, "kl_rollout_train")) EXPECT_EQ(x, 0.0) << temp;
    for (double x : test::run_metric(out, "kl_rollout_train_full")) EXPECT_EQ(x, 0.0) << temp;
    for (double x : test::run_metric(out, "is_ratio_min")) EXPECT_EQ(x, 1.0) << temp;
    for (double x : test::run_metric(out, "is_ratio_max")) EXPECT_EQ(x, 1.0) << temp;
    for (double x : test::run_metric(out, "flip_rate_mean")) EXPECT_EQ(x, 0.0) << temp;
  }
  // and the injected mismatch is visible with the default engines (fp8 rollout, bf16 train)
  const Scenario s = test::tiny_scenario({"rl.steps=2"});
  run(s, dir + "/mm.h5", dir);
  for (double x : test::run_metric(dir + "/mm.h5", "kl_rollout_train")) EXPECT_GT(x, 0.0);
}

// On-policy (one mini-batch, π_old recomputed), r = 1 in value: GRPO's clipped surrogate and CISPO's
// clipped weight both give A·∇log π per token under token-mean, so their runs agree bit for bit in
// everything but the reported loss (docs/algorithms.md, CISPO's ε). With two mini-batches the
// second update sees r ≠ 1 and the two differ.
TEST(RlLoop, CispoIsGrpoOnPolicyAndDiffersOffPolicy) {
  const std::string dir = test::tmp_dir("cispo_grpo");
  for (const char* mb : {"1", "2"}) {
    std::vector<std::vector<double>> got[2];
    for (int i = 0; i < 2; ++i) {
      const Scenario s = test::tiny_scenario({"rl.steps=3", "task.partial_credit=true", std::string("rl.minibatches=") + mb,
                                              std::string("rl.algorithm=") + (i == 0 ? "grpo" : "cispo")});
      const std::string out = dir + "/run" + std::to_string(i) + ".h5";
      run(s, out, dir);
      for (const char* m : {"reward_mean", "grad_norm", "entropy", "kl_rollout_train", "is_ratio_mean", "loss"})
        got[i].push_back(test::run_metric(out, m));
    }
    if (std::string(mb) == "1") {
      for (size_t k = 0; k + 1 < got[0].size(); ++k) EXPECT_EQ(got[0][k], got[1][k]) << "metric " << k;
      EXPECT_NE(got[0].back(), got[1].back());  // the surrogates' values differ
    } else {
      EXPECT_NE(got[0][1], got[1][1]);  // grad_norm: the second mini-batch's update differs
    }
  }
}

TEST(RlLoop, ResumeIsBitIdentical) {
  const std::string dir = test::tmp_dir("resume");
  const Scenario s = test::tiny_scenario({"rl.steps=4", "rl.eval_every=2"});
  run(s, dir + "/straight.h5", dir);
  const RunSummary first = run(s, dir + "/split.h5", dir, false, 2);
  EXPECT_EQ(first.status, "running");
  EXPECT_EQ(first.steps, 2);
  const RunSummary rest = run(s, dir + "/split.h5", dir, true);
  EXPECT_EQ(rest.status, "complete");
  const RunSummary again = run(s, dir + "/split.h5", dir, true);  // finished: nothing to redo
  EXPECT_EQ(again.status, "complete");
  EXPECT_EQ(again.steps, 4);
  const H5File a = H5File::open(dir + "/straight.h5");
  for (const std::string& name : a.datasets_below("metrics")) {
    const std::string m = name.substr(8);
    if (m.rfind("time_", 0) == 0) continue;  // wall-clock times differ, nothing else may
    const auto x = test::run_metric(dir + "/straight.h5", m), y = test::run_metric(dir + "/split.h5", m);
    ASSERT_EQ(x.size(), y.size()) << m;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!(std::isnan(x[i]) && std::isnan(y[i]))) {
        EXPECT_EQ(x[i], y[i]) << m << "[" << i << "]";
      }
    }
  }
  const auto ma = model_load_checkpoint(run_checkpoint_path(dir + "/straight.h5"));
  const auto mb = model_load_checkpoint(run_checkpoint_path(dir + "/split.h5"));
  EXPECT_EQ(ma->params().data(), mb->params().data());
}

// The flags are recomputed from the series, so a resumed run fires them at the same steps.
TEST(RlLoop, PrecursorFlagsResumeAlike) {
  const std::string dir = test::tmp_dir("precursors");
  const Scenario s = test::tiny_scenario({"rl.steps=5", "task.partial_credit=true", "precursors.window=1",
                                          "precursors.k3_rise=1.01", "precursors.entropy_spike=1.001",
                                          "precursors.ess_drop=0.999"});
  run(s, dir + "/straight.h5", dir);
  run(s, dir + "/split.h5", dir, false, 3);
  run(s, dir + "/split.h5", dir, true);
  double fired = 0;
  for (const PrecursorFlag& p : precursor_flags()) {
    const auto a = test::run_metric(dir + "/straight.h5", p.name);
    EXPECT_EQ(a, test::run_metric(dir + "/split.h5", p.name)) << p.name;
    EXPECT_EQ(a[0], 0.0) << p.name;  // no history at the first step
    for (double x : a) fired += x;
  }
  EXPECT_GT(fired, 0);  // the low thresholds make some flag fire: the comparison is not of zeros
}

TEST(RlLoop, StaleRolloutsSeparateStalenessFromNumericsAndResumeBitIdentically) {
  const std::string dir = test::tmp_dir("stale");
  // partial credit: a random policy still gets nonzero advantages, so the weights move
  const Scenario exact = test::tiny_scenario({"rl.rollout_staleness=2", "rl.steps=3", "task.partial_credit=true",
                                              "engines.rollout=fp32-ref", "engines.train=fp32-ref"});
  run(exact, dir + "/exact.h5", dir);
  const auto ks = test::run_metric(dir + "/exact.h5", "kl_staleness"), kn = test::run_metric(dir + "/exact.h5", "kl_numerics");
  EXPECT_EQ(ks[0], 0.0);  // step 0 rolls out with the base weights, which are still current
  EXPECT_GT(ks[2], 0.0);  // later the rollout weights lag two optimizer steps behind
  for (double x : kn) EXPECT_EQ(x, 0.0);  // identical exact engines: no numerics part at all
  for (double x : test::run_metric(dir + "/exact.h5", "kl_rollout_train")) EXPECT_GE(x, 0.0);

  const Scenario s = test::tiny_scenario({"rl.rollout_staleness=1", "rl.steps=4", "task.partial_credit=true"});
  run(s, dir + "/straight.h5", dir);
  run(s, dir + "/split.h5", dir, false, 2);
  run(s, dir + "/split.h5", dir, true);
  for (const char* m : {"reward_mean", "loss", "kl_staleness", "kl_numerics", "grad_norm"})
    EXPECT_EQ(test::run_metric(dir + "/straight.h5", m), test::run_metric(dir + "/split.h5", m)) << m;
}

TEST(RlLoop, SharedPrefixRoutingGivesEverySampleOfAGroupThePromptsRouting) {
  const Scenario s = test::tiny_scenario();
  Model m(s.model);
  params_init(&m.params(), s.model, 1);
  const int G = 4, U = 3, S = U * G, P = 5, R = 3, T = P + R, L = s.model.n_layers, K = s.model.top_k;
  std::vector<int32_t> prompts(static_cast<size_t>(S) * P);
  for (int u = 0; u < U; ++u)
    for (int g = 0; g < G; ++g)
      for (int t = 0; t < P; ++t) prompts[(static_cast<size_t>(u) * G + g) * P + t] = (u * 7 + t * 3) % 9;
  RolloutBatch rb;
  rollout_generate(&rb, m, s.profile("fp8-rollout"), prompts.data(), S, P, R, SamplingConfig{}, 1, 0, 0, G);
  for (int l = 0; l < L; ++l)
    for (int u = 0; u < U; ++u)
      for (int g = 1; g < G; ++g)
        for (int t = 0; t < P * K; ++t)
          EXPECT_EQ(rb.topk_ids[((static_cast<size_t>(l) * S + u * G + g) * T) * K + t],
                    rb.topk_ids[((static_cast<size_t>(l) * S + u * G) * T) * K + t]);
}

TEST(RlLoop, CollapseDetection) {
  const Scenario s = test::tiny_scenario({"rl.collapse_frac=0.5", "rl.collapse_patience=3", "rl.collapse_window=2"});
  auto model = std::make_unique<Model>(s.model);
  RlSetup setup;
  setup.rl = s.rl;
  setup.task = s.task;
  setup.optim = s.optim;
  setup.rollout = setup.train = setup.eval = s.profile("fp32-ref");
  RlTrainer trainer(setup, model.get());
  RunResults r;
  // 2-step averages: –, 0.4, 0.55 (peak), 0.375, 0.225, 0.15, 0.1 → below 0.275 from step 4 on
  const double rewards[] = {0.2, 0.6, 0.5, 0.25, 0.2, 0.1, 0.1};
  const bool expect[] = {false, false, false, false, false, false, true};
  for (int i = 0; i < 7; ++i) {
    r.begin_step(i);
    r.set("reward_mean", rewards[i]);
    r.set("finite", 1.0);
    EXPECT_EQ(trainer.check_collapse(r), expect[i]) << i;
  }
  r.begin_step(7);
  r.set("reward_mean", 0.6);
  r.set("finite", 0.0);  // a NaN anywhere collapses at once
  EXPECT_TRUE(trainer.check_collapse(r));
}

TEST(RlLoop, DumpTensorsWritesTheFirstMinibatch) {
  const std::string dir = test::tmp_dir("dump");
  const Scenario s = test::tiny_scenario({"rl.steps=1", "rl.algorithm=icepop"});
  RunOptions o;
  o.out = dir + "/d.h5";
  o.cache_dir = dir + "/cache";
  o.progress = false;
  o.dump_tensors = true;
  run_rl(s, o);
  const H5File f = H5File::open(o.out);
  for (const char* n : {"logp_rollout", "logp_old", "logp_new", "advantages", "mask", "ratio", "weights", "loss_terms"})
    EXPECT_EQ(f.shape(std::string("dump/step_0/") + n), (std::vector<int64_t>{8, 4})) << n;
  const std::vector<float> w = f.read_f32("dump/step_0/weights");
  const std::vector<float> lo = f.read_f32("dump/step_0/logp_old"), lr = f.read_f32("dump/step_0/logp_rollout");
  for (size_t j = 0; j < w.size(); ++j) {  // IcePop's weight is the masked k = π_old/π_rollout
    const double k = std::exp(static_cast<double>(lo[j]) - lr[j]);
    EXPECT_NEAR(w[j], (k >= 0.5 && k <= 5.0) ? k : 0.0, 1e-5 * k);
  }
}

}  // namespace
}  // namespace moerl
