// test_packed.cpp — the packed training forward (ForwardRequest::lengths: each sequence over its
// own positions, nothing computed for the padding) against the masked [B, T] forward on
// sequences of unequal lengths: under row-independent profiles the own positions' log-probs,
// logits, routing (the router's margins included) and the whole gradient are the masked
// forward's bit for bit, a sequence is its own forward alone, and what legitimately changes —
// the padding no longer routed into expert_load and the load-balancing losses — is checked
// against a hand computation. Decode compaction (Model::generation_keep) is checked in
// tests/rl/test_lengths.cpp through rollout_generate; its argument checks here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>

#include "model_fixture.h"
#include "models/params.h"
#include "models/sites.h"

namespace moerl {
namespace {

constexpr int B = 5, T = 12;
// unequal lengths, one of them the full T, two equal neighbours (one run of the packed attention)
const std::vector<int32_t> kLengths = {12, 7, 7, 3, 10};

struct Pass {
  ForwardResult r;
  std::vector<float> grads;
};

// dLoss/dlogp [B, T-1]: seeded values on each sequence's own log-probs (t < len - 1), 0 on the
// padding's (the masked forward's convention).
std::vector<float> own_dlogp() {
  const std::vector<float> g = test::random_vector(B * (T - 1), 31, 0.5f);
  std::vector<float> d(g.size(), 0.0f);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t + 1 < kLengths[b]; ++t) d[static_cast<size_t>(b) * (T - 1) + t] = g[static_cast<size_t>(b) * (T - 1) + t];
  return d;
}

Pass forward_backward(Model& m, const NumericsProfile& p, const std::vector<int32_t>& tok, const int32_t* lengths,
                      const std::vector<float>& dlogp, int nB = B, int nT = T) {
  m.grads().zero();
  ForwardRequest req;
  req.tokens = tok.data();
  req.B = nB;
  req.T = nT;
  req.lengths = lengths;
  req.profile = &p;
  req.save_for_backward = true;
  req.want_logits = true;
  req.want_router_logits = m.config().is_moe();
  req.want_router_top = m.config().is_moe();
  Pass o;
  m.forward(&o.r, req);
  m.backward(dlogp.data());
  o.grads = m.grads().data();
  return o;
}

ModelConfig dense_config() {
  ModelConfig c = test::tiny_moe_config();
  c.n_experts = 0;
  return c;
}

void expect_packed_equals_masked(const ModelConfig& cfg, const char* profile) {
  SCOPED_TRACE(std::string(profile) + (cfg.is_moe() ? " moe" : " dense"));
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  const NumericsProfile p = test::builtin(profile);
  ASSERT_TRUE(profile_rows_independent(p));
  std::vector<int32_t> tok = test::random_tokens(B * T, cfg.vocab_size, 5);
  const std::vector<float> d = own_dlogp();
  const Pass masked = forward_backward(m, p, tok, nullptr, d);
  // other padding: the packed forward never reads it
  for (int b = 0; b < B; ++b)
    for (int t = kLengths[b]; t < T; ++t) tok[static_cast<size_t>(b) * T + t] = (b + 3 * t) % cfg.vocab_size;
  const Pass packed = forward_backward(m, p, tok, kLengths.data(), d);
  const int V = cfg.vocab_size, L = cfg.n_layers, K = cfg.top_k, E = cfg.n_experts;
  int own = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const bool mine = t < kLengths[b];
      own += mine;
      if (t + 1 < T) {
        const size_t i = static_cast<size_t>(b) * (T - 1) + t;
        EXPECT_EQ(packed.r.logprobs[i], t + 1 < kLengths[b] ? masked.r.logprobs[i] : 0.0f) << "b " << b << " t " << t;
      }
      const size_t row = static_cast<size_t>(b) * T + t;
      for (int v = 0; v < V; ++v)
        ASSERT_EQ(packed.r.logits[row * V + v], mine ? masked.r.logits[row * V + v] : 0.0f) << "b " << b << " t " << t;
      if (!cfg.is_moe()) continue;
      for (int l = 0; l < L; ++l) {
        const size_t lr = static_cast<size_t>(l) * B * T + row;
        for (int k = 0; k < K; ++k) {
          EXPECT_EQ(packed.r.topk_ids[lr * K + k], mine ? masked.r.topk_ids[lr * K + k] : 0);
          EXPECT_EQ(packed.r.router_logp[lr * K + k], mine ? masked.r.router_logp[lr * K + k] : 0.0f);
        }
        for (int e = 0; e < E; ++e)
          EXPECT_EQ(packed.r.router_logits[lr * E + e], mine ? masked.r.router_logits[lr * E + e] : 0.0f);
        // the top-k's margin, selected on the backend: the K-th and (K+1)-th largest of the logits
        std::vector<float> z(packed.r.router_logits.begin() + static_cast<std::ptrdiff_t>(lr * E),
                             packed.r.router_logits.begin() + static_cast<std::ptrdiff_t>((lr + 1) * E));
        std::sort(z.begin(), z.end(), std::greater<float>());
        EXPECT_EQ(packed.r.router_top[lr * 2], mine ? z[K - 1] : 0.0f);
        EXPECT_EQ(packed.r.router_top[lr * 2 + 1], mine ? z[K] : 0.0f);
      }
    }
  // The gradient: the padding's dlogp is 0, and with no load-balancing loss nothing else reaches
  // it, so every tensor's gradient is the masked forward's bit for bit (the chains over rows skip
  // only exact zeros).
  ASSERT_EQ(packed.grads.size(), masked.grads.size());
  int differ = 0;
  for (size_t i = 0; i < packed.grads.size(); ++i) differ += packed.grads[i] != masked.grads[i];
  EXPECT_EQ(differ, 0);
  double norm = 0.0;
  for (float g : packed.grads) norm += static_cast<double>(g) * g;
  EXPECT_GT(norm, 0.0);
  if (!cfg.is_moe()) return;
  // expert_load: (token, slot) pairs of the own positions only — the masked forward's routing of
  // those rows; the masked load also counts the padding's.
  std::vector<int64_t> own_load(static_cast<size_t>(L) * E, 0);
  for (int l = 0; l < L; ++l)
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < kLengths[b]; ++t)
        for (int k = 0; k < K; ++k)
          own_load[static_cast<size_t>(l) * E +
                   masked.r.topk_ids[((static_cast<size_t>(l) * B + b) * T + t) * K + k]] += 1;
  EXPECT_EQ(packed.r.expert_load, own_load);
  int64_t total_packed = 0, total_masked = 0;
  for (int64_t x : packed.r.expert_load) total_packed += x;
  for (int64_t x : masked.r.expert_load) total_masked += x;
  EXPECT_EQ(total_packed, static_cast<int64_t>(L) * own * K);
  EXPECT_EQ(total_masked, static_cast<int64_t>(L) * B * T * K);
}

