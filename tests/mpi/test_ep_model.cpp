// The MoE transformer spread over the ranks of test_mpi (experts over EP, sequences over DP)
// against the same model in one process, in the same executable: forward log-probs, routing,
// aux loss and load, parameter gradients after backward, generation, the dispatcher's counts and
// rows, and an optimizer step with the checkpoint gather — bit for bit in deterministic mode.
#include <gtest/gtest.h>

#include <cmath>

#include "ep_fixture.h"
#include "kernels/test_device.h"
#include "models/dispatcher.h"
#include "mpi_env.h"
#include "sim/comm/gather.h"
#include "sim/step/optimizer.h"

namespace moerl {
namespace {

using test::bits_equal;
using test::layer_rows;

struct Case {
  std::string name;
  ModelConfig cfg;
  NumericsProfile profile;
  bool replay = false;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"softmax fp32-ref", test::ep_config(), test::builtin_profile("fp32-ref")});
  Case aux{"aux+z loss bf16", test::ep_config(), test::builtin_profile("bf16-train")};
  aux.cfg.load_balance = LoadBalance::aux_loss;
  aux.cfg.aux_loss_coef = 0.1f;
  aux.cfg.z_loss_coef = 0.01f;
  aux.cfg.norm_topk_prob = false;
  out.push_back(aux);
  Case seq{"sigmoid seq-aux shared fp8", test::ep_config(), test::fp8_deterministic()};
  seq.cfg.scoring = Scoring::sigmoid;
  seq.cfg.load_balance = LoadBalance::seq_aux_loss;
  seq.cfg.aux_loss_coef = 0.1f;
  seq.cfg.shared_expert_ff = 12;
  out.push_back(seq);
  Case rep{"replay strided layout bias", test::ep_config(), test::builtin_profile("bf16-train"), true};
  rep.profile.ep_layout = EpLayout{EpLayoutKind::strided, 2};
  rep.cfg.expert_bias = true;
  rep.cfg.load_balance = LoadBalance::aux_loss;
  out.push_back(rep);
  return out;
}

// One model per side: `ref` alone on the whole batch, `dist` on this rank's block.
struct Pair {
  Model ref, dist;
  Pair(const ModelConfig& cfg, int chunks, uint64_t seed) : ref(cfg), dist(cfg) {
    params_init(&ref.params(), cfg, seed);
    dist.params().data() = ref.params().data();
    for (size_t i = 0; i < ref.expert_bias().size(); ++i)  // a bias that changes the routing
      ref.expert_bias()[i] = dist.expert_bias()[i] = 0.01f * static_cast<float>(i % 5);
    ModelParallel alone;
    alone.reduce_chunks = chunks;
    ref.set_parallel(alone);
    dist.set_parallel(test::mpi_grid().model_parallel(chunks));
  }
};

