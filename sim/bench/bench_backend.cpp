// bench_backend.cpp — see bench_backend.h.
#include "sim/bench/bench_backend.h"

#include <stdexcept>
#include <string>

#include "models/sites.h"

namespace moerl {

namespace {
// The EOS logit's edit: far enough from any logit of a model with finite weights that exp of the
// difference is 0 in double (exp(−10⁴) underflows), close enough to stay finite in every sum.
constexpr float kForce = 1e4f;
}  // namespace

void BenchBackend::add_attention(Clock::time_point t0) const {
  attention_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

void BenchBackend::rollout_begin(int P, int eos, const int32_t* targets, int n) {
  if (targets && eos < 0) throw std::invalid_argument("BenchBackend: targets need an eos id >= 0");
  in_rollout_ = true;
  P_ = P;
  eos_ = eos;
  targets_ = targets;
  n_ = n;
  marks_ = 0;
  prefill_s_ = 0.0;
  step_s_.clear();
  step_att_s_.clear();
  begin_ = Clock::now();
  att_at_mark_ = attention_ns_.load();
}

void BenchBackend::rollout_end() {
  in_rollout_ = false;
  targets_ = nullptr;
}

void BenchBackend::linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                                  const LinearNumerics& nm) const {
  inner_.linear_forward(out, inp, w, M, nm);
  if (!in_rollout_ || nm.reduce.key.site != static_cast<uint32_t>(Site::lm_head)) return;
  // Response position whose logits these are: the prefill (call 0) scores position 0, the decode
  // step at position P + r − 1 (call = P + r − 1) position r.
  const int64_t call = static_cast<int64_t>(nm.reduce.key.call);
  const int64_t r = call == 0 ? 0 : call - P_ + 1;
  if (targets_) {
    if (M != n_)
      throw std::logic_error("BenchBackend: LM head over " + std::to_string(M) + " rows in a rollout of " +
                             std::to_string(n_) + " sequences");
    const int V = w.N;
    for (int b = 0; b < M; ++b) {
      const int64_t at = static_cast<int64_t>(targets_[b]) - 1;  // EOS's response position
      if (r < at) out[static_cast<size_t>(b) * V + eos_] = -kForce;
      else if (r == at) out[static_cast<size_t>(b) * V + eos_] = kForce;
    }
  }
  const Clock::time_point now = Clock::now();
  const int64_t att = attention_ns_.load();
  if (marks_ == 0) {
    prefill_s_ = std::chrono::duration<double>(now - begin_).count();
  } else {
    step_s_.push_back(std::chrono::duration<double>(now - last_mark_).count());
    step_att_s_.push_back(1e-9 * static_cast<double>(att - att_at_mark_));
  }
  ++marks_;
  last_mark_ = now;
  att_at_mark_ = att;
}

void BenchBackend::attention_forward(float* out, float* att, const float* q, const float* k,
                                     const float* v, int B, int T, int H, int Dh,
                                     const ReduceCtx& ctx) const {
  const Clock::time_point t0 = Clock::now();
  inner_.attention_forward(out, att, q, k, v, B, T, H, Dh, ctx);
  add_attention(t0);
}

void BenchBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                      const float* att, const float* q, const float* k,
                                      const float* v, int B, int T, int H, int Dh) const {
  const Clock::time_point t0 = Clock::now();
  inner_.attention_backward(dq, dk, dv, dout, att, q, k, v, B, T, H, Dh);
  add_attention(t0);
}

void BenchBackend::attention_decode(float* out, const float* q, const float* kcache,
                                    const float* vcache, const int32_t* len, int B, int Tmax,
                                    int H, int Dh, const ReduceCtx& ctx) const {
  const Clock::time_point t0 = Clock::now();
  inner_.attention_decode(out, q, kcache, vcache, len, B, Tmax, H, Dh, ctx);
  add_attention(t0);
}

}  // namespace moerl
