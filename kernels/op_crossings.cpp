// op_crossings.cpp — see op_crossings.h. Shape letters as kernels/ref/ops.h.
#include "kernels/op_crossings.h"

#include <algorithm>
#include <set>

namespace moerl {

namespace {
constexpr size_t f4 = sizeof(float);
size_t n_of(int64_t a) { return a > 0 ? static_cast<size_t>(a) : 0; }
size_t n_of(int64_t a, int64_t b) { return n_of(a) * n_of(b); }
}  // namespace

void OpCrossings::in(const void* p, size_t bytes, CrossKind k) const {
  if (p && bytes && !be_.is_device_pointer(p)) log_.add(CrossDir::up, k, static_cast<int64_t>(bytes));
}
void OpCrossings::out(const void* p, size_t bytes, CrossKind k) const {
  if (p && bytes && !be_.is_device_pointer(p)) log_.add(CrossDir::down, k, static_cast<int64_t>(bytes));
}
void OpCrossings::inout(const void* p, size_t bytes, CrossKind k) const {
  in(p, bytes, k);
  out(p, bytes, k);
}

using K = CrossKind;

void OpCrossings::embedding_forward(float* out, const int32_t* tokens, const float* table, int N, int D) const {
  if (N <= 0 || D <= 0) return;
  in(tokens, n_of(N) * 4, K::indices);
  if (!be_.is_device_pointer(tokens) && !be_.is_device_pointer(table)) {  // rows up to the largest id
    const int32_t hi = *std::max_element(tokens, tokens + N);
    in(table, n_of(int64_t{hi} + 1, D) * f4, K::weights);
  }
  this->out(out, n_of(N, D) * f4, K::activations);
}

void OpCrossings::embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int N, int D) const {
  if (N <= 0 || D <= 0) return;
  in(dout, n_of(N, D) * f4, K::activations);
  in(tokens, n_of(N) * 4, K::indices);
  if (!be_.is_device_pointer(tokens) && !be_.is_device_pointer(dtable)) {  // the distinct rows, += on the device
    const std::set<int32_t> rows(tokens, tokens + N);
    inout(dtable, rows.size() * n_of(D) * f4, K::grads);
  }
}

void OpCrossings::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int D,
                                  float, const ReduceCtx&) const {
  in(inp, n_of(N, D) * f4, K::activations);
  in(weight, n_of(D) * f4, K::weights);
  this->out(out, n_of(N, D) * f4, K::activations);
  this->out(rstd, n_of(N) * f4, K::activations);
}

void OpCrossings::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                   const float* weight, const float* rstd, int N, int D) const {
  in(dout, n_of(N, D) * f4, K::activations);
  in(inp, n_of(N, D) * f4, K::activations);
  in(rstd, n_of(N) * f4, K::activations);
  if (dinp) {
    in(weight, n_of(D) * f4, K::weights);
    inout(dinp, n_of(N, D) * f4, K::activations);
  }
  inout(dweight, n_of(D) * f4, K::grads);
}

void OpCrossings::rope_forward(float* x, const int32_t* pos, int N, int H, int Dh, float) const {
  inout(x, n_of(N, int64_t{H} * Dh) * f4, K::activations);
  in(pos, n_of(N) * 4, K::indices);
}

void OpCrossings::rope_backward(float* dx, const int32_t* pos, int N, int H, int Dh, float) const {
  inout(dx, n_of(N, int64_t{H} * Dh) * f4, K::activations);
  in(pos, n_of(N) * 4, K::indices);
}

void OpCrossings::attention_forward(float* out, float* att, const float* q, const float* k, const float* v, int B,
                                    int T, int H, int Dh, const ReduceCtx&) const {
  const size_t rows = n_of(int64_t{B} * T, int64_t{H} * Dh) * f4;
  in(q, rows, K::activations);
  in(k, rows, K::activations);
  in(v, rows, K::activations);
  this->out(out, rows, K::activations);
  this->out(att, n_of(int64_t{B} * H, int64_t{T} * T) * f4, K::activations);
}

