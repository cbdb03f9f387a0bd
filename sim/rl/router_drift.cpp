// router_drift.cpp — the probe set and the drift of the router's choices (router_drift.h).
#include "sim/rl/router_drift.h"

#include <algorithm>

#include "sim/tasks/task.h"

namespace moerl {

namespace {
// Entity of the probe's forwards in the profile's noise streams: apart from every step's calls.
constexpr uint64_t kProbeCall = 0x70726f6265ULL;  // "probe"
}  // namespace

RouterProbe router_probe_make(const Task& task, uint64_t seed, int n, const ModelParallel& par) {
  RouterProbe p;
  const int P = task.prompt_len(), A = task.max_answer_len();
  p.n = n;
  p.P = P;
  p.T = P + A;
  const SeqBlock blk = dp_block(n, par.dp_size(), par.dp_rank());
  p.begin = blk.begin;
  const int B = static_cast<int>(blk.size());
  // padding is never computed (a packed forward); any in-vocabulary id fills it
  p.tokens.assign(static_cast<size_t>(B) * p.T, std::max(task.eos(), 0));
  p.lengths.resize(B);
  std::vector<int32_t> answer(A);
  for (int b = 0; b < B; ++b) {
    int32_t* row = &p.tokens[static_cast<size_t>(b) * p.T];
    const int len = task.example(row, answer.data(), seed, 1, static_cast<int>(blk.begin) + b);
    std::copy(answer.begin(), answer.begin() + len, row + P);
    p.lengths[b] = P + len;
  }
  return p;
}

std::vector<int32_t> router_probe_route(Model& model, const RouterProbe& probe, const NumericsProfile& profile) {
  ForwardRequest req;
  req.tokens = probe.tokens.data();
  req.B = probe.B();
  req.B_total = probe.n;
  req.T = probe.T;
  req.lengths = probe.lengths.data();
  req.profile = &profile;
  req.call = kProbeCall;
  ForwardResult out;
  model.forward(&out, req);
  return std::move(out.topk_ids);
}

std::vector<double> router_probe_drift(const RouterProbe& probe, const std::vector<int32_t>& ids,
                                       int L, int K, const ModelParallel& par) {
  const int B = probe.B(), T = probe.T;
  // [L] moved routes, then [L] own routes: one reduction
  std::vector<int64_t> counts(2 * static_cast<size_t>(L), 0);
  std::vector<int32_t> a(K), b(K);
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < B; ++s)
      for (int t = 0; t < probe.lengths[s]; ++t) {
        const size_t at = ((static_cast<size_t>(l) * B + s) * T + t) * K;
        std::copy_n(&ids[at], K, a.begin());
        std::copy_n(&probe.base_ids[at], K, b.begin());
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        counts[l] += a != b;
        counts[L + l] += 1;
      }
  if (par.dp_size() > 1) par.dp->allreduce_sum(counts.data(), static_cast<int64_t>(counts.size()));
  std::vector<double> drift(L);
  for (int l = 0; l < L; ++l) drift[l] = counts[L + l] > 0 ? static_cast<double>(counts[l]) / counts[L + l] : 0.0;
  return drift;
}

}  // namespace moerl