// Forward + backward on both sides; checks everything a forward/backward produces. With `device`
// the spread model runs on TestDeviceBackend (kernels/test_device.h): its parameters, gradients
// and activations in a device memory the host cannot touch, the MoE layer's rows staged through
// the host for the exchange when there are several ranks (models/moe_layer.cpp) — the same bits.
void check_case(const Case& c, int B, int chunks, bool device = false) {
  SCOPED_TRACE(c.name + ", B = " + std::to_string(B) + ", chunks = " + std::to_string(chunks) +
               (device ? ", test device" : ""));
  const RankGrid& g = test::mpi_grid();
  const ModelConfig& cfg = c.cfg;
  const int T = 7, L = cfg.n_layers, K = cfg.top_k, E = cfg.n_experts, D = cfg.d_model;
  TestDeviceBackend dev;  // outlives the models
  Pair m(cfg, chunks, 21);
  if (device) m.dist.set_backend(dev);
  const auto tok = test::seeded_tokens(B * T, cfg.vocab_size, 5);
  const auto w = test::seeded_vector(B * (T - 1), 6);
  const auto replay = test::seeded_ids(L * B * T, E, K, 7);
  const SeqBlock blk = dp_block(B, g.size(), g.rank());
  const int r0 = static_cast<int>(blk.begin) * T, r1 = static_cast<int>(blk.end) * T;

  ForwardRequest req;
  req.tokens = tok.data(); req.B = B; req.T = T; req.profile = &c.profile;
  req.save_for_backward = true; req.want_own_topk = true; req.call = 3;
  if (c.replay) { req.router_mode = RouterMode::replay; req.replay_ids = replay.data(); }
  ForwardResult ref, dist;
  m.ref.forward(&ref, req);
  m.ref.grads().zero();
  m.ref.backward(w.data());

  const std::vector<int32_t> replay_mine = layer_rows(replay, L, B * T, K, r0, r1);
  req.tokens = tok.data() + blk.begin * T; req.B = static_cast<int>(blk.size()); req.B_total = B;
  if (c.replay) req.replay_ids = replay_mine.data();
  m.dist.forward(&dist, req);
  m.dist.grads().zero();
  m.dist.backward(w.data() + blk.begin * (T - 1));

  const std::vector<float> lp_mine(ref.logprobs.begin() + blk.begin * (T - 1), ref.logprobs.begin() + blk.end * (T - 1));
  EXPECT_TRUE(bits_equal(dist.logprobs, lp_mine)) << "log-probs";
  EXPECT_TRUE(bits_equal(dist.topk_ids, layer_rows(ref.topk_ids, L, B * T, K, r0, r1))) << "top-k ids";
  EXPECT_TRUE(bits_equal(dist.own_topk_ids, layer_rows(ref.own_topk_ids, L, B * T, K, r0, r1))) << "own top-k";
  EXPECT_TRUE(bits_equal(dist.router_logp, layer_rows(ref.router_logp, L, B * T, K, r0, r1))) << "router log-probs";
  EXPECT_TRUE(bits_equal(dist.expert_load, ref.expert_load)) << "expert load (whole batch)";
  if (chunks > 0 || g.size() == 1) EXPECT_TRUE(bits_equal(&dist.aux_loss, &ref.aux_loss, 1)) << "aux loss";
  else EXPECT_NEAR(dist.aux_loss, ref.aux_loss, 1e-6 * (1.0 + std::fabs(ref.aux_loss)));  // plain sums

  // The volume model: every (token, slot) row whose expert lives on another rank is sent there in
  // the dispatch and back in the combine, D floats each way.
  const int n = g.size();
  for (int l = 0; l < L; ++l) {
    int64_t crossing = 0, received = 0, bytes = 0;
    for (int s = 0; s < n; ++s) {
      const SeqBlock b = dp_block(B, n, s);
      for (int64_t row = b.begin * T; row < b.end * T; ++row)
        for (int k = 0; k < K; ++k) {
          const int e = ref.topk_ids[(static_cast<size_t>(l) * B * T + row) * K + k];
          crossing += e / (E / n) != s;
        }
    }
    for (int s = 0; s < n; ++s) {
      received += dist.tokens_received[static_cast<size_t>(l) * n + s];
      bytes += dist.a2a_bytes[static_cast<size_t>(l) * n + s];
    }
    EXPECT_EQ(received, static_cast<int64_t>(B) * T * K) << "layer " << l;
    EXPECT_EQ(bytes, 2 * crossing * D * static_cast<int64_t>(sizeof(float))) << "layer " << l;
  }

  // Gradients: dense tensors on every rank, expert tensors in the owner's slots only.
  const ExpertRange own = m.dist.expert_range();
  for (const ParamInfo& info : m.ref.grads().infos()) {
    const float* gr = m.ref.grads().data().data() + info.offset;
    const float* gd = m.dist.grads().data().data() + info.offset;
    if (test::is_expert_param(info.name)) {
      const int64_t per = info.size / E;
      EXPECT_TRUE(bits_equal(gd + per * own.begin, gr + per * own.begin, static_cast<size_t>(per * own.size())))
          << info.name << " (owned experts)";
      for (int64_t j = 0; j < info.size; ++j) {
        if (j < per * own.begin || j >= per * own.end) {
          EXPECT_EQ(gd[j], 0.0f) << info.name << "[" << j << "] not owned";
        }
      }
    } else if (chunks > 0 || g.size() == 1) {
      EXPECT_TRUE(bits_equal(gd, gr, static_cast<size_t>(info.size))) << info.name;
    } else {  // plain mode: the same sums in another order — FP32 rounding of sums of ~B·T terms
      double mx = 0.0;
      for (int64_t j = 0; j < info.size; ++j) mx = std::max(mx, std::fabs(static_cast<double>(gr[j])));
      for (int64_t j = 0; j < info.size; ++j) EXPECT_NEAR(gd[j], gr[j], 1e-5 * mx + 1e-9) << info.name << "[" << j << "]";
    }
  }
}

TEST(EpModel, ForwardAndBackwardBitIdenticalToOneRank) {
  for (const Case& c : cases()) check_case(c, 8, 4);
}

