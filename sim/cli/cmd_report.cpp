// cmd_report.cpp — `moerl report SWEEP_DIR|RUN.h5... [analysis options]`: the analysis report
// (analysis/, Python) from any directory: runs `<python> -m analysis ARGS...`. The interpreter is
// $MOERL_PYTHON, else the first of python3 (PATH) and /usr/bin/python3 that imports numpy, scipy,
// h5py and matplotlib. The package is, in this order: under $MOERL_ANALYSIS_DIR; beside the
// binary — analysis/ in a directory above it (a build tree: build/sim/moerl → analysis/) or
// share/moerl/analysis of an install prefix (bin/moerl → share/moerl/analysis); else the Python
// package installed with `pip install -e .` (pyproject.toml). Never a path fixed at build time:
// a moved binary finds its own tree's package or says it found none. The command says which one
// it uses (stderr). Exit status is the report's. A sweep directory's index is first assembled from
// its plan and run files (sim/sweep/sweep_assemble.h), so the pieces of a job array report whole;
// a directory it cannot write (read-only) gets its index assembled in memory and passed to the
// report in a temporary file (MOERL_SWEEP_INDEX_FOR), with a one-line warning.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sim/cli/cli.h"
#include "sim/io/text_io.h"
#include "sim/process/preempt.h"
#include "sim/sweep/sweep_assemble.h"
#include "sim/sweep/sweep_index.h"

extern char** environ;

namespace moerl {

namespace {
// spawn_wait's status when a stop signal reached moerl while the child ran (the child was stopped).
constexpr int kSpawnStopped = -2;

// Runs argv with envp; returns the exit status (-1: could not start; 128+N: signal N;
// kSpawnStopped: a stop signal reached moerl, and the child was ended). The child runs in its own
// process group: a Ctrl-C at the terminal reaches moerl only, which ends the child with SIGTERM
// (Python then leaves without a traceback) and says so once (sim/process/preempt.h).
int spawn_wait(const std::vector<std::string>& args, char** envp, bool quiet) {
  if (preempt_requested()) return kSpawnStopped;
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
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::fflush(stdout);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return -1;
  int status = 0;
  bool stopped = false;
  auto asked = std::chrono::steady_clock::now();
  while (true) {  // polled: the stop handlers restart waitpid (SA_RESTART), so it would not return
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) return -1;
    if (preempt_requested() && !stopped) {
      stopped = true;
      asked = std::chrono::steady_clock::now();
      kill(pid, SIGTERM);
    } else if (stopped && std::chrono::steady_clock::now() - asked > std::chrono::seconds(5)) {
      kill(pid, SIGKILL);  // a child that ignores SIGTERM
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (stopped || preempt_requested()) return kSpawnStopped;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// What a stop signal during the report says (moerl then exits with kExitPreempted).
int report_stopped(const char* during) {
  std::fprintf(stderr, "moerl report: stopped by %s %s: the report is not finished (exit status %d); run it again\n",
               preempt_signal_name()[0] ? preempt_signal_name() : "a stop signal", during, kExitPreempted);
  return kExitPreempted;
}

bool has_package(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "analysis" / "__main__.py", ec);
}

// The directory to put on PYTHONPATH and how it was found; "" when none was (then the installed
// package is tried).
std::pair<std::string, std::string> analysis_root() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("MOERL_ANALYSIS_DIR"); d && *d) {
    if (!has_package(d)) throw ExitError(1, std::string("report: MOERL_ANALYSIS_DIR=") + d + " holds no analysis/");
    return {d, "MOERL_ANALYSIS_DIR"};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    int up = 0;
    for (fs::path d = exe.parent_path(); !d.empty() && up < 4; d = d.parent_path(), ++up) {
      if (has_package(d)) return {d.string(), "beside the binary " + exe.string()};
      if (has_package(d / "share" / "moerl")) return {(d / "share" / "moerl").string(), "installed with the binary " + exe.string()};
      if (d == d.root_path()) break;
    }
  }
  return {"", ""};
}
// The report's environment: this one without PYTHONPATH and the prefix variables, then the found
// package first on PYTHONPATH (then the caller's), and the prefix that makes the report's refusals
// read like every moerl error (analysis/__main__.py).
std::vector<std::string> report_environment(const std::string& root) {
  const char* old = std::getenv("PYTHONPATH");
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0 && std::strncmp(*e, "MOERL_ERROR_PREFIX=", 19) != 0 &&
        std::strncmp(*e, "MOERL_PROG=", 11) != 0)
      env_store.emplace_back(*e);
  std::string pythonpath = "PYTHONPATH=" + root;
  if (old && *old) {
    if (!root.empty()) pythonpath += ':';
    pythonpath += old;
  }
  if (!root.empty() || (old && *old)) env_store.push_back(pythonpath);
  env_store.push_back("MOERL_ERROR_PREFIX=moerl: error: report: ");
  env_store.push_back("MOERL_PROG=moerl report");
  return env_store;
}
// The indexes of sweep directories that could not be saved, each in a temporary index.json that
// the report reads instead of the directory's (removed when the report ends). env: one
// "<directory, real path>\t<temporary index>" line each.
struct UnsavedIndexes {
  std::vector<std::string> files;
  std::string env;
  void add(const std::string& dir, const SweepIndexView& view) {
    std::string tmp = (std::filesystem::temp_directory_path() / "moerl-index-XXXXXX.json").string();
    const int fd = mkstemps(tmp.data(), 5);
    if (fd < 0)
      throw ExitError(1, "report: " + dir + ": " + view.unsaved + ", and no temporary index can be written (" +
                             std::strerror(errno) + ")");
    close(fd);
    files.push_back(tmp);
    text_write_atomic(tmp, sweep_index_json(view.index));
    std::error_code ec;
    env += std::filesystem::weakly_canonical(dir, ec).string() + "\t" + tmp + "\n";
    std::fprintf(stderr, "moerl: warning: report: %s: its index is not saved (%s); the report reads it from memory\n",
                 dir.c_str(), view.unsaved.c_str());
  }
  ~UnsavedIndexes() {
    std::error_code ec;
    for (const std::string& f : files) std::filesystem::remove(f, ec);
  }
};
}  // namespace

