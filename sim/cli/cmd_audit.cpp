// cmd_audit.cpp — `moerl audit`: run the same tokens through two numerics profiles and report
// routing flips and the train–inference mismatch (metric definitions: sim/audit.h).
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
#include <cstdio>
#include <fstream>

#include <unistd.h>

#include "store/h5io.h"
#include "store/path_checks.h"
#include "sim/io/text_io.h"
#include "sim/audit.h"
#include "sim/backend_select.h"
#include "sim/cli/cli.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/sampling.h"
#include "sim/tasks/task.h"
#include "sim/scenario.h"

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

int cmd_audit(const Comms& comms, const std::vector<std::string>& args) {
  std::string checkpoint, tokens_path, name_a, name_b, scenario_path, out, backend_a, backend_b;
  int batch = 256, ranks_per_run = 0;
  std::vector<std::string> sets;
  po::options_description desc("moerl audit options");
  desc.add_options()
      ("checkpoint", po::value(&checkpoint)->required(), "checkpoint (HDF5)")
      ("tokens", po::value(&tokens_path), "tokens file (tokens [N, T] int32); default: sample [audit] sequences under profile A")
      ("profile-a", po::value(&name_a), "profile A, the rollout side (default: engines.rollout)")
      ("profile-b", po::value(&name_b), "profile B, the train side (default: engines.train)")
      ("backend-a", po::value(&backend_a), "backend of side A: cpu | cuda (default: run.backend)")
      ("backend-b", po::value(&backend_b), "backend of side B: cpu | cuda (default: run.backend); "
                                         "e.g. the same profile emulated (cpu) against the GPU (cuda)")
      ("scenario", po::value(&scenario_path), "scenario: [audit], [run] seed, [engines], [profile.NAME]")
      ("out", po::value(&out), "write the numbers to .h5/.hdf5 (HDF5) or .json")
      ("batch", po::value(&batch)->default_value(256), "sequences per forward call (split over the ranks)")
      ("ranks-per-run", po::value(&ranks_per_run)->default_value(0), "ranks of the run's group (0 = all; other groups stay idle)");
  cli_add_set_option(&desc, &sets);
  po::variables_map vm;
  bool go = true;
  comms_checked(comms, [&] {
    go = cli_parse(comms, "audit",
                   "--checkpoint C.h5 [--tokens T.h5] --profile-a A --profile-b B [--scenario S.ini] "
                   "[--out audit.h5|audit.json] [--set section.key=value]...",
                   desc, po::positional_options_description(), args, &vm);
    if (!go) return;
    if (batch < 1) throw usage_error("audit: --batch " + std::to_string(batch) + ": must be >= 1");
    if (!out.empty() && !ends_with(out, ".h5") && !ends_with(out, ".hdf5") && !ends_with(out, ".json"))
      throw usage_error("audit: --out " + out + ": the extension must be .h5, .hdf5 or .json");
  });
  if (!go) return 0;
  // Every batch is split over the group's ranks (experts sharded, sequences in blocks) and
  // gathered; the root prints and writes.
  const RankGrid grid(comms, ranks_per_run);
  if (!grid.active()) return 0;

  Scenario scenario;
  NumericsProfile prof_a, prof_b;
  const Backend *be_a = nullptr, *be_b = nullptr;
  std::unique_ptr<Model> model;
  grid.checked([&] {  // bad input fails on every rank at once
    if (!out.empty()) {
      path_check_output_file(out, "--out");
      path_check_not_an_input(out, "--out", {{"checkpoint", checkpoint}, {"tokens file", tokens_path},
                                              {"scenario file", scenario_path}});
    }
    if (grid.is_root() && !out.empty()) h5_check_writable(out);  // before the work, not after it
    scenario = scenario_path.empty() ? Scenario::defaults(sets) : Scenario::load(scenario_path, sets);
    if (name_a.empty()) name_a = scenario.engines.rollout;
    if (name_b.empty()) name_b = scenario.engines.train;
    prof_a = scenario.profile(name_a);
    prof_b = scenario.profile(name_b);
    BackendKind kind_a = scenario.run.backend, kind_b = scenario.run.backend;
    if (!backend_a.empty() && !backend_parse(backend_a, &kind_a))
      throw usage_error("audit: --backend-a " + backend_a + ": " + kBackendNames.must_be());
    if (!backend_b.empty() && !backend_parse(backend_b, &kind_b))
      throw usage_error("audit: --backend-b " + backend_b + ": " + kBackendNames.must_be());
    backend_check_profiles(kind_a, {&prof_a});
    backend_check_profiles(kind_b, {&prof_b});
    be_a = &backend_select(kind_a, comms.local_rank, backend_a.empty() ? "run.backend" : "--backend-a");
    be_b = &backend_select(kind_b, comms.local_rank, backend_b.empty() ? "run.backend" : "--backend-b");
    model = model_load_checkpoint(checkpoint);
    model->set_parallel(grid.model_parallel(0));
  });
  const ModelConfig& cfg = model->config();
  const int L = cfg.n_layers, K = cfg.top_k, V = cfg.vocab_size;

  AuditInfo info;
  info.checkpoint = checkpoint;
  info.profile_a = name_a;
  info.profile_b = name_b;
  if (be_a != be_b) {  // say which side ran where
    info.profile_a += std::string(" on ") + backend_name(be_a->kind());
    info.profile_b += std::string(" on ") + backend_name(be_b->kind());
  }
  info.scenario = scenario.effective_text();
  std::vector<int32_t> tokens, lengths;  // lengths [N]: a sequence's tokens, the rest padding
  int64_t N = 0;
  int T = 0, first = 1;  // audited positions: first..T-1
  grid.checked([&] {
    if (!tokens_path.empty()) tokens = tokens_read(tokens_path, cfg, &N, &T, &lengths);
    const AuditConfig& a = scenario.audit;
    if (tokens_path.empty() && a.prompt_len + a.response_len > cfg.max_seq_len)
      throw std::invalid_argument(
          "audit.prompt_len + audit.response_len = " + std::to_string(a.prompt_len + a.response_len) +
          ": exceeds the checkpoint's max_seq_len = " + std::to_string(cfg.max_seq_len));
    const int64_t n = tokens_path.empty() ? a.prompts : N;
    if (n < grid.size())
      throw std::invalid_argument("audit: " + std::to_string(n) + " sequences, fewer than the " +
                                  std::to_string(grid.size()) + " ranks");
  });
  if (!tokens_path.empty()) {
    info.tokens_source = tokens_path;
  } else {
    const AuditConfig& a = scenario.audit;
    model->set_backend(*be_a);
    const std::unique_ptr<Task> task = task_create(scenario.task);
    tokens = sample_sequences(model.get(), prof_a, a, scenario.run.seed, batch, task->eos(), &lengths);
    N = a.prompts;
    T = a.prompt_len + a.response_len;
    first = a.prompt_len;
    char temp[32];
    std::snprintf(temp, sizeof temp, "%g", static_cast<double>(a.temperature));
    info.tokens_source = "sampled under " + name_a + " (seed " + std::to_string(scenario.run.seed) +
                         ", temperature " + temp + (task->ends_at_eos() ? ", ended at EOS" : "") + ")";
  }
  info.sequences = N;
  info.positions = (first == 1 ? "positions " : "response positions ") + std::to_string(first) +
                   ".." + std::to_string(T - 1);
  if (std::any_of(lengths.begin(), lengths.end(), [&](int32_t n) { return n < T; }))
    info.positions += " (each sequence up to its own length)";

  AuditAccum acc;
  audit_init(&acc, cfg.is_moe() ? L : 0);
  ForwardResult ra, rb;
  for (int64_t n0 = 0; n0 < N; n0 += batch) {
    const int B = static_cast<int>(std::min<int64_t>(batch, N - n0));
    const SeqBlock blk = dp_block(B, grid.size(), grid.rank());  // this rank's sequences
    ForwardRequest req;
    req.tokens = tokens.data() + (n0 + blk.begin) * T;
    req.B = static_cast<int>(blk.size());
    req.B_total = B;
    req.T = T;
    req.want_logits = true;
    req.call = static_cast<uint64_t>(n0);
    req.profile = &prof_a;
    model->set_backend(*be_a);
    model->forward(&ra, req);
    req.profile = &prof_b;
    model->set_backend(*be_b);
    model->forward(&rb, req);
    gather_forward(&ra, grid.dp(), L, cfg.is_moe(), false);
    gather_forward(&rb, grid.dp(), L, cfg.is_moe(), false);
    req.tokens = tokens.data() + n0 * T;  // the whole batch from here on
    // Row r = b*T + t. Routing mask: rows of audited tokens; log-prob mask: the rows before them.
    const size_t rows = static_cast<size_t>(B) * T;
    std::vector<uint8_t> route_mask(rows, 0), logit_mask(rows, 0);
    std::vector<int32_t> targets(rows, 0);
    for (int b = 0; b < B; ++b)
      for (int t = first; t < lengths[n0 + b]; ++t) {
        const size_t r = static_cast<size_t>(b) * T + t;
        route_mask[r] = 1;
        logit_mask[r - 1] = 1;
        targets[r - 1] = req.tokens[r];
      }
    if (cfg.is_moe())
      audit_add_routing(&acc, ra.topk_ids.data(), rb.topk_ids.data(), route_mask.data(), L,
                        static_cast<int>(rows), K);
    audit_add_logprobs(&acc, ra.logits.data(), rb.logits.data(), targets.data(), logit_mask.data(),
                       static_cast<int>(rows), V);
  }
  const AuditMetrics m = audit_finish(acc);
  grid.checked([&] {  // a failed write (full disk) ends every rank with the root's message
    if (!grid.is_root()) return;
    std::fputs(audit_format_table(m, info).c_str(), stdout);
    if (!out.empty()) {
      if (ends_with(out, ".json")) text_write_atomic(out, audit_format_json(m, info));
      else audit_write_h5(out, m, info);
      std::printf("wrote %s\n", out.c_str());
    }
  });
  return 0;
}

}  // namespace moerl