TEST(EpModel, UnevenBlocksBitIdenticalToOneRank) {  // 6 sequences: blocks of 1 and 2 on 4 ranks
  for (const Case& c : cases()) check_case(c, 6, 4);
}

TEST(EpModel, PlainModeForwardExactGradientsClose) {
  for (const Case& c : cases()) check_case(c, 8, 0);
}

TEST(EpModel, OnTheTestDeviceBitIdenticalToOneRank) {
  for (const Case& c : cases()) check_case(c, 8, 4, true);
}

TEST(EpModel, GenerationBitIdenticalToOneRank) {
  const RankGrid& g = test::mpi_grid();
  for (const NumericsProfile& p : {test::builtin_profile("fp32-ref"), test::fp8_deterministic()}) {
    SCOPED_TRACE(p.name);
    const ModelConfig cfg = test::ep_config();
    const int B = 5, P = 4, L = cfg.n_layers, K = cfg.top_k, V = cfg.vocab_size;
    Pair m(cfg, 0, 31);
    const auto prompt = test::seeded_tokens(B * P, V, 8);
    const SeqBlock blk = dp_block(B, g.size(), g.rank());
    const int Bm = static_cast<int>(blk.size());
    GenerationState *sr = nullptr, *sd = nullptr;
    m.ref.generation_begin(&sr, B, P + 3, &p);
    m.dist.generation_begin(&sd, Bm, P + 3, &p);
    std::vector<float> lr(static_cast<size_t>(B) * V), ld(static_cast<size_t>(Bm) * V);
    std::vector<int32_t> ir(static_cast<size_t>(L) * B * P * K), id(static_cast<size_t>(L) * Bm * P * K);
    m.ref.generation_prefill(sr, lr.data(), ir.data(), nullptr, prompt.data(), P);
    m.dist.generation_prefill(sd, ld.data(), id.data(), nullptr, prompt.data() + blk.begin * P, P);
    EXPECT_TRUE(bits_equal(ld.data(), lr.data() + blk.begin * V, ld.size())) << "prefill logits";
    EXPECT_TRUE(bits_equal(id, layer_rows(ir, L, B * P, K, static_cast<int>(blk.begin) * P, static_cast<int>(blk.end) * P)))
        << "prefill routing";
    for (int step = 0; step < 3; ++step) {
      std::vector<int32_t> next(static_cast<size_t>(B));
      for (int b = 0; b < B; ++b)  // greedy
        next[b] = static_cast<int32_t>(std::max_element(lr.begin() + b * V, lr.begin() + (b + 1) * V) - (lr.begin() + b * V));
      std::vector<int32_t> sr_ids(static_cast<size_t>(L) * B * K), sd_ids(static_cast<size_t>(L) * Bm * K);
      m.ref.generation_step(sr, lr.data(), sr_ids.data(), nullptr, next.data());
      m.dist.generation_step(sd, ld.data(), sd_ids.data(), nullptr, next.data() + blk.begin);
      EXPECT_TRUE(bits_equal(ld.data(), lr.data() + blk.begin * V, ld.size())) << "decode step " << step;
      EXPECT_TRUE(bits_equal(sd_ids, layer_rows(sr_ids, L, B, K, static_cast<int>(blk.begin), static_cast<int>(blk.end))))
          << "decode routing " << step;
    }
    m.ref.generation_end(sr);
    m.dist.generation_end(sd);
  }
}