constexpr const char* kReportUsage = "SWEEP_DIR | RUN.h5 [RUN.h5 ...] [--group-by KEY ...] [--out DIR] ...";

int cmd_report(const Comms& comms, const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h") && comms.is_root) {
    std::printf("usage: moerl report %s\n"
                "  runs the analysis report (python -m analysis; its --help lists every option).\n"
                "  MOERL_PYTHON: the interpreter (default python3); MOERL_ANALYSIS_DIR: the directory that holds\n"
                "  analysis/ (default: the one beside this binary, else the pip-installed package)\n", kReportUsage);
  }
  if (!comms.is_root) return 0;
  if (args.empty())
    throw usage_error(cli_missing_positional("report", "SWEEP_DIR | RUN.h5", kReportUsage));
  // Every sweep directory among the arguments gets its index assembled from its plan and run files
  // first (array tasks write none; sim/sweep/sweep_assemble.h). Only directories that hold a plan
  // are touched, so options and their values pass through unharmed.
  // A directory that cannot be written keeps its plan: its index, assembled in memory, goes to the
  // report through a temporary file named in MOERL_SWEEP_INDEX_FOR (analysis/runs.py).
  UnsavedIndexes unsaved;
  for (const std::string& a : args) {
    try {
      const SweepIndexView view = sweep_index_refresh(a);
      if (!view.unsaved.empty()) unsaved.add(a, view);
    } catch (const std::exception& e) {
      throw ExitError(1, "report: " + a + ": cannot assemble its index: " + e.what());
    }
  }
  const auto [root, how] = analysis_root();
  std::vector<std::string> env_store = report_environment(root);
  if (!unsaved.env.empty()) env_store.push_back("MOERL_SWEEP_INDEX_FOR=" + unsaved.env);
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* py = std::getenv("MOERL_PYTHON");
  const std::vector<std::string> candidates =
      py && *py ? std::vector<std::string>{py} : std::vector<std::string>{"python3", "/usr/bin/python3"};
  std::string python;
  for (const std::string& c : candidates) {
    const int rc = spawn_wait({c, "-c", "import numpy, scipy, h5py, matplotlib"}, envp.data(), true);
    if (rc == kSpawnStopped) return report_stopped("while it looked for a Python");
    if (rc == 0) {
      python = c;
      break;
    }
  }
  if (python.empty())
    throw ExitError(1, "report: no Python with numpy, scipy, h5py and matplotlib (tried " +
                           cli_join(candidates, ", ") + "); set MOERL_PYTHON to one");
  if (root.empty()) {
    const int found = spawn_wait({python, "-c", "import analysis.report"}, envp.data(), true);
    if (found == kSpawnStopped) return report_stopped("while it looked for the analysis package");
    if (found != 0)
      throw ExitError(1, "report: no analysis package: none beside this binary (analysis/ or share/moerl/analysis "
                         "above it) and none installed for " + python +
                         " (pip install -e . in the checkout, or set MOERL_ANALYSIS_DIR to the directory that "
                         "holds analysis/)");
    std::fprintf(stderr, "moerl report: analysis package: the one installed for %s\n", python.c_str());
  } else {
    std::fprintf(stderr, "moerl report: analysis package: %s/analysis (%s)\n", root.c_str(), how.c_str());
  }
  std::vector<std::string> argv{python, "-m", "analysis"};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = spawn_wait(argv, envp.data(), false);
  if (rc == kSpawnStopped) return report_stopped("while the analysis ran");
  if (rc < 0) throw ExitError(1, "report: cannot run " + python);
  return rc;
}

}  // namespace moerl