TEST(Packed, OwnPositionsAndGradientAreTheMaskedForwardsBitForBit) {
  for (const char* profile : {"fp32-ref", "bf16-train"}) {
    expect_packed_equals_masked(test::tiny_moe_config(), profile);
    expect_packed_equals_masked(dense_config(), profile);
  }
}

// Each sequence of a packed batch is the forward of that sequence alone (B = 1, T = its length):
// attention over its own length, RoPE positions from 0, every other op row-wise.
TEST(Packed, EachSequenceIsItsOwnForwardAlone) {
  const ModelConfig cfg = test::tiny_moe_config();
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  const NumericsProfile p = test::builtin("fp32-ref");
  const std::vector<int32_t> tok = test::random_tokens(B * T, cfg.vocab_size, 6);
  const Pass packed = forward_backward(m, p, tok, kLengths.data(), own_dlogp());
  for (int b = 0; b < B; ++b) {
    const int n = kLengths[b];
    if (n < 2) continue;
    const std::vector<int32_t> one(tok.begin() + static_cast<ptrdiff_t>(b) * T, tok.begin() + static_cast<ptrdiff_t>(b) * T + n);
    ForwardRequest req;
    req.tokens = one.data();
    req.B = 1;
    req.T = n;
    req.profile = &p;
    ForwardResult alone;
    m.forward(&alone, req);
    for (int t = 0; t + 1 < n; ++t)
      EXPECT_EQ(packed.r.logprobs[static_cast<size_t>(b) * (T - 1) + t], alone.logprobs[static_cast<size_t>(t)])
          << "b " << b << " t " << t;
  }
}

// The switch aux loss of a packed batch: f_e and P_e over the own positions only (reference
// §7.2), computed by hand from the forward's router logits and routing; the masked batch's, which
// counts the padding too, differs.
TEST(Packed, AuxLossCountsTheOwnPositionsOnly) {
  ModelConfig cfg = test::tiny_moe_config();
  cfg.load_balance = LoadBalance::aux_loss;
  cfg.aux_loss_coef = 0.1f;
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  const NumericsProfile p = test::builtin("fp32-ref");
  const std::vector<int32_t> tok = test::random_tokens(B * T, cfg.vocab_size, 7);
  const std::vector<float> d = own_dlogp();
  const Pass packed = forward_backward(m, p, tok, kLengths.data(), d);
  const Pass masked = forward_backward(m, p, tok, nullptr, d);
  const int L = cfg.n_layers, K = cfg.top_k, E = cfg.n_experts;
  double aux = 0.0, n = 0.0;
  for (int32_t len : kLengths) n += len;
  for (int l = 0; l < L; ++l) {
    std::vector<double> f(E, 0.0), P(E, 0.0);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < kLengths[b]; ++t) {
        const size_t row = static_cast<size_t>(l) * B * T + static_cast<size_t>(b) * T + t;
        const float* z = &packed.r.router_logits[row * E];
        double mx = z[0], s = 0.0;
        for (int e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(z[e]));
        for (int e = 0; e < E; ++e) s += std::exp(z[e] - mx);
        for (int e = 0; e < E; ++e) P[e] += std::exp(z[e] - mx) / s;
        for (int k = 0; k < K; ++k) f[packed.r.topk_ids[row * K + k]] += 1.0;
      }
    for (int e = 0; e < E; ++e) aux += cfg.aux_loss_coef * E * (f[e] / (K * n)) * (P[e] / n);
  }
  EXPECT_NEAR(packed.r.aux_loss, aux, 1e-5 * aux);
  EXPECT_GT(std::fabs(masked.r.aux_loss - packed.r.aux_loss), 1e-4 * aux);
  // the aux gradient now reaches only the own positions: the gradients differ from the masked
  // forward's, whose padding rows carried it too
  EXPECT_NE(packed.grads, masked.grads);
}

