// router.cpp — see router.h. Formulas: reference §7.1 (scoring, top-k, renormalisation),
// §7.2 (switch / sequence aux loss, z-loss), §3.1 (R3: replayed ids, gates from own logits).
#include "models/router.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/hd/router.h"  // the gate weights' backward and logsumexp rows the backend runs
#include "kernels/precision.h"
#include "kernels/rng.h"

namespace moerl {

namespace {

// The artificial mismatch dial (profile router_noise): z[n, e] += σ·N(0, 1), row n's draws from
// Stream::router_noise with the top-k key's call + n (so they follow the position, not the batch
// a row is computed in, exactly like the random tie-break).
void router_add_noise(float* z, int N, int E, float sigma, const NoiseKey& key) {
  for (int n = 0; n < N; ++n) {
    NoiseKey row_key = key;
    row_key.call = key.call + static_cast<uint64_t>(n);
    Rng rng(rng_derive(row_key, Stream::router_noise));
    for (int e = 0; e < E; ++e) z[static_cast<size_t>(n) * E + e] += sigma * rng.normal();
  }
}

// p̂ of the aux losses: the full softmax for softmax routers, σ(z) normalised over all experts
// for sigmoid routers (reference §7.2).
void aux_probs(float* phat, const float* scores, int E, Scoring scoring) {
  if (scoring == Scoring::softmax) {
    std::memcpy(phat, scores, sizeof(float) * E);
    return;
  }
  float s = 0.0f;
  for (int e = 0; e < E; ++e) s += scores[e];
  for (int e = 0; e < E; ++e) phat[e] = scores[e] / s;
}

// Switch-style balance loss L = c·E·Σ_e f_e·P_e with f_e = n_e/(K·n), P_e = mean p̂_e over n rows,
// n_e from the top-k of p̂ itself (not the routing actually used, which may be replayed or biased).
// In two steps so that the statistics can be summed over a batch split across ranks:
// balance_stats adds rows [r0, r1) into count[E] (n_e) and sum_p[E] (Σ p̂_e), in row order;
// balance_finish writes dL/dp̂ = c·E·f_e/n · scale into aux_weight rows [r0, r1) and returns L.
void balance_stats(double* count, double* sum_p, const float* scores, int r0, int r1, int E, int K,
                   Scoring scoring) {
  const int n = r1 - r0;
  if (n <= 0) return;
  std::vector<float> phat(static_cast<size_t>(n) * E);
  for (int r = 0; r < n; ++r) aux_probs(&phat[static_cast<size_t>(r) * E], scores + static_cast<size_t>(r0 + r) * E, E, scoring);
  std::vector<int32_t> ids(static_cast<size_t>(n) * K);
  std::vector<float> vals(static_cast<size_t>(n) * K);
  cpu::topk_forward(ids.data(), vals.data(), phat.data(), n, E, K, TieBreak::lowest, NoiseKey{});
  for (int i = 0; i < n * K; ++i) count[ids[i]] += 1.0;
  for (int r = 0; r < n; ++r)
    for (int e = 0; e < E; ++e) sum_p[e] += phat[static_cast<size_t>(r) * E + e];
}

float balance_finish(float* aux_weight, const double* count, const double* sum_p, double n, int r0,
                     int r1, int E, int K, float coef, float scale) {
  double loss = 0.0;
  for (int e = 0; e < E; ++e) {
    const double f = count[e] / (static_cast<double>(K) * n);
    loss += f * sum_p[e] / n;
    const float w = static_cast<float>(coef * E * f / n * scale);
    for (int r = r0; r < r1; ++r) aux_weight[static_cast<size_t>(r) * E + e] = w;
  }
  return static_cast<float>(coef * E * loss);
}

// ---- forward: score, select, gate, auxiliary losses, KL --------------------------------------
// Each step is a backend op on the router's ActBuffers; what the host adds (the noise dial, the
// regularisers) reads a downloaded copy.

// Score: z = W_r·h, rounded to the profile's router_logits format, the noise dial added, divided
// by the router temperature (everything below sees z / τ); then the selection scores.
void router_score(RouterActs* a, const float* h, const PackedWeight& w_router, int N, const RouterCall& c,
                  const Backend& be) {
  const ModelConfig& cfg = *c.cfg;
  const int E = cfg.n_experts;
  const size_t NE = static_cast<size_t>(N) * E;
  be.linear_forward(a->logits.data(), h, w_router, N, c.linear);
  be.round_format(a->logits.data(), static_cast<int64_t>(NE), c.profile->router_logits);
  if (c.profile->router_noise > 0.0f) {  // the artificial dial's draws are the host's stream
    std::vector<float> z(NE);
    be.mem_copy(z.data(), a->logits.data(), NE * sizeof(float), CopyDir::to_host, CrossKind::activations);
    router_add_noise(z.data(), N, E, c.profile->router_noise, c.topk_key);
    be.mem_copy(a->logits.data(), z.data(), NE * sizeof(float), CopyDir::to_device, CrossKind::activations);
  }
  if (c.temperature != 1.0f) be.divide_scalar(a->logits.data(), a->logits.data(), static_cast<int64_t>(NE), c.temperature);
  if (cfg.scoring == Scoring::softmax) be.softmax_forward(a->scores.data(), a->logits.data(), N, E);
  else be.sigmoid_forward(a->scores.data(), a->logits.data(), static_cast<int64_t>(NE));
}

// Select: the recorded ids (replay) and/or the router's own top-k (normal mode, or own_ids asked).
// The ids used end on both sides: ids on the host, dev_ids on the backend.
void router_select(RouterActs* a, int N, const RouterCall& c, const Backend& be) {
  const ModelConfig& cfg = *c.cfg;
  const int E = cfg.n_experts, K = cfg.top_k;
  const size_t NE = static_cast<size_t>(N) * E, NK = static_cast<size_t>(N) * K;
  if (c.mode == RouterMode::replay) {
    std::memcpy(a->ids.data(), c.replay_ids, sizeof(int32_t) * NK);
    be.mem_copy(a->dev_ids.data(), a->ids.data(), NK * sizeof(int32_t), CopyDir::to_device, CrossKind::indices);
  }
  if (c.mode != RouterMode::normal && !c.own_ids) return;
  // Selection on the logits themselves when there is no bias: scores are monotone in z, and
  // exp/σ could merge two distinct logits into one float and invent a tie.
  const float* sel = a->logits.data();
  if (c.bias) {
    a->biased.resize(be, NE);
    be.add_bias_rows(a->biased.data(), a->scores.data(), c.bias, N, E);
    sel = a->biased.data();
  }
  a->topk_vals.resize(be, NK);
  int32_t* own = a->dev_ids.data();
  if (c.mode != RouterMode::normal) {  // the router's own choice while replaying
    a->own_dev.resize(be, NK);
    own = a->own_dev.data();
  }
  be.topk_forward(own, a->topk_vals.data(), sel, N, E, K, c.profile->tie_break, c.topk_key);
  // normal mode: the ids come down with the router's log-probs at them, in router_gate's one read
  if (c.mode != RouterMode::normal)
    be.mem_copy(c.own_ids, own, NK * sizeof(int32_t), CopyDir::to_host, CrossKind::indices);
  else if (c.own_ids)
    a->own_ids_out = c.own_ids;
}

// The gate weights of the ids used, and router_logp at them (or at probe_ids): one op on the
// backend; load += the ids' counts on the host. What the host reads of the layer comes down in one
// copy: the router's own ids (normal mode) and its log-probs, side by side where they are computed
// ([ids | log-probs], K + K values a token).
void router_gate(RouterActs* a, float* router_logp, int64_t* load, int N, const RouterCall& c, const Backend& be) {
  const ModelConfig& cfg = *c.cfg;
  const int E = cfg.n_experts, K = cfg.top_k;
  const size_t NK = static_cast<size_t>(N) * K;
  if (c.stage) {  // resident routing: the ids and their log-probs stay where they are
    if (router_logp || load || a->own_ids_out)
      throw std::logic_error("router_gate: resident routing brings nothing to the host");
    be.router_gate_forward(a->gate.data(), reinterpret_cast<float*>(c.stage + NK), a->logits.data(), a->scores.data(),
                           a->dev_ids.data(), c.probe_ids, N, E, K, cfg.scoring == Scoring::softmax,
                           cfg.norm_topk_prob);
    if (NK > 0) be.mem_copy(c.stage, a->dev_ids.data(), NK * sizeof(int32_t), CopyDir::on_device, CrossKind::indices);
    return;
  }
  const bool ids_down = c.mode == RouterMode::normal;
  a->staged.resize(be, 2 * NK);
  int32_t* staged = a->staged.data();
  float* logp_dev = router_logp ? reinterpret_cast<float*>(staged + NK) : nullptr;
  be.router_gate_forward(a->gate.data(), logp_dev, a->logits.data(), a->scores.data(), a->dev_ids.data(),
                         router_logp ? c.probe_ids : nullptr, N, E, K, cfg.scoring == Scoring::softmax,
                         cfg.norm_topk_prob);
  if (ids_down && NK > 0) be.mem_copy(staged, a->dev_ids.data(), NK * sizeof(int32_t), CopyDir::on_device, CrossKind::indices);
  const size_t first = ids_down ? 0 : NK, count = (ids_down ? NK : 0) + (router_logp ? NK : 0);
  if (count > 0) {
    a->staged_host.resize(2 * NK);
    be.mem_copy(a->staged_host.data() + first, staged + first, count * sizeof(int32_t), CopyDir::to_host,
                CrossKind::per_token);
  }
  if (ids_down) {
    std::memcpy(a->ids.data(), a->staged_host.data(), NK * sizeof(int32_t));
    if (a->own_ids_out) std::memcpy(a->own_ids_out, a->ids.data(), NK * sizeof(int32_t));
  }
  a->own_ids_out = nullptr;
  if (router_logp) std::memcpy(router_logp, a->staged_host.data() + NK, NK * sizeof(float));
  if (load)
    for (size_t i = 0; i < NK; ++i) load[a->ids[i]] += 1;
}

// The switch balance loss over the whole batch (its statistics summed across ranks); dL/dp̂ into
// aux_weight.
float balance_loss_batch(RouterActs* a, const float* scores, int N, const ModelConfig& cfg, const RowSums& rows) {
  const int E = cfg.n_experts, K = cfg.top_k, G = rows.groups();
  std::vector<double> part(static_cast<size_t>(G) * 2 * E, 0.0), total(2 * E);
  for (int g = 0; g < G; ++g)
    balance_stats(&part[static_cast<size_t>(g) * 2 * E], &part[static_cast<size_t>(g) * 2 * E + E],
                  scores, rows.begin(g), rows.end(g), E, K, cfg.scoring);
  rows.combine(total.data(), part.data(), 2 * E);
  return balance_finish(a->aux_weight.data(), total.data(), total.data() + E,
                        static_cast<double>(rows.rows_total()), 0, N, E, K, cfg.aux_loss_coef, 1.0f);
}

// The sequence balance loss: per sequence (always on one rank) over its own rows (its own length
// in the packed layout), averaged over all sequences of the batch; dL/dp̂ into aux_weight.
float balance_loss_seq(RouterActs* a, const float* scores, const ModelConfig& cfg, const RowSums& rows) {
  const int E = cfg.n_experts, K = cfg.top_k, G = rows.groups();
  const std::vector<int>& sb = rows.seq_begin();
  const float Bt = static_cast<float>(rows.seqs_total());
  std::vector<double> part(G, 0.0);
  std::vector<double> count(E), sum_p(E);
  size_t i = 0;  // local sequence
  for (int g = 0; g < G; ++g) {
    float sum = 0.0f;
    for (; i + 1 < sb.size() && sb[i] < rows.end(g); ++i) {
      const int r0 = sb[i], r1 = sb[i + 1];
      if (r0 < rows.begin(g)) continue;
      std::fill(count.begin(), count.end(), 0.0);
      std::fill(sum_p.begin(), sum_p.end(), 0.0);
      balance_stats(count.data(), sum_p.data(), scores, r0, r1, E, K, cfg.scoring);
      sum += balance_finish(a->aux_weight.data(), count.data(), sum_p.data(), r1 - r0, r0, r1, E, K,
                            cfg.aux_loss_coef, 1.0f / Bt) / Bt;
    }
    part[g] = sum;
  }
  double total = 0.0;
  rows.combine(&total, part.data(), 1);
  return static_cast<float>(total);
}

// The z-loss c_z·mean over the batch's rows of lse(z)².
float z_loss(const float* z, const ModelConfig& cfg, const RowSums& rows) {
  const int E = cfg.n_experts, G = rows.groups();
  std::vector<double> part(G, 0.0);
  for (int g = 0; g < G; ++g)
    for (int n = rows.begin(g); n < rows.end(g); ++n) {
      const double lse = cuda::hd_row_logsumexp(z + static_cast<size_t>(n) * E, E);
      part[g] += lse * lse;
    }
  double zl = 0.0;
  rows.combine(&zl, part.data(), 1);
  return static_cast<float>(cfg.z_loss_coef * zl / static_cast<double>(rows.rows_total()));
}

bool kl_on(const RouterCall& c) {
  return (c.kl_full_target && c.kl_full_weight > 0.0f) || (c.kl_topk_target && c.kl_topk_weight > 0.0f);
}

// One row of KL(softmax z ‖ softmax target) over all E experts: the weighted value, and its
// gradient (· inv_n) into dz. lp, lq: [E] scratch.
double kl_full_row(float* dz, const float* zn, const float* tn, int E, double weight, double inv_n, double* lp,
                   double* lq) {
  const double lz = cuda::hd_row_logsumexp(zn, E), lt = cuda::hd_row_logsumexp(tn, E);
  double kl = 0.0;
  for (int e = 0; e < E; ++e) {
    lp[e] = zn[e] - lz;
    lq[e] = tn[e] - lt;
    kl += std::exp(lp[e]) * (lp[e] - lq[e]);
  }
  for (int e = 0; e < E; ++e) dz[e] += static_cast<float>(weight * inv_n * std::exp(lp[e]) * (lp[e] - lq[e] - kl));
  return weight * kl;
}

// One row of the KL over the row's own top-k, at temperature T; as kl_full_row.
double kl_topk_row(float* dz, const float* zn, const float* tn, const int32_t* id, int K, double T, double weight,
                   double inv_n, double* lp, double* lq) {
  double mz = -1e300, mt = -1e300;
  for (int k = 0; k < K; ++k) { mz = std::max(mz, zn[id[k]] / T); mt = std::max(mt, tn[id[k]] / T); }
  double sz = 0.0, st = 0.0;
  for (int k = 0; k < K; ++k) { sz += std::exp(zn[id[k]] / T - mz); st += std::exp(tn[id[k]] / T - mt); }
  double kl = 0.0;
  for (int k = 0; k < K; ++k) {
    lp[k] = zn[id[k]] / T - mz - std::log(sz);
    lq[k] = tn[id[k]] / T - mt - std::log(st);
    kl += std::exp(lp[k]) * (lp[k] - lq[k]);
  }
  for (int k = 0; k < K; ++k)
    dz[id[k]] += static_cast<float>(weight * inv_n / T * std::exp(lp[k]) * (lp[k] - lq[k] - kl));
  return weight * kl;
}

// KL regularisers against detached target logits (RouterControl), per token, then the mean over
// the batch's tokens: the value, and d/dz into kl_grad.
float router_kl(RouterActs* a, const float* z, int N, const RouterCall& c, const RowSums& rows) {
  const int E = c.cfg->n_experts, K = c.cfg->top_k, G = rows.groups();
  const size_t NE = static_cast<size_t>(N) * E;
  a->kl_grad.assign(NE, 0.0f);
  const double inv_n = 1.0 / static_cast<double>(rows.rows_total());
  std::vector<double> part(G, 0.0), lp(E), lq(E);
  for (int g = 0; g < G; ++g)
    for (int n = rows.begin(g); n < rows.end(g); ++n) {
      const float* zn = z + static_cast<size_t>(n) * E;
      float* dz = a->kl_grad.data() + static_cast<size_t>(n) * E;
      if (c.kl_full_target && c.kl_full_weight > 0.0f)
        part[g] += kl_full_row(dz, zn, c.kl_full_target + static_cast<size_t>(n) * E, E, c.kl_full_weight, inv_n,
                               lp.data(), lq.data());
      if (c.kl_topk_target && c.kl_topk_weight > 0.0f)
        part[g] += kl_topk_row(dz, zn, c.kl_topk_target + static_cast<size_t>(n) * E,
                               a->ids.data() + static_cast<size_t>(n) * K, K, c.kl_topk_temperature,
                               c.kl_topk_weight, inv_n, lp.data(), lq.data());
    }
  double total = 0.0;
  rows.combine(&total, part.data(), 1);
  return static_cast<float>(total * inv_n);
}

// ---- backward: d/dz of each forward term, row by row -------------------------------------------

// balance losses ← p̂ (w: the row's aux_weight, dL/dp̂). phat: [E] scratch.
void balance_backward(float* dzn, const float* sn, const float* w, float* phat, const ModelConfig& cfg) {
  const int E = cfg.n_experts;
  aux_probs(phat, sn, E, cfg.scoring);
  float dot = 0.0f;
  for (int e = 0; e < E; ++e) dot += phat[e] * w[e];
  if (cfg.scoring == Scoring::softmax) {
    for (int e = 0; e < E; ++e) dzn[e] += phat[e] * (w[e] - dot);
  } else {
    float S = 0.0f;
    for (int e = 0; e < E; ++e) S += sn[e];
    for (int e = 0; e < E; ++e) dzn[e] += (w[e] - dot) / S * sn[e] * (1.0f - sn[e]);
  }
}

// z-loss: d/dz c_z·lse²/N = 2·c_z·lse·softmax(z)/N (N: rows of the whole batch).
void z_loss_backward(float* dzn, const float* zn, int E, float coef, int64_t N_total) {
  const float lse = cuda::hd_row_logsumexp(zn, E);
  const float f = 2.0f * coef * lse / static_cast<float>(N_total);
  for (int e = 0; e < E; ++e) dzn[e] += f * std::exp(zn[e] - lse);
}

// The load-balancing loss this call computes: the model's, unless the call switches it off.
LoadBalance balance_of(const RouterCall& c) { return c.balance ? c.cfg->load_balance : LoadBalance::none; }

// True when a training call adds terms computed on the host (they read the logits and scores).
bool host_terms(const RouterCall& c) {
  const ModelConfig& cfg = *c.cfg;
  return balance_of(c) != LoadBalance::none || cfg.z_loss_coef > 0.0f || kl_on(c);
}

}  // namespace

float router_forward(RouterActs* a, float* router_logp, int64_t* load, const float* h,
                     const PackedWeight& w_router, int N, const RouterCall& c) {
  const ModelConfig& cfg = *c.cfg;
  const size_t NE = static_cast<size_t>(N) * cfg.n_experts, NK = static_cast<size_t>(N) * cfg.top_k;
  const Backend& be = backend_or_cpu(c.backend);
  a->logits.resize(be, NE);
  a->scores.resize(be, NE);
  a->ids.resize(NK);
  a->dev_ids.resize(be, NK);
  a->gate.resize(be, NK);
  router_score(a, h, w_router, N, c, be);
  router_select(a, N, c, be);
  router_gate(a, router_logp, load, N, c, be);
  a->kl_grad.clear();
  if (!c.training || !host_terms(c)) return 0.0f;
  if (c.stage) throw std::logic_error("router_forward: resident routing with terms computed on the host");
  // Sums over the whole batch: one partial per row group (rows.h), combined across ranks.
  RowSums local;
  if (!c.rows) local = RowSums(ModelParallel{}, N / std::max(c.seq_len, 1), N / std::max(c.seq_len, 1), c.seq_len);
  const RowSums& rows = c.rows ? *c.rows : local;
  std::vector<float> z_host, s_host;
  const float* z = act_to_host(be, &z_host, a->logits.data(), NE);
  const float* scores = act_to_host(be, &s_host, a->scores.data(), NE);
  float aux = 0.0f;
  a->aux_weight.assign(NE, 0.0f);
  const LoadBalance balance = balance_of(c);
  if (balance == LoadBalance::aux_loss) aux += balance_loss_batch(a, scores, N, cfg, rows);
  else if (balance == LoadBalance::seq_aux_loss) aux += balance_loss_seq(a, scores, cfg, rows);
  if (cfg.z_loss_coef > 0.0f) aux += z_loss(z, cfg, rows);
  if (kl_on(c)) aux += router_kl(a, z, N, c, rows);
  return aux;
}

void router_backward(float* dh, const std::vector<float*>& dw_router, const float* dgate,
                     const RouterActs& a, const float* h, const float* w_router, int N,
                     const RouterCall& c) {
  const ModelConfig& cfg = *c.cfg;
  const int E = cfg.n_experts, K = cfg.top_k, D = cfg.d_model;
  const size_t NE = static_cast<size_t>(N) * E, NK = static_cast<size_t>(N) * K;
  const Backend& be = backend_or_cpu(c.backend);
  ActBuffer<float> dz;
  dz.resize(be, NE);
  const bool softmax = cfg.scoring == Scoring::softmax;
  const LoadBalance balance = balance_of(c);
  if (!c.regularisers || (balance == LoadBalance::none && cfg.z_loss_coef <= 0.0f && a.kl_grad.empty())) {
    // the gate weights' gradient alone: on the backend, where the activations are
    be.router_gate_backward(dz.data(), a.scores.data(), a.dev_ids.data(), a.gate.data(), dgate, N, E, K, softmax,
                            cfg.norm_topk_prob);
    if (c.temperature != 1.0f)  // z = raw / τ
      be.divide_scalar(dz.data(), dz.data(), static_cast<int64_t>(NE), c.temperature);
  } else {
    // with the regularisers: every term per row on the host, in the order of their forward
    std::vector<float> z_host, s_host, g_host, dg_host;
    const float* z = act_to_host(be, &z_host, a.logits.data(), NE);
    const float* scores = act_to_host(be, &s_host, a.scores.data(), NE);
    const float* gate = act_to_host(be, &g_host, a.gate.data(), NK);
    const float* dg = act_to_host(be, &dg_host, dgate, NK);
    std::vector<float> dzh(NE, 0.0f), dp(E), phat(E);
    const int64_t N_total = c.rows ? c.rows->rows_total() : N;
    for (int n = 0; n < N; ++n) {
      const float* zn = z + static_cast<size_t>(n) * E;
      const float* sn = scores + static_cast<size_t>(n) * E;
      float* dzn = dzh.data() + static_cast<size_t>(n) * E;
      cuda::hd_router_gate_backward_row(dzn, dp.data(), sn, a.ids.data() + static_cast<size_t>(n) * K,
                                        gate + static_cast<size_t>(n) * K, dg + static_cast<size_t>(n) * K, E, K,
                                        softmax, cfg.norm_topk_prob);
      if (balance != LoadBalance::none)
        balance_backward(dzn, sn, a.aux_weight.data() + static_cast<size_t>(n) * E, phat.data(), cfg);
      if (cfg.z_loss_coef > 0.0f) z_loss_backward(dzn, zn, E, cfg.z_loss_coef, N_total);
      if (!a.kl_grad.empty()) {  // router_kl's gradient
        const float* kg = a.kl_grad.data() + static_cast<size_t>(n) * E;
        for (int e = 0; e < E; ++e) dzn[e] += kg[e];
      }
      if (c.temperature != 1.0f)  // z = raw / τ
        for (int e = 0; e < E; ++e) dzn[e] /= c.temperature;
    }
    be.mem_copy(dz.data(), dzh.data(), NE * sizeof(float), CopyDir::to_device, CrossKind::activations);
  }
  const std::vector<int> whole{0, N};
  const std::vector<int>& b = c.rows ? c.rows->bounds() : whole;
  for (size_t g = 0; g + 1 < b.size(); ++g)
    be.linear_backward(dh + static_cast<size_t>(b[g]) * D, dw_router[g],
                       dz.data() + static_cast<size_t>(b[g]) * E, h + static_cast<size_t>(b[g]) * D,
                       w_router, b[g + 1] - b[g], E, D);
}

void router_bias_update(float* bias, const int64_t* load, int L, int E, float rate) {
  for (int l = 0; l < L; ++l) {
    const int64_t* n = load + static_cast<size_t>(l) * E;
    double mean = 0.0;
    for (int e = 0; e < E; ++e) mean += n[e];
    mean /= E;
    for (int e = 0; e < E; ++e) {
      const double diff = mean - n[e];
      bias[static_cast<size_t>(l) * E + e] += rate * static_cast<float>((diff > 0) - (diff < 0));
    }
  }
}

}  // namespace moerl