void OpCrossings::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                                     const float* q, const float* k, const float* v, int B, int T, int H,
                                     int Dh) const {
  const size_t rows = n_of(int64_t{B} * T, int64_t{H} * Dh) * f4;
  in(dout, rows, K::activations);
  in(att, n_of(int64_t{B} * H, int64_t{T} * T) * f4, K::activations);
  in(q, rows, K::activations);
  in(k, rows, K::activations);
  in(v, rows, K::activations);
  inout(dq, rows, K::activations);
  inout(dk, rows, K::activations);
  inout(dv, rows, K::activations);
}

void OpCrossings::attention_decode(float* out, const float* q, const float* kcache, const float* vcache,
                                   const int32_t* len, int B, int /*Tmax*/, int H, int Dh, const ReduceCtx&) const {
  if (B <= 0) return;
  const size_t D = n_of(int64_t{H} * Dh);
  in(q, n_of(B) * D * f4, K::activations);
  in(len, n_of(B) * 4, K::indices);
  if (!be_.is_device_pointer(len)) {  // each sequence's cache up to its length
    size_t held = 0;
    for (int b = 0; b < B; ++b) held += n_of(len[b]);
    in(kcache, held * D * f4, K::kv_cache);
    in(vcache, held * D * f4, K::kv_cache);
  }
  this->out(out, n_of(B) * D * f4, K::activations);
}

void OpCrossings::kv_cache_keep(float* kcache, float* vcache, const int32_t* from, int n, int D, int Tc,
                                int held) const {
  if (n <= 0 || held <= 0) return;
  in(from, n_of(n) * 4, K::indices);
  if (be_.is_device_pointer(kcache) && be_.is_device_pointer(vcache)) return;  // the resident cache
  if (be_.is_device_pointer(from)) return;  // not read here; a host cache with device indices is not an op path
  const int64_t rows = std::max<int64_t>(n, 1 + *std::max_element(from, from + n));
  const size_t cache = n_of(rows * D, Tc) * f4;  // the rows up to the largest source, up and back
  inout(kcache, cache, K::kv_cache);
  inout(vcache, cache, K::kv_cache);
}

void OpCrossings::kv_cache_write(float* kcache, float* vcache, const float* k, const float* v, int B, int T,
                                 int D, int /*Tc*/, int /*t0*/) const {
  if (B <= 0 || T <= 0 || D <= 0) return;
  const size_t rows = n_of(int64_t{B} * T, D) * f4;
  if (be_.is_device_pointer(kcache) && be_.is_device_pointer(vcache)) {  // the resident cache
    in(k, rows, K::activations);
    in(v, rows, K::activations);
    return;
  }
  // A host cache is written on the host (the CUDA backend's copy path): resident k, v come down.
  for (const float* x : {k, v})
    if (be_.is_device_pointer(x)) log_.add(CrossDir::down, K::activations, static_cast<int64_t>(rows));
}

void OpCrossings::kv_cache_append(float* kcache, float* vcache, const float* k, const float* v, const int32_t* len,
                                  int B, int D, int Tc) const {
  if (B <= 0 || D <= 0) return;
  in(len, n_of(B) * 4, K::indices);
  if (be_.is_device_pointer(kcache) && be_.is_device_pointer(vcache)) {  // the resident cache
    in(k, n_of(B, D) * f4, K::activations);
    in(v, n_of(B, D) * f4, K::activations);
    return;
  }
  kv_cache_write(kcache, vcache, k, v, B, 1, D, Tc, 0);  // a host cache: as a write of B rows
}

void OpCrossings::round_format(float* x, int64_t n, Format f) const {
  if (f != Format::fp32) inout(x, n_of(n) * f4, K::activations);
}

void OpCrossings::add_round(float* out, const float* a, const float* b, int64_t n, Format) const {
  in(a, n_of(n) * f4, K::activations);
  in(b, n_of(n) * f4, K::activations);
  this->out(out, n_of(n) * f4, K::activations);
}

