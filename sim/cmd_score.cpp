// cmd_score.cpp — `moerl score`: per-token log-probs and per-layer routing of given sequences
// under one numerics profile (training-mode forward), written batch by batch so memory stays
// bounded by one batch of activations. Layout: docs/hdf5-schema.md, "Score output".
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/h5io.h"
#include "sim/cli.h"
#include "sim/model_io.h"
#include "sim/scenario.h"

namespace po = boost::program_options;

namespace moerl {

int cmd_score(const Comms& comms, const std::vector<std::string>& args) {
  std::string checkpoint, tokens_path, profile_name, scenario_path, out;
  int batch = 256;
  std::vector<std::string> sets;
  po::options_description desc("moerl score options");
  desc.add_options()
      ("checkpoint", po::value(&checkpoint)->required(), "checkpoint (HDF5)")
      ("tokens", po::value(&tokens_path)->required(), "tokens file: dataset tokens [N, T] int32")
      ("profile", po::value(&profile_name)->required(), "numerics profile (user profiles of --scenario first, then built-ins)")
      ("scenario", po::value(&scenario_path), "scenario whose [profile.NAME] sections define profiles")
      ("out", po::value(&out), "output file (HDF5): logprobs [N, T-1], topk_ids [L, N, T, K]")
      ("batch", po::value(&batch)->default_value(256), "sequences per forward call");
  cli_add_set_option(&desc, &sets);
  po::variables_map vm;
  if (!cli_parse(comms, "score",
                 "--checkpoint C.h5 --tokens T.h5 --profile NAME [--scenario S.ini] [--out O.h5]",
                 desc, po::positional_options_description(), args, &vm))
    return 0;
  if (batch < 1) throw usage_error("score: --batch " + std::to_string(batch) + ": must be >= 1");
  // Work runs on the root rank; other ranks have nothing to do (sequences are not split yet).
  if (!comms.is_root) return 0;

  const Scenario scenario =
      scenario_path.empty() ? Scenario::defaults(sets) : Scenario::load(scenario_path, sets);
  const NumericsProfile profile = scenario.profile(profile_name);
  std::unique_ptr<Model> model = model_load_checkpoint(checkpoint);
  const ModelConfig& cfg = model->config();
  int64_t N = 0;
  int T = 0;
  const std::vector<int32_t> tokens = tokens_read(tokens_path, cfg, &N, &T);
  const int L = cfg.n_layers, K = cfg.top_k;

  std::unique_ptr<H5File> f;
  if (!out.empty()) {
    f = std::make_unique<H5File>(H5File::create(out));
    f->create_dataset("logprobs", H5Type::f32, {N, T - 1});
    if (cfg.is_moe()) f->create_dataset("topk_ids", H5Type::i32, {L, N, T, K});
  }
  double sum_logp = 0.0;
  ForwardResult res;
  for (int64_t n0 = 0; n0 < N; n0 += batch) {
    const int B = static_cast<int>(std::min<int64_t>(batch, N - n0));
    ForwardRequest req;
    req.tokens = tokens.data() + n0 * T;
    req.B = B;
    req.T = T;
    req.profile = &profile;
    req.call = static_cast<uint64_t>(n0);  // noise entity: the batch's first sequence
    model->forward(&res, req);
    for (float lp : res.logprobs) sum_logp += lp;
    if (!f) continue;
    f->write_block("logprobs", {n0, 0}, {B, T - 1}, res.logprobs.data());
    // The model's [L, B*T, K] is, per layer, the [B, T, K] block of topk_ids[l, n0:n0+B].
    if (cfg.is_moe())
      for (int l = 0; l < L; ++l)
        f->write_block("topk_ids", {l, n0, 0, 0}, {1, B, T, K},
                       res.topk_ids.data() + static_cast<size_t>(l) * B * T * K);
  }
  if (f) {
    f->set_attr("/", "format", "moerl-score");
    f->set_attr("/", "version", int64_t{1});
    f->set_attr("/", "profile", profile.name);
    f->set_attr("/", "checkpoint", checkpoint);
    f->set_attr("/", "tokens", tokens_path);
    if (!scenario_path.empty() || !sets.empty())
      f->set_attr("/", "scenario", scenario.effective_text());
    f->commit();
  }
  std::printf("moerl score: %lld sequences x %d tokens under %s: mean log-prob %.6f%s%s\n",
              static_cast<long long>(N), T, profile.name.c_str(),
              sum_logp / (static_cast<double>(N) * (T - 1)), out.empty() ? "" : ", wrote ",
              out.c_str());
  return 0;
}

}  // namespace moerl
