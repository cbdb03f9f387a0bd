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

}  // namespace moerl