void OpCrossings::divide_scalar(float* out, const float* x, int64_t n, float) const {
  in(x, n_of(n) * f4, K::activations);
  this->out(out, n_of(n) * f4, K::activations);
}

void OpCrossings::softmax_forward(float* out, const float* x, int N, int C) const {
  in(x, n_of(N, C) * f4, K::activations);
  this->out(out, n_of(N, C) * f4, K::activations);
}

void OpCrossings::log_softmax_forward(float* out, const float* x, int N, int C) const {
  in(x, n_of(N, C) * f4, K::activations);
  this->out(out, n_of(N, C) * f4, K::activations);
}

void OpCrossings::softmax_backward(float* dx, const float* dy, const float* y, int N, int C) const {
  in(dy, n_of(N, C) * f4, K::activations);
  in(y, n_of(N, C) * f4, K::activations);
  inout(dx, n_of(N, C) * f4, K::activations);
}

void OpCrossings::swiglu_forward(float* out, const float* gate, const float* up, int N, int F) const {
  in(gate, n_of(N, F) * f4, K::activations);
  in(up, n_of(N, F) * f4, K::activations);
  this->out(out, n_of(N, F) * f4, K::activations);
}

void OpCrossings::swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  int N, int F) const {
  in(dout, n_of(N, F) * f4, K::activations);
  in(gate, n_of(N, F) * f4, K::activations);
  in(up, n_of(N, F) * f4, K::activations);
  inout(dgate, n_of(N, F) * f4, K::activations);
  inout(dup, n_of(N, F) * f4, K::activations);
}

void OpCrossings::topk_forward(int32_t* ids, float* vals, const float* scores, int N, int E, int K_, TieBreak,
                               const NoiseKey&) const {
  in(scores, n_of(N, E) * f4, K::activations);
  this->out(ids, n_of(N, K_) * 4, K::indices);
  this->out(vals, n_of(N, K_) * f4, K::activations);
}

void OpCrossings::sigmoid_forward(float* out, const float* x, int64_t n) const {
  in(x, n_of(n) * f4, K::activations);
  this->out(out, n_of(n) * f4, K::activations);
}

void OpCrossings::add_bias_rows(float* out, const float* x, const float* bias, int N, int C) const {
  in(x, n_of(N, C) * f4, K::activations);
  in(bias, n_of(C) * f4, K::weights);  // the selection bias: state of the model, not a parameter
  this->out(out, n_of(N, C) * f4, K::activations);
}

void OpCrossings::router_gate_forward(float* gate, float* logp, const float* z, const float* scores,
                                      const int32_t* ids, const int32_t* at, int N, int E, int K_, bool, bool) const {
  in(z, n_of(N, E) * f4, K::activations);
  in(scores, n_of(N, E) * f4, K::activations);
  in(ids, n_of(N, K_) * 4, K::indices);
  in(at, n_of(N, K_) * 4, K::indices);
  this->out(gate, n_of(N, K_) * f4, K::activations);
  this->out(logp, n_of(N, K_) * f4, K::per_token);
}

void OpCrossings::router_gate_backward(float* dz, const float* scores, const int32_t* ids, const float* gate,
                                       const float* dgate, int N, int E, int K_, bool, bool) const {
  in(scores, n_of(N, E) * f4, K::activations);
  in(ids, n_of(N, K_) * 4, K::indices);
  in(gate, n_of(N, K_) * f4, K::activations);
  in(dgate, n_of(N, K_) * f4, K::activations);
  this->out(dz, n_of(N, E) * f4, K::activations);
}

void OpCrossings::logprob_forward(float* logp, const float* logits, const int32_t* targets, int N, int V) const {
  in(logits, n_of(N, V) * f4, K::activations);
  in(targets, n_of(N) * 4, K::indices);
  this->out(logp, n_of(N) * f4, K::per_token);
}

void OpCrossings::logprob_backward(float* dlogits, const float* dlogp, const float* logits, const int32_t* targets,
                                   int N, int V) const {
  in(dlogp, n_of(N) * f4, K::per_token);
  in(logits, n_of(N, V) * f4, K::activations);
  in(targets, n_of(N) * 4, K::indices);
  inout(dlogits, n_of(N, V) * f4, K::activations);
}

