// cmd_audit.cpp — `moerl audit`: run the same tokens through two numerics profiles and report
// routing flips and the train–inference mismatch (metric definitions: sim/jobs/audit.h).
//
// Tokens: given (--tokens, every position t >= 1 audited), or sampled from the model under
// profile A with the generation API: audit.prompt_len uniform random prompt tokens
// (Stream::data) and audit.response_len tokens at audit.temperature (Stream::sampling), both
// streams keyed by (run.seed, sequence index); then only response positions are audited. When the
// scenario's task ends its answers at EOS, a sampled response ends at its first EOS (the rest is
// padding, audited nowhere), and a tokens file may say each row's length (dataset `lengths`).
// A token at position t is audited with its own routing (row t, the token as input) and its
// log-prob (the logits of row t−1 predicting it), from both profiles' training-mode forward.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>

#include <unistd.h>

#include "store/h5io.h"
#include "store/path_checks.h"
#include "sim/io/text_io.h"
#include "sim/jobs/audit.h"
#include "sim/process/backend_select.h"
#include "sim/cli/cli.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/step/sampling.h"
#include "sim/tasks/task.h"
#include "sim/scenario/scenario.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

// Samples N sequences of P prompt + R response tokens under `profile`, in batches; every batch
// split over the data-parallel ranks and gathered (streams are keyed by the sequence index).
// eos >= 0: a response ends at its first eos (*lengths [N] = P + its tokens; the rest is eos).
std::vector<int32_t> sample_sequences(Model* model, const NumericsProfile& profile,
                                      const AuditConfig& a, uint64_t seed, int batch, int eos,
                                      std::vector<int32_t>* lengths) {
  const int N = a.prompts, P = a.prompt_len, R = a.response_len, T = P + R;
  const int V = model->config().vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(N) * T);
  lengths->assign(static_cast<size_t>(N), T);
  for (int n = 0; n < N; ++n) {
    Rng rng(rng_derive(seed, static_cast<uint64_t>(Stream::data), {static_cast<uint64_t>(n)}));
    for (int t = 0; t < P; ++t)
      tokens[static_cast<size_t>(n) * T + t] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  }
  const ModelParallel& par = model->parallel();
  for (int n0_batch = 0; n0_batch < N; n0_batch += batch) {
    const SeqBlock blk = dp_block(std::min(batch, N - n0_batch), par.dp_size(), par.dp_rank());
    const int B = static_cast<int>(blk.size()), n0 = n0_batch + static_cast<int>(blk.begin);
    std::vector<Rng> rngs;
    for (int b = 0; b < B; ++b)
      rngs.emplace_back(rng_derive(seed, static_cast<uint64_t>(Stream::sampling),
                                   {static_cast<uint64_t>(n0 + b)}));
    std::vector<int32_t> prompt(static_cast<size_t>(B) * P), next(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b)
      std::copy_n(tokens.begin() + static_cast<int64_t>(n0 + b) * T, P, prompt.begin() + b * P);
    std::vector<float> logits(static_cast<size_t>(B) * V);
    GenerationState* st = nullptr;
    model->generation_begin(&st, B, T, &profile);
    try {
      model->generation_prefill(st, logits.data(), nullptr, nullptr, prompt.data(), P);
      for (int s = 0; s < R; ++s) {
        for (int b = 0; b < B; ++b) {
          const bool ended = eos >= 0 && (*lengths)[n0 + b] < T;
          next[b] = ended ? eos : sampling_draw(logits.data() + static_cast<size_t>(b) * V, V,
                                                SamplingConfig{a.temperature, 1.0f}, &rngs[static_cast<size_t>(b)]);
          tokens[static_cast<size_t>(n0 + b) * T + P + s] = next[b];
          if (!ended && eos >= 0 && next[b] == eos) (*lengths)[n0 + b] = P + s + 1;
        }
        if (s + 1 < R) model->generation_step(st, logits.data(), nullptr, nullptr, next.data());
      }
    } catch (...) {
      model->generation_end(st);
      throw;
    }
    model->generation_end(st);
    if (par.dp_size() > 1) {
      const std::vector<int32_t> mine(tokens.begin() + static_cast<int64_t>(n0) * T,
                                      tokens.begin() + static_cast<int64_t>(n0 + B) * T);
      const std::vector<int32_t> all = collectives_allgather(*par.dp, mine);
      std::copy(all.begin(), all.end(), tokens.begin() + static_cast<int64_t>(n0_batch) * T);
      const std::vector<int32_t> len(lengths->begin() + n0, lengths->begin() + n0 + B);
      const std::vector<int32_t> all_len = collectives_allgather(*par.dp, len);
      std::copy(all_len.begin(), all_len.end(), lengths->begin() + n0_batch);
    }
  }
  return tokens;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