// The dispatcher alone: per-(source rank, expert) counts exchanged first, then rows; regrouped
// rows are every token's row for this rank's experts in global (token, slot) order; the way back
// returns every row to its token's rank.
TEST(EpModel, DispatcherCountsAndRowsMatchTheGlobalOrder) {
  const RankGrid& g = test::mpi_grid();
  const int n = g.size(), rank = g.rank(), E = 8, K = 3, D = 5, Ntot = 37;
  const auto ids = test::seeded_ids(Ntot, E, K, 9);
  const SeqBlock blk = dp_block(Ntot, n, rank);  // tokens as "sequences" of one row
  const int N = static_cast<int>(blk.size());
  std::vector<float> h(static_cast<size_t>(N) * D);
  for (int t = 0; t < N; ++t)
    for (int d = 0; d < D; ++d) h[static_cast<size_t>(t) * D + d] = static_cast<float>((blk.begin + t) * 10 + d);
  const CollectiveDispatcher disp(&g.ep());
  DispatchPlan plan;
  std::vector<float> xe(static_cast<size_t>(N) * K * D);
  disp.dispatch(xe.data(), &plan, h.data(), ids.data() + blk.begin * K, N, K, E, D, cpu_backend());
  const int J = E / n, e0 = J * rank;
  EXPECT_EQ(plan.e0, e0);
  EXPECT_EQ(plan.E_local, J);
  // counts: rows from rank s for local expert j, from the global ids
  for (int s = 0; s < n; ++s) {
    const SeqBlock b = dp_block(Ntot, n, s);
    for (int j = 0; j < J; ++j) {
      int want = 0;
      for (int64_t t = b.begin; t < b.end; ++t)
        for (int k = 0; k < K; ++k) want += ids[static_cast<size_t>(t) * K + k] == e0 + j;
      EXPECT_EQ(plan.recv_expert[static_cast<size_t>(s) * J + j], want) << "from rank " << s << " expert " << e0 + j;
    }
  }
  std::vector<float> expect;
  for (int j = 0; j < J; ++j)
    for (int t = 0; t < Ntot; ++t)
      for (int k = 0; k < K; ++k)
        if (ids[static_cast<size_t>(t) * K + k] == e0 + j)
          for (int d = 0; d < D; ++d) expect.push_back(static_cast<float>(t * 10 + d));
  std::vector<float> xg(static_cast<size_t>(plan.received()) * D), back(xe.size());
  if (n > 1) {
    disp.to_experts(xg.data(), xe.data(), plan, D);
    disp.from_experts(back.data(), xg.data(), plan, D);
  } else {  // a group of one does not communicate: the permuted buffer is the experts' buffer
    xg = xe;
    back = xe;
  }
  EXPECT_TRUE(bits_equal(xg, expect)) << "regrouped rows";
  EXPECT_TRUE(bits_equal(back, xe)) << "round trip";
}

// An AdamW step on owned experts + the checkpoint gather: the assembled parameters and moments
// equal the single-process step, and so does the global gradient norm.
TEST(EpModel, OptimizerStepAndCheckpointGatherMatchOneRank) {
  const RankGrid& g = test::mpi_grid();
  ModelConfig cfg = test::ep_config();
  cfg.load_balance = LoadBalance::aux_loss;
  const int B = 8, T = 6;
  Pair m(cfg, 4, 41);
  const auto tok = test::seeded_tokens(B * T, cfg.vocab_size, 12);
  const auto w = test::seeded_vector(B * (T - 1), 13);
  OptimConfig oc;
  oc.lr = 1e-2f;
  oc.weight_decay = 0.1f;
  oc.grad_clip = 0.05f;  // small enough to clip: the norm must be the global one
  AdamW ar(oc, m.ref.params()), ad(oc, m.dist.params());
  ar.set_parallel(cfg.n_experts, m.ref.expert_range(), nullptr, true);
  ad.set_parallel(cfg.n_experts, m.dist.expert_range(), m.dist.parallel().ep, true);
  const SeqBlock blk = dp_block(B, g.size(), g.rank());
  for (int step = 0; step < 2; ++step) {
    ForwardRequest req;
    req.tokens = tok.data(); req.B = B; req.T = T; req.save_for_backward = true;
    ForwardResult r;
    m.ref.forward(&r, req);
    m.ref.grads().zero();
    m.ref.backward(w.data());
    req.tokens = tok.data() + blk.begin * T; req.B = static_cast<int>(blk.size()); req.B_total = B;
    m.dist.forward(&r, req);
    m.dist.grads().zero();
    m.dist.backward(w.data() + blk.begin * (T - 1));
    const double nr = ar.step(&m.ref.params(), &m.ref.grads(), oc.lr, step);
    const double nd = ad.step(&m.dist.params(), &m.dist.grads(), oc.lr, step);
    EXPECT_TRUE(bits_equal(&nd, &nr, 1)) << "gradient norm, step " << step;
    EXPECT_GT(nr, oc.grad_clip);
    m.ref.invalidate_packed_weights();
    m.dist.invalidate_packed_weights();
  }
  std::vector<float> p = m.dist.params().data(), mm = ad.m(), vv = ad.v();
  gather_experts(&p, m.dist.params(), cfg.n_experts, g.ep());
  gather_experts(&mm, m.dist.params(), cfg.n_experts, g.ep());
  gather_experts(&vv, m.dist.params(), cfg.n_experts, g.ep());
  EXPECT_TRUE(bits_equal(p, m.ref.params().data())) << "parameters";
  EXPECT_TRUE(bits_equal(mm, ar.m())) << "first moments";
  EXPECT_TRUE(bits_equal(vv, ar.v())) << "second moments";
}

}  // namespace
}  // namespace moerl