void OpCrossings::sample_rows(int32_t* tokens, float* logp, float* entropy, const float* logits, const float* lp,
                              const double* uniform, int N, int V, float temperature, float) const {
  if (N <= 0 || V <= 0) return;
  in(logits, n_of(N, V) * f4, K::activations);
  in(lp, n_of(N, V) * f4, K::activations);
  if (temperature != 0.0f) in(uniform, n_of(N) * sizeof(double), K::per_token);
  this->out(tokens, n_of(N) * 4, K::indices);
  this->out(logp, n_of(N) * f4, K::per_token);
  this->out(entropy, n_of(N) * f4, K::per_token);
}

void OpCrossings::scatter_rows(float* dst, const float* src, const int32_t* dst_row, int N, int C) const {
  if (N <= 0 || C <= 0) return;
  in(src, n_of(N, C) * f4, K::activations);
  in(dst_row, n_of(N) * 4, K::indices);
  this->out(dst, n_of(N, C) * f4, K::activations);
}

void OpCrossings::kl_rows(double* kl, double* log_ratio, const float* a, const float* b, const int32_t* a_row,
                          const int32_t* b_row, const int32_t* targets, int N, int V) const {
  if (N <= 0 || V <= 0) return;
  in(a, n_of(N, V) * f4, K::activations);  // the rows read
  in(b, n_of(N, V) * f4, K::activations);
  in(a_row, n_of(N) * 4, K::indices);
  in(b_row, n_of(N) * 4, K::indices);
  in(targets, n_of(N) * 4, K::indices);
  this->out(kl, n_of(N) * sizeof(double), K::per_token);
  this->out(log_ratio, n_of(N) * sizeof(double), K::per_token);
}

void OpCrossings::logit_stats_rows(double* stdev, double* margin, const float* logits, const int32_t* rows, int N,
                                   int V, float) const {
  if (N <= 0 || V <= 0) return;
  in(logits, n_of(N, V) * f4, K::activations);  // the rows read
  in(rows, n_of(N) * 4, K::indices);
  this->out(stdev, n_of(N) * sizeof(double), K::per_token);
  this->out(margin, n_of(N) * sizeof(double), K::per_token);
}

void OpCrossings::sum_squares(double* sq, const float* x, const int64_t* begin, const int64_t* end, int n_ranges,
                              bool per_range) const {
  if (n_ranges <= 0) return;
  in(begin, n_of(n_ranges) * sizeof(int64_t), K::indices);
  in(end, n_of(n_ranges) * sizeof(int64_t), K::indices);
  if (!be_.is_device_pointer(x) && !be_.is_device_pointer(begin) && !be_.is_device_pointer(end)) {
    int64_t n = 0;  // the elements read
    for (int r = 0; r < n_ranges; ++r) n += std::max<int64_t>(end[r] - begin[r], 0);
    in(x, n_of(n) * f4, K::grads);
  }
  this->out(sq, n_of(per_range ? n_ranges : 1) * sizeof(double), K::per_token);
}

void OpCrossings::policy_loss_rows(float* dlogp, double* totals, float* ratio, float* weight, float* term,
                                   const float* logp_new, const int32_t* new_row, const float* logp_old,
                                   const float* logp_rollout, const float* mask, const float* logp_ref,
                                   const int32_t* seq, const float* advantages, const float* gamma, const double* scale,
                                   int S, int R, const PolicyLossParams& p) const {
  if (S <= 0 || R <= 0) return;
  const size_t tokens = n_of(S, R) * f4;  // the rows read (of any array addressed by row)
  in(logp_new, tokens, K::per_token);
  in(logp_old, tokens, K::per_token);
  in(logp_rollout, tokens, K::per_token);
  in(mask, tokens, K::per_token);
  if (p.kl_coef > 0.0f) in(logp_ref, tokens, K::per_token);
  in(gamma, tokens, K::per_token);
  in(advantages, n_of(S) * f4, K::per_token);
  in(scale, n_of(S) * sizeof(double), K::per_token);
  in(new_row, n_of(S) * 4, K::indices);
  in(seq, n_of(S) * 4, K::indices);
  this->out(dlogp, tokens, K::per_token);
  this->out(ratio, tokens, K::per_token);
  this->out(weight, tokens, K::per_token);
  this->out(term, tokens, K::per_token);
  this->out(totals, kLossTotals * sizeof(double), K::per_token);
}

