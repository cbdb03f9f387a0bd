// cmd_score.cpp — `moerl score`: per-token log-probs and per-layer routing of given sequences
// under one numerics profile (training-mode forward), written batch by batch so memory stays
// bounded by one batch of activations. Layout: docs/hdf5-schema.md, "Score output".
// Under mpirun every batch is split over the ranks (experts sharded, sequences in contiguous
// blocks) and gathered on the root, which writes; log-probs and routing are bit-identical to one
// rank for batch-invariant profiles (docs/parallelism.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "store/h5io.h"
#include "store/path_checks.h"
#include "sim/process/backend_select.h"
#include "sim/cli/cli.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/scenario/scenario.h"

namespace po = boost::program_options;

namespace moerl {

namespace {

const char* kScoreUsage = "--checkpoint C.h5 --tokens T.h5 --profile NAME [--scenario S.ini] [--out O.h5 [--force]]";

// What score reads once, on every rank; f is the root's output (when --out is given).
struct ScoreInputs {
  Scenario scenario;
  NumericsProfile profile;
  std::unique_ptr<Model> model;
  int64_t N = 0;
  int T = 0;
  std::vector<int32_t> tokens, lengths;
  std::unique_ptr<H5File> f;
};

// Phase 1: the options; false when --help was asked.
bool score_parse(const Comms& comms, const std::vector<std::string>& args, ModelInputArgs* in, std::string* profile) {
  po::options_description desc("moerl score options");
  desc.add_options()("profile", po::value(profile)->required(),
                     "numerics profile (user profiles of --scenario first, then built-ins)");
  cli_add_model_input_args(&desc, in, true, "tokens file: dataset tokens [N, T] int32",
                           "scenario whose [profile.NAME] sections define profiles",
                           "output file (HDF5): logprobs [N, T-1], topk_ids [L, N, T, K]");
  po::variables_map vm;
  bool go = true;
  comms_checked(comms, [&] {
    go = cli_parse(comms, "score", kScoreUsage, desc, po::positional_options_description(), args, &vm);
    if (go) cli_check_model_input_args("score", vm, *in);
  });
  return go;
}

// Phase 2: scenario, profile, model, tokens and the output's datasets; bad input fails on every
// rank at once.
ScoreInputs score_load(const Comms& comms, const RankGrid& grid, const ModelInputArgs& in, const std::string& profile) {
  ScoreInputs x;
  grid.checked([&] {
    cli_check_model_output(in);
    x.scenario = cli_model_scenario(in);
    x.profile = x.scenario.profile(profile);
    x.model = model_load_checkpoint(in.checkpoint);
    x.model->set_parallel(grid.model_parallel(0));
    backend_check_profiles(x.scenario.run.backend, {&x.profile});
    x.model->set_backend(backend_select(x.scenario.run.backend, comms.local_rank));
    x.tokens = tokens_read(in.tokens, x.model->config(), &x.N, &x.T, &x.lengths);
    if (x.N < grid.size())
      throw std::invalid_argument("score: " + in.tokens + " holds " + std::to_string(x.N) +
                                  " sequences, fewer than the " + std::to_string(grid.size()) + " ranks");
    if (grid.is_root() && !in.out.empty()) x.f = std::make_unique<H5File>(H5File::create(in.out));
  });
  const ModelConfig& cfg = x.model->config();
  if (x.f) {
    x.f->create_dataset("logprobs", H5Type::f32, {x.N, x.T - 1});
    if (cfg.is_moe()) x.f->create_dataset("topk_ids", H5Type::i32, {cfg.n_layers, x.N, x.T, cfg.top_k});
  }
  return x;
}

// Phase 3: every batch split over the ranks, gathered, written by the root; returns the mean
// log-prob of the scored tokens.
double score_batches(const RankGrid& grid, int batch, ScoreInputs* x) {
  const ModelConfig& cfg = x->model->config();
  const int L = cfg.n_layers, K = cfg.top_k, T = x->T;
  double sum_logp = 0.0, scored = 0.0;
  ForwardResult res;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n0 = 0; n0 < x->N; n0 += batch) {
    const int B = static_cast<int>(std::min<int64_t>(batch, x->N - n0));
    const SeqBlock blk = dp_block(B, grid.size(), grid.rank());  // this rank's sequences
    ForwardRequest req;
    req.tokens = x->tokens.data() + (n0 + blk.begin) * T;
    req.B = static_cast<int>(blk.size());
    req.B_total = B;
    req.T = T;
    req.profile = &x->profile;
    req.call = static_cast<uint64_t>(n0);  // noise entity: the batch's first sequence
    x->model->forward(&res, req);
    gather_forward(&res, grid.dp(), L, cfg.is_moe(), false);
    // past a sequence's end (lengths[n] tokens): padding, NaN
    for (int b = 0; b < B; ++b)
      for (int t = 0; t + 1 < T; ++t) {
        float& lp = res.logprobs[static_cast<size_t>(b) * (T - 1) + t];
        if (t + 1 >= x->lengths[n0 + b]) { lp = nan; continue; }
        sum_logp += lp;
        scored += 1.0;
      }
    if (!x->f) continue;
    x->f->write_block("logprobs", {n0, 0}, {B, T - 1}, res.logprobs.data());
    // The model's [L, B*T, K] is, per layer, the [B, T, K] block of topk_ids[l, n0:n0+B].
    if (cfg.is_moe())
      for (int l = 0; l < L; ++l)
        x->f->write_block("topk_ids", {l, n0, 0, 0}, {1, B, T, K},
                          res.topk_ids.data() + static_cast<size_t>(l) * B * T * K);
  }
  return sum_logp / scored;
}

// Phase 4: the output's attributes and lengths, committed; a failed write (full disk) ends every
// rank with the root's message.
void score_finish(const RankGrid& grid, const ModelInputArgs& in, ScoreInputs* x) {
  grid.checked([&] {
    if (!x->f) return;
    x->f->set_attr("/", "format", "moerl-score");
    x->f->set_attr("/", "version", int64_t{1});
    x->f->set_attr("/", "profile", x->profile.name);
    x->f->set_attr("/", "checkpoint", in.checkpoint);
    x->f->set_attr("/", "tokens", in.tokens);
    x->f->write("lengths", {x->N}, x->lengths.data());
    if (!in.scenario.empty() || !in.sets.empty()) x->f->set_attr("/", "scenario", x->scenario.effective_text());
    x->f->commit();
  });
}

}  // namespace

int cmd_score(const Comms& comms, const std::vector<std::string>& args) {
  ModelInputArgs in;
  std::string profile;
  if (!score_parse(comms, args, &in, &profile)) return 0;
  const RankGrid grid(comms, in.ranks_per_run);
  if (!grid.active()) return 0;
  ScoreInputs x = score_load(comms, grid, in, profile);
  const double mean_logp = score_batches(grid, in.batch, &x);
  score_finish(grid, in, &x);
  if (!grid.is_root()) return 0;
  std::printf("moerl score: %lld sequences x %d tokens under %s: mean log-prob %.6f%s%s\n",
              static_cast<long long>(x.N), x.T, x.profile.name.c_str(), mean_logp, in.out.empty() ? "" : ", wrote ",
              in.out.c_str());
  return 0;
}

}  // namespace moerl
