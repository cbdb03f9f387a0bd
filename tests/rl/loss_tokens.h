// loss_tokens.h — host arrays as a LossBatch (also test_loss_device.cpp's), a few hand-written
// tokens, random ones for finite differences, and the central-difference check the loss tests of
// the newer algorithms share (test_sapo.cpp, test_minirl.cpp, test_cispo.cpp). Log-probs are
// floats as in a run; differences of the hand tokens are exact in float (0.25, 0.125, ...), so
// r = exp(difference) exactly as computed by hand.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rng.h"
#include "sim/rl/loss.h"
#include "sim/scenario/scenario.h"

namespace moerl::test {

// The loss config of a scenario with rl.algorithm = `algorithm` and the settings `sets`
// ("rl.clip_low=0.2"): the algorithm's row's defaults resolved as a run resolves them.
inline LossConfig loss_config(const std::string& algorithm, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> all = {"rl.algorithm=" + algorithm};
  all.insert(all.end(), sets.begin(), sets.end());
  return Scenario::defaults(all).rl.loss;
}

// The LossBatch over host arrays: [S, R] log-probs (new, old, rollout) and mask, [S] advantages; no
// reference log-probs and no γ (a test that needs them sets them).
inline LossBatch host_batch(int S, int R, const std::vector<float>& lnew, const std::vector<float>& lold,
                            const std::vector<float>& lroll, const std::vector<float>& mask,
                            const std::vector<float>& adv) {
  LossBatch b;
  b.S = S;
  b.R = R;
  b.logp_new = lnew.data();
  b.logp_old = lold.data();
  b.logp_rollout = lroll.data();
  b.mask = mask.data();
  b.advantages = adv.data();
  return b;
}

struct Tokens {
  int S = 0, R = 0;
  std::vector<float> lnew, lold, lroll, mask, adv;
  LossBatch batch() const { return host_batch(S, R, lnew, lold, lroll, mask, adv); }
};

// S sequences of R tokens with log-probs around −1.5, ratios r and ρ spread across the clip and
// truncation bands, ragged masks, advantages of both signs.
inline Tokens random_tokens(uint64_t seed, int S = 6, int R = 9, double spread = 0.3, double roll_spread = 0.8) {
  Tokens d;
  d.S = S;
  d.R = R;
  Rng rng(rng_derive(seed, 78, {}));
  for (int j = 0; j < S * R; ++j) {
    const float base = -1.5f + 0.5f * rng.normal();
    d.lold.push_back(base);
    d.lnew.push_back(base + static_cast<float>(spread) * rng.normal());
    d.lroll.push_back(base + static_cast<float>(roll_spread) * rng.normal());
  }
  for (int i = 0; i < S; ++i) {
    const int len = 2 + static_cast<int>(rng.below(R - 1));
    for (int t = 0; t < R; ++t) d.mask.push_back(t < len ? 1.0f : 0.0f);
    d.adv.push_back(rng.normal());
  }
  d.adv[0] = -1.3f;
  d.adv[1] = 0.9f;
  return d;
}

// The loss's dlogp against central differences of `value(lnew)`, an independent double-precision
// evaluation in which whatever the algorithm stops the gradient of is held at the run's log-probs.
// Tokens at a kink (a clip or mask boundary within h) are skipped; most must be compared.
inline void expect_gradient_matches(const Tokens& d, const LossOutput& out,
                                    const std::function<double(const std::vector<double>&)>& value) {
  const std::vector<double> lnew(d.lnew.begin(), d.lnew.end());
  const double h = 1e-6, ref = value(lnew);
  EXPECT_NEAR(out.loss, ref, 1e-9 * (1 + std::fabs(ref)));
  int compared = 0;
  for (size_t j = 0; j < lnew.size(); ++j) {
    std::vector<double> p = lnew, m = lnew;
    p[j] += h;
    m[j] -= h;
    const double lp = value(p), lm = value(m);
    const double fwd = (lp - ref) / h, bwd = (ref - lm) / h;
    if (std::fabs(fwd - bwd) > 1e-4 * (1 + std::fabs(fwd))) continue;  // a kink
    EXPECT_NEAR(out.dlogp[j], (lp - lm) / (2 * h), 1e-5 * (1 + std::fabs(fwd))) << "token " << j;
    ++compared;
  }
  EXPECT_GT(compared, static_cast<int>(lnew.size()) / 2);
}

}  // namespace moerl::test
