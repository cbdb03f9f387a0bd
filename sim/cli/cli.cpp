// cli.cpp — the command table and shared option parsing of `moerl`.
#include "sim/cli/cli.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "kernels/linear.h"
#include "kernels/simd.h"
#include "sim/io/text_io.h"
#include "sim/scenario/scenario.h"
#include "sim/process/preempt.h"
#include "sim/process/threads.h"
#include "store/path_checks.h"

namespace po = boost::program_options;

namespace moerl {

const std::vector<Command>& cli_commands() {
  static const std::vector<Command> commands = {
      {"run", "one RL run of a scenario: rollout and train engines, the algorithm, metrics to HDF5", cmd_run},
      {"sweep", "every run of a grid (scenario x value lists x seeds) over MPI, with an index", cmd_sweep},
      {"sft", "the base policy: initialise, then supervised warm-up on the scenario's task",
       cmd_sft},
      {"score", "per-token log-probs and per-layer routing of given sequences under a profile",
       cmd_score},
      {"audit", "routing flips and train-inference KL between two numerics profiles", cmd_audit},
      {"bench", "time training, generation and the GEMM ceiling on the reference workload",
       cmd_bench},
      {"inspect", "a run's scenario, status and headline numbers; several runs side by side", cmd_inspect},
      {"report", "the analysis report of a sweep directory or run files (python -m analysis, from anywhere)", cmd_report},
  };
  return commands;
}

std::string cli_join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

std::string cli_version_line() {
  return std::string("moerl ") + MOERL_VERSION + ": SIMD target " + simd_target() + " (available: " +
         cli_join(simd_targets_available(), ", ") + "), BLAS " + blas_kernel_name() + ", " + threads_describe();
}

namespace {
void print_main_help() {
  std::printf("usage: moerl <command> [options]    (moerl <command> --help for its options)\n"
              "       moerl --version               (version, SIMD target, BLAS and threads of this process)\n"
              "environment: MOERL_SIMD=%s restricts the CPU kernels' instruction set;\n"
              "  threads per process: --threads N (any command), else OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK,\n"
              "  else the CPUs of the affinity mask\n\n"
              "commands:\n", cli_join(simd_target_names(), "|").c_str());
  for (const Command& c : cli_commands()) std::printf("  %-8s %s\n", c.name, c.summary);
}
}  // namespace

namespace {
// A command's exit status once what it printed is known to be written (cli_stdout_error).
int cli_finish(const Comms& comms, const std::string& command, int code) {
  const std::string lost = comms.is_root ? cli_stdout_error(command) : "";
  if (lost.empty()) return code;
  std::fprintf(stderr, "moerl: error: %s\n", text_visible(lost).c_str());
  std::fflush(stderr);
  return code != 0 ? code : 1;
}
}  // namespace

int cli_main(const Comms& comms, int argc, char** argv) {
  if (argc < 2) {
    if (comms.is_root) print_main_help();
    throw usage_error("no command given");
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    if (comms.is_root) print_main_help();
    return cli_finish(comms, "help", 0);
  }
  if (name == "--version" || name == "version") {
    comms_checked(comms, [] { threads_apply(threads_resolve(0)); });
    if (comms.is_root) std::printf("%s\n", cli_version_line().c_str());
    return cli_finish(comms, "version", 0);
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  // The allocation's threads before any kernel runs; a command's --threads replaces it (cli_parse).
  comms_checked(comms, [] { threads_apply(threads_resolve(0)); });
  for (const Command& c : cli_commands())
    // what the command printed is its result: when it could not be written, the command failed
    if (name == c.name) return cli_finish(comms, name, c.run(comms, args));
  std::string names;
  for (const Command& c : cli_commands()) names += (names.empty() ? "" : ", ") + std::string(c.name);
  throw usage_error("unknown command '" + name + "' (commands: " + names + ")");
}

namespace {
// The usage's first line and its first word, the positional's name as the usage writes it
// ("SCENARIO", "GRID.ini").
std::string usage_line(const std::string& usage) { return usage.substr(0, usage.find('\n')); }
std::string usage_positional(const std::string& usage) {
  const std::string line = usage_line(usage);
  return line.rfind('-', 0) == 0 ? "" : line.substr(0, line.find(' '));
}
}  // namespace

std::string cli_stdout_error(const std::string& command) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return "";
  // The reader of a pipe left (`moerl sweep ... | head`): a stop signal (SIGPIPE, exit 75), not a
  // lost result (sim/process/preempt.h).
  if (err == EPIPE || std::string(preempt_signal_name()) == "SIGPIPE") return "";
  return command + ": its output could not be written to standard output (" +
         (err != 0 ? std::strerror(err) : "a write failed") + "): what it printed is incomplete or missing";
}

std::string cli_missing_positional(const std::string& command, const std::string& word, const std::string& usage) {
  return command + ": " + word + " is missing (usage: moerl " + command + " " + usage_line(usage) + ")";
}

namespace {
// An option given with an empty value (`--profile-a ''`, `--profiles ''`): refused, never read as
// its default or as an empty list (what was asked is not what would run).
void cli_check_no_empty_values(const std::string& command, const po::variables_map& vm) {
  for (const auto& [name, v] : vm) {
    if (v.defaulted() || v.empty()) continue;
    const std::string* text = boost::any_cast<std::string>(&v.value());
    if (text && text->find_first_not_of(" \t") == std::string::npos)
      throw usage_error(command + ": --" + name + " '" + text_visible(*text) +
                        "': an empty value (give one, or leave the option out for its default; see moerl " + command +
                        " --help)");
  }
}
}  // namespace

bool cli_parse(const Comms& comms, const std::string& command, const std::string& usage,
               po::options_description desc, const po::positional_options_description& positional,
               const std::vector<std::string>& args, po::variables_map* vm) {
  int threads = 0;
  desc.add_options()("help,h", "print this help")(
      "threads", po::value(&threads)->default_value(0),
      "threads per process (0: OMP_NUM_THREADS, else SLURM_CPUS_PER_TASK, else the affinity mask's CPUs)");
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), *vm);
    if (vm->count("help")) {
      if (comms.is_root) std::cout << "usage: moerl " << command << " " << usage << "\n\n" << desc;
      return false;
    }
    po::notify(*vm);
    cli_check_no_empty_values(command, *vm);
  } catch (const po::required_option& e) {
    // a missing positional is named as the usage line writes it, not as the option behind it
    const bool is_positional = positional.max_total_count() > 0 &&
                               e.get_option_name() == "--" + positional.name_for_position(0);
    if (is_positional && !usage_positional(usage).empty())
      throw usage_error(cli_missing_positional(command, usage_positional(usage), usage));
    throw usage_error(command + ": " + e.what() + " (see moerl " + command + " --help)");
  } catch (const po::error& e) {
    throw usage_error(command + ": " + e.what() + " (see moerl " + command + " --help)");
  }
  if (threads < 0) throw usage_error(command + ": --threads " + std::to_string(threads) + ": must be >= 1 (or 0: as the allocation says)");
  if (threads > 0) threads_apply(threads_resolve(threads));
  return true;
}