namespace {

const char* kAuditUsage =
    "--checkpoint C.h5 [--tokens T.h5] --profile-a A --profile-b B [--scenario S.ini] "
    "[--out audit.h5|audit.json [--force]] [--set section.key=value]...";

struct AuditArgs {
  ModelInputArgs in;
  std::string name_a, name_b, backend_a, backend_b;
};

// The scenario, the two sides (profile and backend) and the model, read once on every rank.
struct AuditSides {
  Scenario scenario;
  NumericsProfile prof_a, prof_b;
  const Backend *be_a = nullptr, *be_b = nullptr;
  std::unique_ptr<Model> model;
};

// The audited sequences: tokens [N, T], lengths [N] (a sequence's tokens, the rest padding), and
// the positions first..T-1 audited.
struct AuditTokens {
  std::vector<int32_t> tokens, lengths;
  int64_t N = 0;
  int T = 0, first = 1;
};

// Phase 1: the options; false when --help was asked.
bool audit_parse(const Comms& comms, const std::vector<std::string>& args, AuditArgs* a) {
  po::options_description desc("moerl audit options");
  desc.add_options()
      ("profile-a", po::value(&a->name_a), "profile A, the rollout side (default: engines.rollout)")
      ("profile-b", po::value(&a->name_b), "profile B, the train side (default: engines.train)")
      ("backend-a", po::value(&a->backend_a), "backend of side A: cpu | cuda (default: run.backend)")
      ("backend-b", po::value(&a->backend_b), "backend of side B: cpu | cuda (default: run.backend); "
                                            "e.g. the same profile emulated (cpu) against the GPU (cuda)");
  cli_add_model_input_args(&desc, &a->in, false,
                           "tokens file (tokens [N, T] int32); default: sample [audit] sequences under profile A",
                           "scenario: [audit], [run] seed, [engines], [profile.NAME]",
                           "write the numbers to .h5/.hdf5 (HDF5) or .json");
  po::variables_map vm;
  bool go = true;
  comms_checked(comms, [&] {
    go = cli_parse(comms, "audit", kAuditUsage, desc, po::positional_options_description(), args, &vm);
    if (!go) return;
    cli_check_model_input_args("audit", vm, a->in);
    const std::string& out = a->in.out;
    if (!out.empty() && !ends_with(out, ".h5") && !ends_with(out, ".hdf5") && !ends_with(out, ".json"))
      throw usage_error("audit: --out " + out + ": the extension must be .h5, .hdf5 or .json");
  });
  return go;
}

// The backend of one side: --backend-X, else run.backend.
const Backend* audit_backend(const std::string& given, const char* option, BackendKind kind,
                             const NumericsProfile& prof, int local_rank) {
  if (!given.empty() && !backend_parse(given, &kind))
    throw usage_error(std::string("audit: ") + option + " " + given + ": " + kBackendNames.must_be());
  backend_check_profiles(kind, {&prof});
  return &backend_select(kind, local_rank, given.empty() ? "run.backend" : option);
}

// Phase 2: scenario, sides and model; bad input fails on every rank at once, before the work.
AuditSides audit_load(const Comms& comms, const RankGrid& grid, AuditArgs* a) {
  AuditSides x;
  grid.checked([&] {
    cli_check_model_output(a->in);
    if (grid.is_root() && !a->in.out.empty()) h5_check_writable(a->in.out);  // before the work, not after it
    x.scenario = cli_model_scenario(a->in);
    if (a->name_a.empty()) a->name_a = x.scenario.engines.rollout;
    if (a->name_b.empty()) a->name_b = x.scenario.engines.train;
    x.prof_a = x.scenario.profile(a->name_a);
    x.prof_b = x.scenario.profile(a->name_b);
    x.be_a = audit_backend(a->backend_a, "--backend-a", x.scenario.run.backend, x.prof_a, comms.local_rank);
    x.be_b = audit_backend(a->backend_b, "--backend-b", x.scenario.run.backend, x.prof_b, comms.local_rank);
    x.model = model_load_checkpoint(a->in.checkpoint);
    x.model->set_parallel(grid.model_parallel(0));
  });
  return x;
}

// Phase 3: the tokens, given or sampled under side A; says in `info` where they came from.
AuditTokens audit_tokens(const RankGrid& grid, const AuditArgs& a, AuditSides* x, AuditInfo* info) {
  const ModelConfig& cfg = x->model->config();
  const AuditConfig& ac = x->scenario.audit;
  const std::string& path = a.in.tokens;
  AuditTokens t;
  grid.checked([&] {
    if (!path.empty()) t.tokens = tokens_read(path, cfg, &t.N, &t.T, &t.lengths);
    if (path.empty() && ac.prompt_len + ac.response_len > cfg.max_seq_len)
      throw std::invalid_argument(
          "audit.prompt_len + audit.response_len = " + std::to_string(ac.prompt_len + ac.response_len) +
          ": exceeds the checkpoint's max_seq_len = " + std::to_string(cfg.max_seq_len));
    const int64_t n = path.empty() ? ac.prompts : t.N;
    if (n < grid.size())
      throw std::invalid_argument("audit: " + std::to_string(n) + " sequences, fewer than the " +
                                  std::to_string(grid.size()) + " ranks");
  });
  if (!path.empty()) {
    info->tokens_source = path;
  } else {
    x->model->set_backend(*x->be_a);
    const std::unique_ptr<Task> task = task_create(x->scenario.task);
    t.tokens = sample_sequences(x->model.get(), x->prof_a, ac, x->scenario.run.seed, a.in.batch, task->eos(), &t.lengths);
    t.N = ac.prompts;
    t.T = ac.prompt_len + ac.response_len;
    t.first = ac.prompt_len;
    char temp[32];
    std::snprintf(temp, sizeof temp, "%g", static_cast<double>(ac.temperature));
    info->tokens_source = "sampled under " + a.name_a + " (seed " + std::to_string(x->scenario.run.seed) +
                          ", temperature " + temp + (task->ends_at_eos() ? ", ended at EOS" : "") + ")";
  }
  info->sequences = t.N;
  info->positions = (t.first == 1 ? "positions " : "response positions ") + std::to_string(t.first) + ".." +
                    std::to_string(t.T - 1);
  if (std::any_of(t.lengths.begin(), t.lengths.end(), [&](int32_t n) { return n < t.T; }))
    info->positions += " (each sequence up to its own length)";
  return t;
}

// Phase 4: both sides' forward on every batch (split over the ranks, gathered), compared.
// The K-th and (K+1)-th largest selection score of every (layer, row) [L, N, 2], from the router
// logits [L, N, E]: what the router's top-k ranks — the logit itself under softmax scoring (the
// softmax is monotone), σ(z) under sigmoid scoring, plus the selection bias b_e when the model has
// one (DeepSeek-V3: the bias moves the selection, not the gates).
std::vector<float> selection_top(const std::vector<float>& logits, const ModelConfig& cfg,
                                 const std::vector<float>& bias, int L, int N) {
  const int E = cfg.n_experts, K = cfg.top_k;
  const bool sigmoid = cfg.scoring == Scoring::sigmoid, biased = cfg.expert_bias && !bias.empty();
  std::vector<float> top(static_cast<size_t>(L) * N * 2), sel(E);
  for (int l = 0; l < L; ++l)
    for (int n = 0; n < N; ++n) {
      const float* z = &logits[(static_cast<size_t>(l) * N + n) * E];
      for (int e = 0; e < E; ++e) {
        sel[e] = sigmoid ? 1.0f / (1.0f + std::exp(-z[e])) : z[e];
        if (biased) sel[e] += bias[static_cast<size_t>(l) * E + e];
      }
      std::nth_element(sel.begin(), sel.begin() + K, sel.end(), std::greater<float>());  // [K] = (K+1)-th
      const float next = sel[K];
      const float kth = *std::min_element(sel.begin(), sel.begin() + K);
      top[(static_cast<size_t>(l) * N + n) * 2] = kth;
      top[(static_cast<size_t>(l) * N + n) * 2 + 1] = next;
    }
  return top;
}

AuditMetrics audit_measure(const RankGrid& grid, int batch, AuditSides* x, const AuditTokens& t) {
  const ModelConfig& cfg = x->model->config();
  const int L = cfg.n_layers, K = cfg.top_k, V = cfg.vocab_size, T = t.T;
  AuditAccum acc;
  audit_init(&acc, cfg.is_moe() ? L : 0);
  const bool margins = cfg.is_moe() && cfg.n_experts > K;  // router_top needs a (K+1)-th
  ForwardResult ra, rb;
  for (int64_t n0 = 0; n0 < t.N; n0 += batch) {
    const int B = static_cast<int>(std::min<int64_t>(batch, t.N - n0));
    const SeqBlock blk = dp_block(B, grid.size(), grid.rank());  // this rank's sequences
    ForwardRequest req;
    req.tokens = t.tokens.data() + (n0 + blk.begin) * T;
    req.B = static_cast<int>(blk.size());
    req.B_total = B;
    req.T = T;
    req.want_logits = true;
    req.call = static_cast<uint64_t>(n0);
    req.profile = &x->prof_a;
    x->model->set_backend(*x->be_a);
    x->model->forward(&ra, req);
    req.profile = &x->prof_b;
    req.want_router_logits = margins;
    x->model->set_backend(*x->be_b);
    x->model->forward(&rb, req);
    gather_forward(&ra, grid.dp(), L, cfg.is_moe(), false);
    gather_forward(&rb, grid.dp(), L, cfg.is_moe(), false, margins);
    const int32_t* tok = t.tokens.data() + n0 * T;  // the whole batch from here on
    // Row r = b*T + t. Routing mask: rows of audited tokens; log-prob mask: the rows before them.
    const size_t rows = static_cast<size_t>(B) * T;
    std::vector<uint8_t> route_mask(rows, 0), logit_mask(rows, 0);
    std::vector<int32_t> targets(rows, 0);
    for (int b = 0; b < B; ++b)
      for (int p = t.first; p < t.lengths[n0 + b]; ++p) {
        const size_t r = static_cast<size_t>(b) * T + p;
        route_mask[r] = 1;
        logit_mask[r - 1] = 1;
        targets[r - 1] = tok[r];
      }
    if (cfg.is_moe()) {
      audit_add_routing(&acc, ra.topk_ids.data(), rb.topk_ids.data(), route_mask.data(), L,
                        static_cast<int>(rows), K);
      audit_add_load(&acc, rb.topk_ids.data(), route_mask.data(), L, static_cast<int>(rows), K, cfg.n_experts);
    }
    if (margins) {
      const std::vector<float> top = selection_top(rb.router_logits, cfg, x->model->expert_bias(), L, static_cast<int>(rows));
      audit_add_margins(&acc, ra.topk_ids.data(), rb.topk_ids.data(), top.data(), route_mask.data(), L,
                        static_cast<int>(rows), K);
    }
    audit_add_logprobs(&acc, ra.logits.data(), rb.logits.data(), targets.data(), logit_mask.data(),
                       static_cast<int>(rows), V);
  }
  return audit_finish(acc);
}

}  // namespace

