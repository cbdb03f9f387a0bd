// preempt.cpp — see preempt.h.
#include "sim/process/preempt.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace moerl {

namespace {

volatile sig_atomic_t g_signal = 0;  // the first stop signal received (0: none)
volatile sig_atomic_t g_sigints = 0;

void on_signal(int sig) {
  if (sig == SIGINT) g_sigints = g_sigints + 1;
  if (sig == SIGINT && g_sigints >= 2) {  // Ctrl-C twice: the user wants out now
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  if (!g_signal) g_signal = sig;
}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGPIPE);
  return set;
}

// The environment variable that carries a stop request across main()'s re-exec.
constexpr char kStopEnv[] = "MOERL_STOP_SIGNAL";

void install() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls (file writes, MPI's polls) go on; the flag is read between steps
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);   // the terminal closed (an ssh session dropped)
  sigaction(SIGPIPE, &sa, nullptr);  // the reader of stdout left (`moerl sweep ... | head`): the
                                     // write fails with EPIPE, the run stops at its step boundary
}
}  // namespace

void preempt_block_signals() {
  install();
  const sigset_t set = stop_signals();
  sigprocmask(SIG_BLOCK, &set, nullptr);
  if (const char* s = getenv(kStopEnv)) {  // a request received before the re-exec
    const int sig = atoi(s);
    if (sig != 0 && !g_signal) g_signal = sig;
    unsetenv(kStopEnv);
  }
}

void preempt_before_exec() {
  if (!g_signal) return;
  char buf[16];
  snprintf(buf, sizeof buf, "%d", static_cast<int>(g_signal));
  setenv(kStopEnv, buf, 1);
}

void preempt_install_handlers() {
  install();  // again: MPI_Init may have set its own
  const sigset_t set = stop_signals();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);  // a signal held since start-up arrives now, at the handler
}

void preempt_uninstall_handlers() {
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
}

bool preempt_requested() { return g_signal != 0; }

const char* preempt_signal_name() {
  switch (g_signal) {
    case 0: return "";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    default: return "a stop request";
  }
}

void preempt_request() {
  if (!g_signal) g_signal = -1;
}

}  // namespace moerl
