// generation.cpp — generation mode: prefill of the prompt (the training-mode layer forward plus
// KV-cache writes) and one-token decode steps against the cache. Both use layer_forward, so a
// position's log-probs and routing equal the training forward's bit for bit under fp32-ref.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kv_cache.h"
#include "models/layer_forward.h"
#include "models/model_impl.h"

namespace moerl {

void Model::generation_begin(GenerationState** state, int B, int max_len,
                             const NumericsProfile* profile) {
  // A data-parallel rank may hold no sequence of a batch (B = 0): it still takes part in the
  // MoE exchanges of every step.
  if (B < (par_.dp_size() > 1 ? 0 : 1) || max_len < 1 || max_len > cfg_.max_seq_len)
    throw std::invalid_argument("generation: need B >= 1 and 1 <= max_len <= model.max_seq_len = " +
                                std::to_string(cfg_.max_seq_len));
  auto* st = new GenerationState;
  st->B = B;
  st->max_len = max_len;
  st->pos = 0;
  if (profile) st->profile = *profile;
  else profile_builtin("fp32-ref", &st->profile);
  st->cache_len = kv_cache_len(max_len);
  const size_t cache = static_cast<size_t>(B) * st->cache_len * cfg_.d_model;
  for (int l = 0; l < cfg_.n_layers; ++l) {  // zero-filled, in the backend's memory
    st->kcache.emplace_back(backend(), cache);
    st->vcache.emplace_back(backend(), cache);
  }
  st->keep_from = DeviceArray<int32_t>(backend(), static_cast<size_t>(std::max(B, 1)));
  st->layers.resize(cfg_.n_layers);
  if (routes_resident(*this, *impl_, st->profile)) {  // the resident decode's blocks (model_impl.h)
    const Backend& be = backend();
    const size_t S = static_cast<size_t>(std::max(B, 1));
    st->stride = static_cast<int>(S);
    st->feed_host = HostArray<uint64_t>(be, 2 * S + 1);
    st->feed_dev = DeviceArray<uint64_t>(be, 2 * S + 1);
    st->draw_host = HostArray<uint64_t>(be, S + (S + 1) / 2);
    st->draw_dev = DeviceArray<uint64_t>(be, S + (S + 1) / 2);
    st->drawn_host = HostArray<float>(be, 3 * S);
    // A step records where nothing in it reads on the host: the router-noise dial draws there.
    st->graphs = be.graphs() && st->profile.router_noise == 0.0f;
  }
  *state = st;
}

void Model::generation_end(GenerationState* state) { delete state; }

void Model::generation_keep(GenerationState* st, const int32_t* from, int n) {
  if (n < 0 || n > st->B)
    throw std::invalid_argument("generation_keep: keeping " + std::to_string(n) + " of " + std::to_string(st->B) + " rows");
  std::vector<uint8_t> used(static_cast<size_t>(st->B), 0);
  for (int i = 0; i < n; ++i) {
    const int f = from[i];
    if (f < 0 || f >= st->B || used[f] || (f != i && f < n))
      throw std::invalid_argument("generation_keep: row " + std::to_string(i) + " from row " + std::to_string(f) +
                                  ": each source must be the row itself or one past the kept rows, once");
    used[f] = 1;
  }
  // A row's cache is its first pos positions (a column prefix of each of its D key rows, a row
  // prefix of its values); a source at or past n is never a destination. The sources go to the
  // backend's memory once (n indices), then one gather per layer moves every kept row there (on a
  // GPU: one kernel per layer, device to device), instead of a copy per row and layer.
  // The current rows' logits and log-probs follow (one gather each: row i from row from[i]).
  bool moves = false;
  for (int i = 0; i < n && !moves; ++i) moves = from[i] != i;
  const Backend& be = backend();
  const size_t V = static_cast<size_t>(cfg_.vocab_size), BV = static_cast<size_t>(st->B) * V;
  if (moves && st->pos > 0) {
    be.mem_copy(st->keep_from.data(), from, static_cast<size_t>(n) * sizeof(int32_t), CopyDir::to_device,
                CrossKind::indices);
    for (int l = 0; l < cfg_.n_layers; ++l)
      be.kv_cache_keep(st->kcache[l].data(), st->vcache[l].data(), st->keep_from.data(), n, cfg_.d_model,
                       st->cache_len, st->pos);
    for (ActBuffer<float>* rows : {&st->logits, &st->lp}) {
      if (rows->size() != BV) continue;
      st->kept.resize(be, static_cast<size_t>(n) * V);
      be.moe_gather(st->kept.data(), rows->data(), st->keep_from.data(), st->B, n, static_cast<int>(V));
      std::swap(*rows, st->kept);
    }
  }
  for (ActBuffer<float>* rows : {&st->logits, &st->lp})
    if (rows->size() == BV) rows->resize(be, static_cast<size_t>(n) * V);  // the first n rows (no move)
  st->B = n;
}

namespace {
// Every token of a call within the vocabulary: else std::invalid_argument naming the call.
void check_tokens(const char* what, const int32_t* tokens, int n, int vocab) {
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw std::invalid_argument(std::string(what) + ": token " + std::to_string(tokens[i]) + " outside [0, " +
                                  std::to_string(vocab) + ")");
}
// A decode step may follow: the prompt is in and the cache has room for one more position.
void check_step(const char* what, const GenerationState* st) {
  if (st->pos < 1) throw std::logic_error(std::string(what) + ": prefill first");
  if (st->pos >= st->max_len)
    throw std::invalid_argument(std::string(what) + ": KV cache full at " + std::to_string(st->max_len));
}

// Runs all layers over the rows in st->x; positions [rows] (host), or dev_pos and, decoding,
// dev_len [rows] already in the backend's memory (positions then null); decode when `decode`.
void run_layers(Model& m, Model::Impl* im, GenerationState* st, int rows, int B, int T,
                const int32_t* positions, bool decode, uint64_t call, int32_t* topk_ids,
                float* router_logp, const int32_t* replay_ids, float* logits, const int32_t* dev_pos = nullptr,
                const int32_t* dev_len = nullptr) {
  const ModelConfig& cfg = m.config();
  const int L = cfg.n_layers, K = cfg.top_k, D = cfg.d_model;
  const NumericsProfile& p = st->profile;
  const ParamView<const float> w = m.weights();
  const PackedSet& ps = model_packed(im, cfg, w, p, m.expert_range());
  const size_t NK = static_cast<size_t>(rows) * K, ND = static_cast<size_t>(rows) * D;
  const Backend& be = m.backend();
  std::vector<float> logp_scratch(cfg.is_moe() ? NK : 0);
  if (!dev_pos) {
    st->dev_positions.resize(be, static_cast<size_t>(rows));  // RoPE's, up once for every layer
    if (rows > 0)
      be.mem_copy(st->dev_positions.data(), positions, static_cast<size_t>(rows) * sizeof(int32_t),
                  CopyDir::to_device, CrossKind::indices);
    dev_pos = st->dev_positions.data();
  }
  if (decode && !dev_len) {  // each sequence's length, position + 1, where attention_decode reads it: up once
    std::vector<int32_t> len(static_cast<size_t>(rows));
    for (int b = 0; b < rows; ++b) {
      len[b] = positions[b] + 1;
      if (len[b] < 1 || len[b] > st->cache_len)
        throw std::invalid_argument("generation: sequence " + std::to_string(b) + " at length " +
                                    std::to_string(len[b]) + " outside 1.." + std::to_string(st->cache_len));
    }
    st->dev_len.resize(be, len.size());
    if (rows > 0)
      be.mem_copy(st->dev_len.data(), len.data(), len.size() * sizeof(int32_t), CopyDir::to_device, CrossKind::indices);
    dev_len = st->dev_len.data();
  }
  st->x_next.resize(be, ND);
  const bool resident = routes_resident(m, *im, p);
  if (resident) st->routing_stage.resize(be, static_cast<size_t>(L) * 2 * NK);
  st->routed_resident = resident;
  st->routed_rows = rows;
  for (int l = 0; l < L; ++l) {
    LayerActs& a = st->layers[l];
    act_copy(be, &a.x_in, st->x.data(), ND);
    LayerCall c;
    c.cfg = &cfg; c.profile = &p; c.params = &w; c.packed = &ps.layers[l];
    c.layer = l; c.N = rows; c.B = B; c.T = T; c.positions = positions; c.call = call;
    c.dev_positions = dev_pos;
    c.decode = decode ? st : nullptr;
    c.dev_len = dev_len;
    c.router_mode = replay_ids ? RouterMode::replay : RouterMode::normal;
    c.replay_ids = replay_ids ? replay_ids + l * NK : nullptr;
    c.bias = cfg.expert_bias ? m.expert_bias().data() + static_cast<size_t>(l) * cfg.n_experts : nullptr;
    c.training = false;
    c.dispatcher = im->dispatcher.get();
    c.control = &m.router_control();
    c.backend = &be;
    if (resident) {
      c.routing_stage = st->routing_stage.data() + static_cast<size_t>(l) * 2 * NK;
      layer_forward(&a, st->x_next.data(), nullptr, nullptr, c);
    } else {
      float* rl = router_logp ? router_logp + l * NK : (cfg.is_moe() ? logp_scratch.data() : nullptr);
      layer_forward(&a, st->x_next.data(), rl, nullptr, c);
      if (cfg.is_moe() && topk_ids)
        std::memcpy(topk_ids + l * NK, a.moe.router.ids.data(), sizeof(int32_t) * NK);
    }
    if (!decode)  // prefill: the prompt's k, v into the cache's positions 0..T-1, on the device
      be.kv_cache_write(st->kcache[l].data(), st->vcache[l].data(), a.k.data(), a.v.data(), B, T, D,
                        st->cache_len, 0);
    std::swap(st->x, st->x_next);
  }
  // logits of one row per sequence: the last prompt position (prefill: rows b·T + T − 1, one
  // strided copy within the backend's memory) or the new token (decode: every row)
  const size_t f4 = sizeof(float);
  const float* xl = st->x.data();
  if (!decode) {
    st->x_last.resize(be, static_cast<size_t>(B) * D);
    be.mem_copy_2d(st->x_last.data(), D * f4, st->x.data() + static_cast<size_t>(T - 1) * D, static_cast<size_t>(T) * D * f4,
                   D * f4, B, CopyDir::on_device, CrossKind::activations);
    xl = st->x_last.data();
  }
  st->h_final.resize(be, static_cast<size_t>(B) * D);
  st->rstd_final.resize(be, B);
  const size_t BV = static_cast<size_t>(B) * cfg.vocab_size;
  st->logits.resize(be, BV);
  final_forward(st->logits.data(), st->h_final.data(), st->rstd_final.data(), xl, ps.lm_head,
                w, cfg, p, B, call, be);
  if (resident && (topk_ids || router_logp) && NK > 0) {  // every layer's routing in one read
    std::vector<int32_t> stage(static_cast<size_t>(L) * 2 * NK);
    be.mem_copy(stage.data(), st->routing_stage.data(), stage.size() * sizeof(int32_t), CopyDir::to_host,
                CrossKind::per_token);
    for (int l = 0; l < L; ++l) {
      const int32_t* s = stage.data() + static_cast<size_t>(l) * 2 * NK;
      if (topk_ids) std::memcpy(topk_ids + l * NK, s, NK * sizeof(int32_t));
      if (router_logp) std::memcpy(router_logp + l * NK, s + NK, NK * sizeof(float));
    }
  }
  if (logits) be.mem_copy(logits, st->logits.data(), BV * f4, CopyDir::to_host, CrossKind::activations);
}
}  // namespace

void Model::generation_prefill(GenerationState* st, float* logits, int32_t* topk_ids,
                               float* router_logp, const int32_t* prompt, int P,
                               const int32_t* replay_ids) {
  if (st->pos != 0) throw std::logic_error("generation_prefill: state already holds tokens");
  if (P < 1 || P > st->max_len)
    throw std::invalid_argument("generation_prefill: prompt length " + std::to_string(P) +
                                " outside [1, " + std::to_string(st->max_len) + "]");
  const int B = st->B, N = B * P, D = cfg_.d_model;
  check_tokens("generation_prefill", prompt, N, cfg_.vocab_size);
  std::vector<int32_t> positions(N);
  for (int i = 0; i < N; ++i) positions[i] = i % P;
  st->x.resize(backend(), static_cast<size_t>(N) * D);
  backend().embedding_forward(st->x.data(), prompt, weights().get("embed"), N, D);
  backend().round_format(st->x.data(), static_cast<int64_t>(st->x.size()), st->profile.activations);
  // call 0: the same noise entity as a training forward with call 0 over the same rows
  run_layers(*this, impl_.get(), st, N, B, P, positions.data(), false, 0, topk_ids, router_logp,
             replay_ids, logits);
  st->pos = P;
}

void Model::generation_step(GenerationState* st, float* logits, int32_t* topk_ids,
                            float* router_logp, const int32_t* tokens, const int32_t* replay_ids) {
  check_step("generation_step", st);
  const int B = st->B, D = cfg_.d_model;
  check_tokens("generation_step", tokens, B, cfg_.vocab_size);
  std::vector<int32_t> positions(B, st->pos);
  st->x.resize(backend(), static_cast<size_t>(B) * D);
  backend().embedding_forward(st->x.data(), tokens, weights().get("embed"), B, D);
  backend().round_format(st->x.data(), static_cast<int64_t>(st->x.size()), st->profile.activations);
  run_layers(*this, impl_.get(), st, B, B, 1, positions.data(), true,
             static_cast<uint64_t>(st->pos), topk_ids, router_logp, replay_ids, logits);
  st->pos += 1;
}

void Model::generation_logprobs(GenerationState* st, float* logp, float temperature) {
  const int B = st->B, V = cfg_.vocab_size;
  const size_t BV = static_cast<size_t>(B) * V;
  if (st->pos < 1 || st->logits.size() != BV)
    throw std::logic_error("generation_logprobs: no logits of the current rows (call it after prefill or a step)");
  const Backend& be = backend();
  const float* tempered = st->logits.data();
  if (temperature != 1.0f) {
    st->scaled.resize(be, BV);
    be.divide_scalar(st->scaled.data(), st->logits.data(), static_cast<int64_t>(BV), temperature);
    tempered = st->scaled.data();
  }
  st->lp.resize(be, BV);
  be.log_softmax_forward(st->lp.data(), tempered, B, V);
  if (logp) be.mem_copy(logp, st->lp.data(), BV * sizeof(float), CopyDir::to_host, CrossKind::activations);
}

namespace {
// The last call's resident routing (n rows) into the records: row dev_rows[i] (the backend's
// memory) of every layer's rec_ids and rec_logp [L, rec_rows, K] receives row i.
void record_routing_rows(const Model& m, const GenerationState* st, int32_t* rec_ids, float* rec_logp,
                         int64_t rec_rows, const int32_t* dev_rows, int n) {
  const Backend& be = m.backend();
  const int L = m.config().n_layers, K = m.config().top_k;
  const size_t NK = static_cast<size_t>(n) * K;
  if (n <= 0) return;
  // the stage's 32-bit words, copied as they are (scatter_rows moves rows of floats; ids included)
  for (int l = 0; l < L; ++l) {
    const int32_t* stage = st->routing_stage.data() + static_cast<size_t>(l) * 2 * NK;
    const size_t at = static_cast<size_t>(l) * static_cast<size_t>(rec_rows) * K;
    be.scatter_rows(reinterpret_cast<float*>(rec_ids + at), reinterpret_cast<const float*>(stage), dev_rows, n, K);
    be.scatter_rows(rec_logp + at, reinterpret_cast<const float*>(stage + NK), dev_rows, n, K);
  }
}

// Issues `issue` (ops and copies only; every value that changes from one step to the next comes
// through the state's blocks) as the unit u over n rows: eagerly the first time at n (which sizes
// every buffer and packs the weights), recorded the second time and launched, replayed after that;
// eagerly throughout where the state does not record.
template <class F>
void decode_unit(const Backend& be, GenerationState* st, GenerationState::DecodeUnit* u, int n, F&& issue) {
  if (!st->graphs) {
    issue();
    return;
  }
  if (u->rows != n) {
    u->graph.reset();
    u->rows = n;
    u->warm = false;
  }
  if (!u->warm) {
    issue();
    u->warm = true;
    return;
  }
  if (!u->graph) {
    std::string failure;
    bool recording = false;
    try {
      be.graph_begin();
      recording = true;
      issue();
    } catch (const std::exception& e) {  // an op the recording refused (a GPU: an invalidated capture)
      failure = e.what();
    }
    if (recording) u->graph = be.graph_end();
    if (!failure.empty()) u->graph.reset();
    if (!u->graph) {  // nothing ran: this generation decodes eagerly from here on, and says why
      st->graphs = false;
      st->graph_failure = failure.empty() ? be.graph_failure() : failure;
      issue();
      return;
    }
    ++st->units_recorded;
  }
  if (!be.graph_launch(*u->graph)) {  // the backend's memory moved since: eagerly, recorded anew next time
    u->graph.reset();
    ++st->units_stale;
    issue();
    return;
  }
  ++st->units_replayed;
}
}  // namespace

void Model::generation_feed(GenerationState* st, const int32_t* tokens, int32_t* rec_ids, float* rec_logp,
                            int64_t rec_rows, const int32_t* rec_row, float temperature) {
  if (st->stride == 0)
    throw std::logic_error("generation_feed: the state does not route resident (generation_routes_resident)");
  check_step("generation_feed", st);
  const int n = st->B, D = cfg_.d_model, Bs = st->stride;
  check_tokens("generation_feed", tokens, n, cfg_.vocab_size);
  int32_t* w = reinterpret_cast<int32_t*>(st->feed_host.data());  // positions + 1 <= max_len <= cache_len
  for (int b = 0; b < n; ++b) {
    w[b] = tokens[b];
    w[Bs + b] = st->pos;
    w[2 * Bs + b] = st->pos + 1;
    w[3 * Bs + b] = rec_row[b];
  }
  st->feed_host.data()[2 * static_cast<size_t>(Bs)] = static_cast<uint64_t>(st->pos);  // the step's call
  const Backend& be = backend();
  const int32_t* dev = reinterpret_cast<const int32_t*>(st->feed_dev.data());
  const uint64_t* call_at = st->feed_dev.data() + 2 * static_cast<size_t>(Bs);
  st->profile.call_at = call_at;  // every key of the step: call 0 + the block's call
  decode_unit(be, st, &st->feed_unit, n, [&] {
    be.mem_copy(st->feed_dev.data(), st->feed_host.data(), st->feed_host.size() * sizeof(uint64_t),
                CopyDir::to_device, CrossKind::indices);
    st->x.resize(be, static_cast<size_t>(n) * D);
    be.embedding_forward(st->x.data(), dev, weights().get("embed"), n, D);
    be.round_format(st->x.data(), static_cast<int64_t>(st->x.size()), st->profile.activations);
    run_layers(*this, impl_.get(), st, n, n, 1, nullptr, true, 0, nullptr, nullptr, nullptr, nullptr, dev + Bs,
               dev + 2 * Bs);
    record_routing_rows(*this, st, rec_ids, rec_logp, rec_rows, dev + 3 * Bs, n);
    if (temperature > 0.0f) generation_logprobs(st, nullptr, temperature);
  });
  st->profile.call_at = nullptr;
  st->pos += 1;
}

void Model::generation_draw(GenerationState* st, int32_t* tokens, float* logp, float* entropy, const double* uniform,
                            float temperature, float top_p, float* dst, const int32_t* dst_row) {
  const int n = st->B, V = cfg_.vocab_size, Bs = st->stride;
  const size_t BV = static_cast<size_t>(n) * V;
  if (Bs == 0) throw std::logic_error("generation_draw: the state does not route resident");
  if (st->pos < 1 || st->logits.size() != BV || st->lp.size() != BV)
    throw std::logic_error("generation_draw: no log-probs of the current rows (generation_logprobs first)");
  double* u = reinterpret_cast<double*>(st->draw_host.data());
  int32_t* rows = reinterpret_cast<int32_t*>(st->draw_host.data() + Bs);
  for (int b = 0; b < n; ++b) {
    u[b] = uniform[b];
    rows[b] = dst_row[b];
  }
  const Backend& be = backend();
  const double* d_u = reinterpret_cast<const double*>(st->draw_dev.data());
  const int32_t* d_rows = reinterpret_cast<const int32_t*>(st->draw_dev.data() + Bs);
  decode_unit(be, st, &st->draw_unit, n, [&] {
    be.mem_copy(st->draw_dev.data(), st->draw_host.data(), st->draw_host.size() * sizeof(uint64_t),
                CopyDir::to_device, CrossKind::indices);
    st->sampled.resize(be, static_cast<size_t>(3) * n);
    float* staged = st->sampled.data();
    be.sample_rows(reinterpret_cast<int32_t*>(staged), staged + n, staged + 2 * static_cast<size_t>(n),
                   st->logits.data(), st->lp.data(), d_u, n, V, temperature, top_p);
    be.scatter_rows(dst, st->lp.data(), d_rows, n, V);
    if (n > 0)
      be.mem_copy(st->drawn_host.data(), staged, static_cast<size_t>(3) * n * sizeof(float), CopyDir::to_host,
                  CrossKind::per_token);
  });
  be.sync();
  const float* h = st->drawn_host.data();
  std::memcpy(tokens, h, static_cast<size_t>(n) * sizeof(int32_t));
  std::memcpy(logp, h + n, static_cast<size_t>(n) * sizeof(float));
  std::memcpy(entropy, h + 2 * static_cast<size_t>(n), static_cast<size_t>(n) * sizeof(float));
}

GenerationGraphs Model::generation_graphs(const GenerationState* st) const {
  return {st->units_recorded, st->units_replayed, st->units_stale, st->graph_failure};
}

bool Model::generation_routes_resident(const GenerationState* st) const {
  return routes_resident(*this, *impl_, st->profile);
}

void Model::generation_record_routing(GenerationState* st, int32_t* rec_ids, float* rec_logp, int64_t rec_rows,
                                      const int32_t* dst_row, int n) {
  if (!st->routed_resident || st->routed_rows != n)
    throw std::logic_error("generation_record_routing: the last call did not route resident over " + std::to_string(n) +
                           " rows");
  if (n <= 0) return;
  const Backend& be = backend();
  st->record_rows.resize(be, static_cast<size_t>(n));
  be.mem_copy(st->record_rows.data(), dst_row, static_cast<size_t>(n) * sizeof(int32_t), CopyDir::to_device,
              CrossKind::indices);
  record_routing_rows(*this, st, rec_ids, rec_logp, rec_rows, st->record_rows.data(), n);
}

void Model::generation_sample(GenerationState* st, int32_t* tokens, float* logp, float* entropy,
                              const double* uniform, float temperature, float top_p) {
  const int B = st->B, V = cfg_.vocab_size;
  const size_t BV = static_cast<size_t>(B) * V;
  if (st->pos < 1 || st->logits.size() != BV || st->lp.size() != BV)
    throw std::logic_error("generation_sample: no log-probs of the current rows (generation_logprobs first)");
  // the three results side by side where they are computed, then one read: [tokens | logp | entropy]
  const Backend& be = backend();
  st->sampled.resize(be, static_cast<size_t>(3) * B);
  float* staged = st->sampled.data();
  be.sample_rows(reinterpret_cast<int32_t*>(staged), staged + B, staged + 2 * static_cast<size_t>(B), st->logits.data(),
                 st->lp.data(), uniform, B, V, temperature, top_p);
  std::vector<float> host(static_cast<size_t>(3) * B);
  if (B > 0) be.mem_copy(host.data(), staged, host.size() * sizeof(float), CopyDir::to_host, CrossKind::per_token);
  std::memcpy(tokens, host.data(), static_cast<size_t>(B) * sizeof(int32_t));
  std::memcpy(logp, host.data() + B, static_cast<size_t>(B) * sizeof(float));
  std::memcpy(entropy, host.data() + 2 * static_cast<size_t>(B), static_cast<size_t>(B) * sizeof(float));
}

void Model::generation_store_logprobs(GenerationState* st, float* dst, const int32_t* dst_row) {
  const int B = st->B, V = cfg_.vocab_size;
  if (st->lp.size() != static_cast<size_t>(B) * V)
    throw std::logic_error("generation_store_logprobs: no log-probs of the current rows (generation_logprobs first)");
  backend().scatter_rows(dst, st->lp.data(), dst_row, B, V);
}

}  // namespace moerl