int cmd_audit(const Comms& comms, const std::vector<std::string>& args) {
  AuditArgs a;
  if (!audit_parse(comms, args, &a)) return 0;
  // Every batch is split over the group's ranks (experts sharded, sequences in blocks) and
  // gathered; the root prints and writes.
  const RankGrid grid(comms, a.in.ranks_per_run);
  if (!grid.active()) return 0;
  AuditSides x = audit_load(comms, grid, &a);
  AuditInfo info;
  info.checkpoint = a.in.checkpoint;
  info.profile_a = a.name_a;
  info.profile_b = a.name_b;
  if (x.be_a != x.be_b) {  // say which side ran where
    info.profile_a += std::string(" on ") + backend_name(x.be_a->kind());
    info.profile_b += std::string(" on ") + backend_name(x.be_b->kind());
  }
  info.scenario = x.scenario.effective_text();
  const AuditTokens t = audit_tokens(grid, a, &x, &info);
  const AuditMetrics m = audit_measure(grid, a.in.batch, &x, t);
  grid.checked([&] {  // a failed write (full disk) ends every rank with the root's message
    if (!grid.is_root()) return;
    std::fputs(audit_format_table(m, info).c_str(), stdout);
    const std::string& out = a.in.out;
    if (out.empty()) return;
    if (ends_with(out, ".json")) text_write_atomic(out, audit_format_json(m, info));
    else audit_write_h5(out, m, info);
    std::printf("wrote %s\n", out.c_str());
  });
  return 0;
}

}  // namespace moerl