// The sequence aux loss runs over each sequence's own rows: the mean of each sequence's aux
// alone.
TEST(Packed, SequenceAuxLossIsTheMeanOfEachSequenceAlone) {
  ModelConfig cfg = test::tiny_moe_config();
  cfg.load_balance = LoadBalance::seq_aux_loss;
  cfg.aux_loss_coef = 0.1f;
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  const NumericsProfile p = test::builtin("fp32-ref");
  const std::vector<int32_t> tok = test::random_tokens(B * T, cfg.vocab_size, 8);
  const Pass packed = forward_backward(m, p, tok, kLengths.data(), own_dlogp());
  double mean = 0.0;
  for (int b = 0; b < B; ++b) {
    const int n = kLengths[b];
    const std::vector<int32_t> one(tok.begin() + static_cast<ptrdiff_t>(b) * T, tok.begin() + static_cast<ptrdiff_t>(b) * T + n);
    ForwardRequest req;
    req.tokens = one.data();
    req.B = 1;
    req.T = n;
    req.profile = &p;
    ForwardResult alone;
    m.forward(&alone, req);
    mean += alone.aux_loss / B;
  }
  EXPECT_NEAR(packed.r.aux_loss, mean, 1e-6 * mean);
}

TEST(Packed, LengthsOutsideTheRowAreRejected) {
  const ModelConfig cfg = test::tiny_moe_config();
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  const std::vector<int32_t> tok = test::random_tokens(B * T, cfg.vocab_size, 5);
  for (int32_t bad : {0, T + 1}) {
    std::vector<int32_t> len = kLengths;
    len[2] = bad;
    ForwardRequest req;
    req.tokens = tok.data();
    req.B = B;
    req.T = T;
    req.lengths = len.data();
    ForwardResult r;
    EXPECT_THROW(m.forward(&r, req), std::invalid_argument) << bad;
  }
}

TEST(Packed, RowIndependentProfiles) {
  for (const char* name : {"fp32-ref", "bf16-train", "fp16"}) EXPECT_TRUE(profile_rows_independent(test::builtin(name))) << name;
  EXPECT_FALSE(profile_rows_independent(test::builtin("fp8-rollout")));
  NumericsProfile p = test::builtin("fp32-ref");
  p.gemm_order = ReduceOrder{OrderKind::reversed, 1};
  EXPECT_TRUE(profile_rows_independent(p));
  p.norm_order = ReduceOrder{OrderKind::split_k, 2};  // chunk orders drawn per row index
  EXPECT_FALSE(profile_rows_independent(p));
  p = test::builtin("fp32-ref");
  p.batch_invariant = false;  // splits sized by the call's rows
  EXPECT_FALSE(profile_rows_independent(p));
  p = test::builtin("fp32-ref");
  p.tie_break = TieBreak::random;
  EXPECT_FALSE(profile_rows_independent(p));
  p = test::builtin("fp32-ref");
  p.router_noise = 0.5f;
  EXPECT_FALSE(profile_rows_independent(p));
  p = test::builtin("fp8-rollout");
  p.gemm_order = p.attn_order = p.norm_order = p.combine_order = ReduceOrder{};
  p.batch_invariant = true;
  p.tie_break = TieBreak::lowest;
  EXPECT_TRUE(profile_rows_independent(p));  // blockwise (1×128) scales are per row
  p.act_scaling = Scaling::tensor;           // one scale over the call's rows
  EXPECT_FALSE(profile_rows_independent(p));
}

TEST(Packed, GenerationKeepChecksItsMap) {
  const ModelConfig cfg = test::tiny_moe_config();
  Model m(cfg);
  params_init(&m.params(), cfg, 4);
  GenerationState* st = nullptr;
  m.generation_begin(&st, 4, 8, nullptr);
  const int32_t overlap[] = {0, 1, 0};  // row 0 twice
  EXPECT_THROW(m.generation_keep(st, overlap, 3), std::invalid_argument);
  const int32_t inside[] = {1, 0};  // a source inside the kept rows, moved
  EXPECT_THROW(m.generation_keep(st, inside, 2), std::invalid_argument);
  const int32_t tail[] = {3, 1};  // row 0 filled from the tail
  EXPECT_NO_THROW(m.generation_keep(st, tail, 2));
  m.generation_end(st);
}

}  // namespace
}  // namespace moerl
