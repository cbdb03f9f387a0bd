// cmd_report.cpp — `moerl report SWEEP_DIR|RUN.h5... [analysis options]`: the analysis report
// (analysis/, Python) from any directory: runs `<python> -m analysis ARGS...` with the analysis
// package on PYTHONPATH. The interpreter is $MOERL_PYTHON, else the first of python3 (PATH) and
// /usr/bin/python3 that imports numpy, h5py and matplotlib; the package is found under $MOERL_ANALYSIS_DIR, else the source tree
// this binary was built from. Exit status is the report's.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/cli/cli.h"

extern char** environ;

namespace moerl {

namespace {
// Runs argv with envp; returns the exit status (-1: could not start; 128+N: signal N).
int spawn_wait(const std::vector<std::string>& args, char** envp, bool quiet) {
  std::vector<std::string> store = args;
  std::vector<char*> argv;
  for (std::string& a : store) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string analysis_root() {
  if (const char* d = std::getenv("MOERL_ANALYSIS_DIR"); d && *d) return d;
  return MOERL_SOURCE_DIR;
}
}  // namespace

int cmd_report(const Comms& comms, const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h") && comms.is_root) {
    std::printf("usage: moerl report SWEEP_DIR | RUN.h5 [RUN.h5 ...] [--group-by KEY ...] [--out DIR] ...\n"
                "  runs the analysis report (python -m analysis; its --help lists every option).\n"
                "  MOERL_PYTHON: the interpreter (default python3); MOERL_ANALYSIS_DIR: the directory that holds\n"
                "  analysis/ (default %s)\n", MOERL_SOURCE_DIR);
  }
  if (!comms.is_root) return 0;
  if (args.empty()) throw usage_error("report: no sweep directory or run file given (see moerl report --help)");
  const std::string root = analysis_root();
  if (!std::filesystem::exists(std::filesystem::path(root) / "analysis" / "__main__.py"))
    throw ExitError(1, "report: no analysis package under " + root +
                           " (set MOERL_ANALYSIS_DIR to the directory that holds analysis/)");
  const char* old = std::getenv("PYTHONPATH");
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0 && std::strncmp(*e, "MOERL_ERROR_PREFIX=", 19) != 0 &&
        std::strncmp(*e, "MOERL_PROG=", 11) != 0)
      env_store.emplace_back(*e);
  env_store.push_back("PYTHONPATH=" + root + (old && *old ? ":" + std::string(old) : ""));
  // the report's refusals read like every moerl error (analysis/__main__.py)
  env_store.push_back("MOERL_ERROR_PREFIX=moerl: error: report: ");
  env_store.push_back("MOERL_PROG=moerl report");
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* py = std::getenv("MOERL_PYTHON");
  const std::vector<std::string> candidates =
      py && *py ? std::vector<std::string>{py} : std::vector<std::string>{"python3", "/usr/bin/python3"};
  std::string python;
  for (const std::string& c : candidates)
    if (spawn_wait({c, "-c", "import numpy, h5py, matplotlib"}, envp.data(), true) == 0) {
      python = c;
      break;
    }
  if (python.empty())
    throw ExitError(1, "report: no Python with numpy, h5py and matplotlib (tried " + cli_join(candidates, ", ") +
                           "); set MOERL_PYTHON to one");
  std::vector<std::string> argv{python, "-m", "analysis"};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = spawn_wait(argv, envp.data(), false);
  if (rc < 0) throw ExitError(1, "report: cannot run " + python);
  return rc;
}

}  // namespace moerl