void cli_add_set_option(po::options_description* desc, std::vector<std::string>* overrides) {
  desc->add_options()("set", po::value<std::vector<std::string>>(overrides)->composing(),
                      "override a scenario key: --set section.key=value (repeatable)");
}

void cli_add_scenario_args(po::options_description* desc, ScenarioArgs* a, const char* name, const char* doc) {
  desc->add_options()(name, po::value(&a->path)->required(), doc);
  cli_add_set_option(desc, &a->sets);
  a->positional.add(name, 1);
}

void cli_add_model_input_args(po::options_description* desc, ModelInputArgs* a, bool tokens_required,
                              const char* tokens_doc, const char* scenario_doc, const char* out_doc) {
  auto* tokens = po::value(&a->tokens);
  if (tokens_required) tokens->required();
  desc->add_options()
      ("checkpoint", po::value(&a->checkpoint)->required(), "checkpoint (HDF5)")
      ("tokens", tokens, tokens_doc)
      ("scenario", po::value(&a->scenario), scenario_doc)
      ("out", po::value(&a->out), out_doc)
      ("force", po::bool_switch(&a->force), "overwrite an existing --out (without it, an existing file is refused)")
      ("batch", po::value(&a->batch)->default_value(256), "sequences per forward call (split over the ranks)");
  cli_add_ranks_per_run(desc, &a->ranks_per_run);
  cli_add_set_option(desc, &a->sets);
}

void cli_check_model_input_args(const std::string& command, const po::variables_map& vm, const ModelInputArgs& a) {
  if (a.batch < 1) throw usage_error(command + ": --batch " + std::to_string(a.batch) + ": must be >= 1");
  cli_check_ranks_per_run(command, vm, a.ranks_per_run);
}

void cli_add_ranks_per_run(po::options_description* desc, int* ranks) {
  *ranks = 0;
  desc->add_options()("ranks-per-run", po::value(ranks),
                      "ranks of the run's group, >= 1 (default: all ranks; other groups stay idle)");
}

void cli_check_ranks_per_run(const std::string& command, const po::variables_map& vm, int ranks) {
  if (vm.count("ranks-per-run") && ranks < 1)
    throw usage_error(command + ": --ranks-per-run " + std::to_string(ranks) + ": must be >= 1 (default: all ranks)");
}

void cli_check_model_output(const ModelInputArgs& a) {
  if (a.out.empty()) return;
  path_check_output_file(a.out, "--out");
  path_check_not_an_input(a.out, "--out", {{"checkpoint", a.checkpoint}, {"tokens file", a.tokens}, {"scenario file", a.scenario}});
  path_check_no_overwrite(a.out, "--out", a.force);
}

Scenario cli_model_scenario(const ModelInputArgs& a) {
  return a.scenario.empty() ? Scenario::defaults(a.sets) : Scenario::load(a.scenario, a.sets);
}

}  // namespace moerl
