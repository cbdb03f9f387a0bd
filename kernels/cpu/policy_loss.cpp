// cpu/policy_loss.cpp — the RL policy loss where the log-probs are (kernels/ops.def:
// policy_loss_rows): the host-device row function of kernels/cuda/hd/policy_loss.h over the rows
// in order with one accumulator, so the totals are sim/rl's policy_loss's serial sums, bit for bit.
// A mini-batch's rows are few and short (S·R tokens, each a few exps): one thread.
#include <algorithm>
#include <cstddef>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/policy_loss.h"

namespace moerl::cpu {

void policy_loss_rows(float* dlogp, double* totals, float* ratio, float* weight, float* term, const float* logp_new,
                      const int32_t* new_row, const float* logp_old, const float* logp_rollout, const float* mask,
                      const float* logp_ref, const int32_t* seq, const float* advantages, const float* gamma,
                      const double* scale, int S, int R, const PolicyLossParams& p) {
  std::fill_n(totals, static_cast<int>(kLossTotals), 0.0);
  for (int i = 0; i < S; ++i) {
    const size_t at = static_cast<size_t>(seq[i]) * R, mine = static_cast<size_t>(i) * R;
    const size_t row = static_cast<size_t>(new_row[i]);
    cuda::hd_policy_loss_row(dlogp + row, ratio ? ratio + mine : nullptr, weight ? weight + mine : nullptr,
                             term ? term + mine : nullptr, totals, logp_new + row, logp_old + at, logp_rollout + at,
                             mask + at, logp_ref ? logp_ref + at : nullptr, gamma ? gamma + mine : nullptr,
                             static_cast<double>(advantages[seq[i]]), scale[i], R, p);
  }
}

}  // namespace moerl::cpu
