// cli.h — the `moerl` command line: the command table (name → function) and the option parsing
// every command shares. Adding a command = one cmd_<name>.cpp with its function, one declaration
// below and one row in cli_commands() (sim/cli/cli.cpp); the compiler checks the rest.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "sim/comm/comms.h"

namespace moerl {

// A command gets the arguments after its name and returns the process exit status; errors are
// thrown (ExitError for usage errors) and reported by comms_run_guarded.
using CommandFn = int (*)(const Comms& comms, const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;  // one line for `moerl --help`
  CommandFn run;
};

int cmd_run(const Comms& comms, const std::vector<std::string>& args);
int cmd_sweep(const Comms& comms, const std::vector<std::string>& args);
int cmd_sft(const Comms& comms, const std::vector<std::string>& args);
int cmd_score(const Comms& comms, const std::vector<std::string>& args);
int cmd_audit(const Comms& comms, const std::vector<std::string>& args);
int cmd_bench(const Comms& comms, const std::vector<std::string>& args);
int cmd_inspect(const Comms& comms, const std::vector<std::string>& args);
int cmd_report(const Comms& comms, const std::vector<std::string>& args);

const std::vector<Command>& cli_commands();

// `moerl <command> [options]`: dispatches argv (argv[0] is the program) to a command.
int cli_main(const Comms& comms, int argc, char** argv);

// Parses a command's arguments with Boost.Program_options: `desc` gets --help added; unknown
// options, extra positionals, missing required options and bad values become usage errors
// ("moerl <command>: ..."). Returns false when --help was asked (the help has been printed on the
// root rank) — the command then returns 0.
bool cli_parse(const Comms& comms, const std::string& command, const std::string& usage,
               boost::program_options::options_description desc,
               const boost::program_options::positional_options_description& positional,
               const std::vector<std::string>& args, boost::program_options::variables_map* vm);

// "" when everything printed on standard output was written, else the error that says it was not
// ("inspect: its output could not be written to standard output (No space left on device): ...").
// Flushes stdout. cli_main checks it after every command: a result that could not be written is a
// failed command (exit 1), never exit 0 with an empty file. A reader that left (EPIPE) is a stop.
std::string cli_stdout_error(const std::string& command);

// "run: SCENARIO is missing (usage: moerl run SCENARIO …)": the usage error of a command called
// without its positional, in the usage line's words.
std::string cli_missing_positional(const std::string& command, const std::string& word, const std::string& usage);

// "moerl 0.1: SIMD target avx512 (available: avx512, avx2, scalar), BLAS OpenBLAS SkylakeX" —
// what `moerl --version` prints, and the first line of `moerl bench`.
std::string cli_version_line();
std::string cli_join(const std::vector<std::string>& v, const std::string& sep);

// The base policies' cache of run and sweep: one default, so a run and a sweep started in the same
// directory share their base policies instead of training them twice.
inline constexpr const char* kCliCacheDefault = "results/cache";
inline constexpr const char* kCliCacheDoc =
    "directory of cached base checkpoints, shared by runs and sweeps (default results/cache, under the "
    "current directory; on a cluster a directory every node sees)";

// The repeatable `--set section.key=value` option every scenario-driven command takes.
void cli_add_set_option(boost::program_options::options_description* desc,
                        std::vector<std::string>* overrides);

// What run, sft and sweep read first: one positional file (the scenario, or the grid) and the
// --set overrides of its keys.
struct ScenarioArgs {
  std::string path;
  std::vector<std::string> sets;
  boost::program_options::positional_options_description positional;
};
// Adds the positional option `name` (described by `doc`) and --set; the positional is required.
void cli_add_scenario_args(boost::program_options::options_description* desc, ScenarioArgs* a,
                           const char* name, const char* doc);

class Scenario;

// --ranks-per-run of run, score and audit: the ranks of the one group that works, >= 1 like
// sweep's; not given: all ranks (stored as 0, RankGrid's "all"), where a sweep's default is 1 (one
// run per rank). The check: "run: --ranks-per-run 0: must be >= 1 (default: all ranks)".
void cli_add_ranks_per_run(boost::program_options::options_description* desc, int* ranks);
void cli_check_ranks_per_run(const std::string& command, const boost::program_options::variables_map& vm, int ranks);

// What score and audit read: a checkpoint, sequences (a tokens file), the scenario whose profiles
// and sections apply (--scenario FILE, else the defaults, with --set), the output, the forward
// batch and the rank group.
struct ModelInputArgs {
  std::string checkpoint, tokens, scenario, out;
  int batch = 256, ranks_per_run = 0;
  bool force = false;  // --force: overwrite an existing --out
  std::vector<std::string> sets;
};
// Adds --checkpoint (required), --tokens, --scenario, --out, --force, --batch, --ranks-per-run and --set;
// the docs of --tokens, --scenario and --out are the command's. tokens_required: --tokens is too.
void cli_add_model_input_args(boost::program_options::options_description* desc, ModelInputArgs* a,
                              bool tokens_required, const char* tokens_doc, const char* scenario_doc,
                              const char* out_doc);
// The usage errors of those options ("score: --batch 0: must be >= 1").
void cli_check_model_input_args(const std::string& command, const boost::program_options::variables_map& vm,
                                const ModelInputArgs& a);
// Before any work: --out is a file to write and none of the inputs.
void cli_check_model_output(const ModelInputArgs& a);
// The scenario of --scenario with --set, or the defaults with --set.
Scenario cli_model_scenario(const ModelInputArgs& a);

}  // namespace moerl
