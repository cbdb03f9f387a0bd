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
#include "sim/backend_select.h"
#include "sim/cli/cli.h"
#include "sim/comm/gather.h"
#include "sim/io/model_io.h"
#include "sim/scenario.h"

namespace po = boost::program_options;

namespace moerl {

int cmd_score(const Comms& comms, const std::vector<std::string>& args) {
  std::string checkpoint, tokens_path, profile_name, scenario_path, out;
  int batch = 256, ranks_per_run = 0;
  std::vector<std::string> sets;
  po::options_description desc("moerl score options");
  desc.add_options()
      ("checkpoint", po::value(&checkpoint)->required(), "checkpoint (HDF5)")
      ("tokens", po::value(&tokens_path)->required(), "tokens file: dataset tokens [N, T] int32")
      ("profile", po::value(&profile_name)->required(), "numerics profile (user profiles of --scenario first, then built-ins)")
      ("scenario", po::value(&scenario_path), "scenario whose [profile.NAME] sections define profiles")
      ("out", po::value(&out), "output file (HDF5): logprobs [N, T-1], topk_ids [L, N, T, K]")
      ("batch", po::value(&batch)->default_value(256), "sequences per forward call (split over the ranks)")
      ("ranks-per-run", po::value(&ranks_per_run)->default_value(0), "ranks of the run's group (0 = all; other groups stay idle)");
  cli_add_set_option(&desc, &sets);
  po::variables_map vm;
  bool go = true;
  comms_checked(comms, [&] {
    go = cli_parse(comms, "score",
                   "--checkpoint C.h5 --tokens T.h5 --profile NAME [--scenario S.ini] [--out O.h5]",
                   desc, po::positional_options_description(), args, &vm);
    if (go && batch < 1) throw usage_error("score: --batch " + std::to_string(batch) + ": must be >= 1");
  });
  if (!go) return 0;
  const RankGrid grid(comms, ranks_per_run);
  if (!grid.active()) return 0;

  Scenario scenario;
  NumericsProfile profile;
  std::unique_ptr<Model> model;
  int64_t N = 0;
  int T = 0;
  std::vector<int32_t> tokens, lengths;
  std::unique_ptr<H5File> f;
  grid.checked([&] {  // bad input fails on every rank at once
    if (!out.empty()) {
      path_check_output_file(out, "--out");
      path_check_not_an_input(out, "--out", {{"checkpoint", checkpoint}, {"tokens file", tokens_path},
                                              {"scenario file", scenario_path}});
    }
    scenario = scenario_path.empty() ? Scenario::defaults(sets) : Scenario::load(scenario_path, sets);
    profile = scenario.profile(profile_name);
    model = model_load_checkpoint(checkpoint);
    model->set_parallel(grid.model_parallel(0));
    backend_check_profiles(scenario.run.backend, {&profile});
    model->set_backend(backend_select(scenario.run.backend, comms.local_rank));
    tokens = tokens_read(tokens_path, model->config(), &N, &T, &lengths);
    if (N < grid.size())
      throw std::invalid_argument("score: " + tokens_path + " holds " + std::to_string(N) +
                                  " sequences, fewer than the " + std::to_string(grid.size()) + " ranks");
    if (grid.is_root() && !out.empty()) f = std::make_unique<H5File>(H5File::create(out));
  });
  const ModelConfig& cfg = model->config();
  const int L = cfg.n_layers, K = cfg.top_k;

  if (f) {
    f->create_dataset("logprobs", H5Type::f32, {N, T - 1});
    if (cfg.is_moe()) f->create_dataset("topk_ids", H5Type::i32, {L, N, T, K});
  }
  double sum_logp = 0.0, scored = 0.0;
  ForwardResult res;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n0 = 0; n0 < N; n0 += batch) {
    const int B = static_cast<int>(std::min<int64_t>(batch, N - n0));
    const SeqBlock blk = dp_block(B, grid.size(), grid.rank());  // this rank's sequences
    ForwardRequest req;
    req.tokens = tokens.data() + (n0 + blk.begin) * T;
    req.B = static_cast<int>(blk.size());
    req.B_total = B;
    req.T = T;
    req.profile = &profile;
    req.call = static_cast<uint64_t>(n0);  // noise entity: the batch's first sequence
    model->forward(&res, req);
    gather_forward(&res, grid.dp(), L, cfg.is_moe(), false);
    // past a sequence's end (lengths[n] tokens): padding, NaN
    for (int b = 0; b < B; ++b)
      for (int t = 0; t + 1 < T; ++t) {
        float& lp = res.logprobs[static_cast<size_t>(b) * (T - 1) + t];
        if (t + 1 >= lengths[n0 + b]) { lp = nan; continue; }
        sum_logp += lp;
        scored += 1.0;
      }
    if (!f) continue;
    f->write_block("logprobs", {n0, 0}, {B, T - 1}, res.logprobs.data());
    // The model's [L, B*T, K] is, per layer, the [B, T, K] block of topk_ids[l, n0:n0+B].
    if (cfg.is_moe())
      for (int l = 0; l < L; ++l)
        f->write_block("topk_ids", {l, n0, 0, 0}, {1, B, T, K},
                       res.topk_ids.data() + static_cast<size_t>(l) * B * T * K);
  }
  grid.checked([&] {  // a failed write (full disk) ends every rank with the root's message
    if (!f) return;
    f->set_attr("/", "format", "moerl-score");
    f->set_attr("/", "version", int64_t{1});
    f->set_attr("/", "profile", profile.name);
    f->set_attr("/", "checkpoint", checkpoint);
    f->set_attr("/", "tokens", tokens_path);
    f->write("lengths", {N}, lengths.data());
    if (!scenario_path.empty() || !sets.empty())
      f->set_attr("/", "scenario", scenario.effective_text());
    f->commit();
  });
  if (!grid.is_root()) return 0;
  std::printf("moerl score: %lld sequences x %d tokens under %s: mean log-prob %.6f%s%s\n",
              static_cast<long long>(N), T, profile.name.c_str(),
              sum_logp / scored, out.empty() ? "" : ", wrote ",
              out.c_str());
  return 0;
}

}  // namespace moerl
