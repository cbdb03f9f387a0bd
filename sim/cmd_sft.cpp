// cmd_sft.cpp — `moerl sft SCENARIO --steps 0 --out CKPT`: the base checkpoint RL starts from.
// Today only --steps 0 (a freshly initialised model, params_init with run.seed); supervised
// training arrives with the RL loop.
#include <cstdio>

#include "models/checkpoint.h"
#include "sim/cli.h"
#include "sim/scenario.h"

namespace po = boost::program_options;

namespace moerl {

int cmd_sft(const Comms& comms, const std::vector<std::string>& args) {
  std::string scenario_path, out;
  int steps = 0;
  std::vector<std::string> sets;
  po::options_description desc("moerl sft options");
  desc.add_options()
      ("scenario", po::value(&scenario_path)->required(), "scenario file (positional)")
      ("steps", po::value(&steps)->default_value(0), "supervised steps (only 0 for now: initialise)")
      ("out", po::value(&out)->required(), "checkpoint to write (HDF5)");
  cli_add_set_option(&desc, &sets);
  po::positional_options_description pos;
  pos.add("scenario", 1);
  po::variables_map vm;
  if (!cli_parse(comms, "sft", "SCENARIO --steps 0 --out CKPT.h5 [--set section.key=value]...",
                 desc, pos, args, &vm))
    return 0;
  if (steps < 0) throw usage_error("sft: --steps " + std::to_string(steps) + ": must be >= 0");
  if (steps > 0)
    throw usage_error("sft: --steps " + std::to_string(steps) +
                      ": supervised training arrives with the RL loop; for now sft writes the "
                      "freshly initialised checkpoint (--steps 0)");

  const Scenario s = Scenario::load(scenario_path, sets);
  ParamStore params(s.model);
  params_init(&params, s.model, s.run.seed);
  CheckpointExtras extras;
  extras.scalars.push_back({"step", 0});
  // run.seed is a uint64; the int64 scalar holds its bit pattern.
  extras.scalars.push_back({"seed", static_cast<int64_t>(s.run.seed)});
  if (s.model.expert_bias)
    extras.arrays.push_back(
        {"router/expert_bias",
         std::vector<float>(static_cast<size_t>(s.model.n_layers) * s.model.n_experts, 0.0f)});
  if (comms.is_root) {
    checkpoint_save(out, s.model, params, &extras);
    std::printf("moerl sft: wrote %s: %lld parameters (%s, %d layers, %s), seed %llu, 0 steps\n",
                out.c_str(), static_cast<long long>(params.size()), scenario_path.c_str(),
                s.model.n_layers,
                s.model.is_moe() ? (std::to_string(s.model.n_experts) + " experts top-" +
                                    std::to_string(s.model.top_k)).c_str()
                                 : "dense",
                static_cast<unsigned long long>(s.run.seed));
  }
  return 0;
}

}  // namespace moerl
