// test_ops_threads.cpp — the fast kernels' results do not depend on the number of TBB threads:
// 1 thread and 2 threads give the same bits for every forward kernel (under a noisy, batch-variant
// ctx where there is one) and for the backwards (which have no cross-thread reductions either).
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <functional>
#include <vector>

#include "kernels/cpu/ops.h"
#include "test_ops_util.h"

namespace moerl {
namespace {

using test_ops::normals;

// Runs f under 1 and under 2 threads and expects the same outputs.
void expect_thread_independent(const std::function<std::vector<float>()>& f, const char* what) {
  std::vector<float> one, two;
  {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 1);
    one = f();
  }
  {
    tbb::global_control gc(tbb::global_control::max_allowed_parallelism, 2);
    two = f();
  }
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(test_ops::bit_diffs(one, two), 0u) << what;
}

ReduceCtx noisy_ctx() {
  ReduceCtx ctx;
  ctx.order.kind = OrderKind::split_k;
  ctx.order.split = 3;
  ctx.batch_invariant = false;
  ctx.key.seed = 17;
  return ctx;
}

TEST(OpsThreads, ForwardAndBackwardKernelsAreThreadCountIndependent) {
  const int N = 300, D = 130, B = 6, T = 33, H = 3, Dh = 32, E = 63, K = 3, V = 64;
  auto x = normals(static_cast<size_t>(N) * D, 1, N, D);
  auto w = normals(D, 2, D);
  auto dy = normals(x.size(), 3, N, D);
  expect_thread_independent([&] {
    std::vector<float> out(x.size()), rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f, noisy_ctx());
    std::vector<float> dx(x.size(), 0.0f), dw(D, 0.0f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);
    out.insert(out.end(), rstd.begin(), rstd.end());
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), dw.begin(), dw.end());
    return out;
  }, "rmsnorm");

  const size_t nq = static_cast<size_t>(B) * T * H * Dh;
  auto q = normals(nq, 4, 0, 0, 2.0f), k = normals(nq, 5), v = normals(nq, 6), go = normals(nq, 7);
  expect_thread_independent([&] {
    std::vector<float> out(nq), att(static_cast<size_t>(B) * H * T * T);
    cpu::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, H, Dh,
                           noisy_ctx());
    std::vector<float> dq(nq, 0.0f), dk(nq, 0.0f), dv(nq, 0.0f);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), go.data(), att.data(), q.data(),
                            k.data(), v.data(), B, T, H, Dh);
    std::vector<int32_t> len(B);
    for (int b = 0; b < B; ++b) len[b] = 1 + (b * 7) % T;
    std::vector<float> dec(static_cast<size_t>(B) * H * Dh);
    const auto kT = test_ops::keys_transposed(k, B, T, H * Dh);
    cpu::attention_decode(dec.data(), q.data(), kT.data(), v.data(), len.data(), B, T, H, Dh,
                          noisy_ctx());
    for (auto* part : {&att, &dq, &dk, &dv, &dec}) out.insert(out.end(), part->begin(), part->end());
    return out;
  }, "attention");

  auto scores = normals(static_cast<size_t>(N) * E, 8);
  for (float& s : scores) s = std::round(s * 8.0f);  // ties for the random rule
  expect_thread_independent([&] {
    std::vector<int32_t> ids(static_cast<size_t>(N) * K);
    std::vector<float> vals(ids.size());
    NoiseKey key;
    key.seed = 3;
    cpu::topk_forward(ids.data(), vals.data(), scores.data(), N, E, K, TieBreak::random, key);
    std::vector<float> out(vals);
    for (int32_t id : ids) out.push_back(static_cast<float>(id));
    return out;
  }, "topk");

  auto logits = normals(static_cast<size_t>(N) * V, 9, 0, 0, 3.0f);
  std::vector<int32_t> tgt(N);
  for (int n = 0; n < N; ++n) tgt[n] = n % 5 == 0 ? -1 : (n * 13) % V;
  expect_thread_independent([&] {
    std::vector<float> out(logits.size()), lp(N), dl(logits.size(), 0.0f), ls(logits.size());
    cpu::softmax_forward(out.data(), logits.data(), N, V);
    cpu::log_softmax_forward(ls.data(), logits.data(), N, V);
    cpu::logprob_forward(lp.data(), logits.data(), tgt.data(), N, V);
    cpu::logprob_backward(dl.data(), lp.data(), logits.data(), tgt.data(), N, V);
    std::vector<float> sw(logits.size());
    cpu::swiglu_forward(sw.data(), logits.data(), out.data(), N, V);
    for (auto* part : {&ls, &lp, &dl, &sw}) out.insert(out.end(), part->begin(), part->end());
    return out;
  }, "softmax/logprob/swiglu");

  std::vector<int32_t> tok(N), pos(N);
  for (int n = 0; n < N; ++n) {
    tok[n] = (n * 7) % 11;
    pos[n] = n % 48;
  }
  expect_thread_independent([&] {
    std::vector<float> table = normals(11 * D, 10), out(x.size());
    cpu::embedding_forward(out.data(), tok.data(), table.data(), N, D);
    cpu::embedding_backward(table.data(), dy.data(), tok.data(), N, D);
    std::vector<float> r = normals(static_cast<size_t>(N) * 4 * 32, 11);
    cpu::rope_forward(r.data(), pos.data(), N, 4, 32, 10000.0f);
    for (auto* part : {&table, &r}) out.insert(out.end(), part->begin(), part->end());
    return out;
  }, "embedding/rope");
}

}  // namespace
}  // namespace moerl