void OpCrossings::moe_plan(int32_t* row_token, int32_t* slot_row, const int32_t* ids, int N, int K_, int) const {
  if (N <= 0 || K_ <= 0) return;
  in(ids, n_of(N, K_) * 4, K::indices);
  this->out(row_token, n_of(N, K_) * 4, K::indices);
  this->out(slot_row, n_of(N, K_) * 4, K::indices);
}

void OpCrossings::moe_offsets(int32_t* offsets, const int32_t* ids, int N, int K_, int E) const {
  if (E < 0) return;
  in(ids, n_of(N, K_) * 4, K::indices);
  this->out(offsets, n_of(int64_t{E} + 1) * 4, K::indices);
}

void OpCrossings::moe_combine_order(int32_t* order, const int32_t* slot_order, int N, int K_,
                                    const ReduceCtx&) const {
  if (N <= 0 || K_ <= 0) return;
  in(slot_order, n_of(N, K_) * 4, K::indices);
  this->out(order, n_of(N, K_) * 4, K::indices);
}

void OpCrossings::moe_gather(float* xe, const float* h, const int32_t* row_token, int N, int rows, int D) const {
  if (rows <= 0 || D <= 0) return;
  in(h, n_of(N, D) * f4, K::activations);
  in(row_token, n_of(rows) * 4, K::indices);
  this->out(xe, n_of(rows, D) * f4, K::activations);
}

void OpCrossings::moe_combine(float* y, const float* ye, const float* gate, const float* extra,
                              const int32_t* slot_row, const int32_t* order, int N, int K_, int D) const {
  if (N <= 0 || D <= 0) return;
  in(ye, n_of(int64_t{N} * K_, D) * f4, K::activations);
  in(gate, n_of(N, K_) * f4, K::activations);
  in(extra, n_of(N, D) * f4, K::activations);
  in(slot_row, n_of(N, K_) * 4, K::indices);
  in(order, n_of(N, K_) * 4, K::indices);
  this->out(y, n_of(N, D) * f4, K::activations);
}

void OpCrossings::moe_combine_backward(float* dye, float* dgate, const float* dy, const float* ye, const float* gate,
                                       const int32_t* slot_row, int N, int K_, int D) const {
  if (N <= 0 || D <= 0) return;
  in(dy, n_of(N, D) * f4, K::activations);
  in(ye, n_of(int64_t{N} * K_, D) * f4, K::activations);
  in(gate, n_of(N, K_) * f4, K::activations);
  in(slot_row, n_of(N, K_) * 4, K::indices);
  this->out(dye, n_of(int64_t{N} * K_, D) * f4, K::activations);
  this->out(dgate, n_of(N, K_) * f4, K::activations);
}

void OpCrossings::moe_scatter_add(float* dh, const float* dxe, const int32_t* slot_row, int N, int K_, int D) const {
  if (N <= 0 || D <= 0) return;
  in(dxe, n_of(int64_t{N} * K_, D) * f4, K::activations);
  in(slot_row, n_of(N, K_) * 4, K::indices);
  inout(dh, n_of(N, D) * f4, K::activations);
}

void OpCrossings::adamw_update(float* w, float* m, float* v, const float* g, int64_t n, float, float, float, double,
                               double, float, float, float) const {
  inout(w, n_of(n) * f4, K::weights);
  inout(m, n_of(n) * f4, K::optimizer);
  inout(v, n_of(n) * f4, K::optimizer);
  in(g, n_of(n) * f4, K::grads);
}

void OpCrossings::linear_pack_weight(PackedWeight*, const float* weight, int N, int K_, const LinearNumerics&) const {
  in(weight, n_of(N, K_) * f4, K::weights);
}

void OpCrossings::linear_forward(float* out, const float* inp, const PackedWeight& w, int M,
                                 const LinearNumerics&) const {
  in(inp, n_of(M, w.K) * f4, K::activations);
  this->out(out, n_of(M, w.N) * f4, K::activations);
}

void OpCrossings::linear_forward_grouped(float* out, const float* inp, const PackedWeight* w, const int* offsets,
                                         int E, const LinearNumerics& nm) const {
  if (E <= 0) return;
  if (be_.is_device_pointer(offsets)) {  // where the ids are: a read first unless sized there
    if (!grouped_sized_on_device(nm, w[0].K)) log_.add(CrossDir::down, K::indices, (int64_t{E} + 1) * 4);
    return;
  }
  in(offsets, n_of(int64_t{E} + 1) * 4, K::indices);
  for (int e = 0; e < E; ++e) {  // each expert's rows (the experts of other ranks have none)
    const int rows = offsets[e + 1] - offsets[e];
    if (rows <= 0) continue;
    in(inp, n_of(rows, w[e].K) * f4, K::activations);
    this->out(out, n_of(rows, w[e].N) * f4, K::activations);
  }
}

// What its five calls cross (the CUDA backend's path where the experts are not sized on the
// device; sized there, every operand is resident and nothing crosses).
void OpCrossings::linear_swiglu_grouped(float* a, float* g, float* u, const float* inp, const PackedWeight* w_gate,
                                        const PackedWeight* w_up, const int* offsets, int E, int rows,
                                        const LinearNumerics& nm_gate, const LinearNumerics& nm_up,
                                        Format act) const {
  if (E <= 0 || rows <= 0) return;
  linear_forward_grouped(g, inp, w_gate, offsets, E, nm_gate);
  linear_forward_grouped(u, inp, w_up, offsets, E, nm_up);
  const int F = w_gate[0].N;
  const int64_t n = static_cast<int64_t>(rows) * F;
  round_format(g, n, act);
  round_format(u, n, act);
  swiglu_forward(a, g, u, rows, F);
  round_format(a, n, act);
}

// What its calls cross: the down projection's backward (its da where dg lies) and the SwiGLU's.
void OpCrossings::linear_backward_swiglu_grouped(float* dg, float* du, float* dw_down, const float* dy,
                                                 const float* a, const float* g, const float* u, const float* w_down,
                                                 const int* offsets, int E, int rows, int D, int F) const {
  if (E <= 0 || rows <= 0 || F <= 0) return;
  linear_backward_grouped(dg, dw_down, dy, a, w_down, offsets, E, D, F);
  swiglu_backward(dg, du, dg, g, u, rows, F);
}

void OpCrossings::linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                  const float* weight, int M, int N, int K_) const {
  in(dout, n_of(M, N) * f4, K::activations);
  if (dinp) {
    in(weight, n_of(N, K_) * f4, K::weights);
    inout(dinp, n_of(M, K_) * f4, K::activations);
  }
  if (dweight) {
    in(inp, n_of(M, K_) * f4, K::activations);
    inout(dweight, n_of(N, K_) * f4, K::grads);
  }
}

void OpCrossings::linear_backward_grouped(float* dinp, float* dweight, const float* dout, const float* inp,
                                          const float* weight, const int* offsets, int E, int N, int K_) const {
  if (E <= 0 || be_.is_device_pointer(offsets)) return;
  in(offsets, n_of(int64_t{E} + 1) * 4, K::indices);
  const int rows = offsets[E] - offsets[0];
  in(dout, n_of(rows, N) * f4, K::activations);
  if (dinp) {
    in(weight, n_of(int64_t{E} * N, K_) * f4, K::weights);
    inout(dinp, n_of(rows, K_) * f4, K::activations);
  }
  if (dweight) {
    in(inp, n_of(rows, K_) * f4, K::activations);
    inout(dweight, n_of(int64_t{E} * N, K_) * f4, K::grads);
  }
}

}  // namespace moerl
