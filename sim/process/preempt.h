// preempt.h — clean preemption. SIGTERM, SIGINT and SIGUSR1 (what SLURM, a job's time limit,
// `scancel`, `scontrol requeue` and Ctrl-C send), SIGHUP (a closed terminal) and SIGPIPE (a reader
// of the output that left: `moerl sweep ... | head`) do not end the process: they set a flag, and a run
// checks it at every step boundary (sim/jobs/run.cpp), where the ranks of the run agree on it (one of
// them signalled is enough), write the checkpoint and the results with status "preempted", and
// return. A sweep then starts no further run and leaves with status kExitPreempted;
// `--resume` (or the next array task on the same run) continues bit-identically.
//
// What it is not: a way to stop in the middle of a step (the current step always finishes), nor a
// handler for SIGKILL (a killed run resumes from its last checkpoint instead). A second SIGINT ends
// the process at once, as a user pressing Ctrl-C twice expects.
#pragma once

#include <stdexcept>

namespace moerl {

// The exit status of a command stopped by a signal with everything written and resumable (75 is
// sysexits' EX_TEMPFAIL: "try again later"). Not a failure: job scripts requeue on it.
inline constexpr int kExitPreempted = 75;

// main()'s first instruction: the handlers are installed (process-wide: a thread that libraries
// started before main, OpenBLAS's pool, may be the one a signal reaches) and the stop signals
// held pending in the main thread (the mask survives the re-exec, and MPI's threads inherit
// it) until preempt_install_handlers takes them again after MPI_Init: a stop signal at any moment
// of a command, start-up included, is a stop request, never a kill (143). A request that came
// before a re-exec is passed on to the new image (preempt_before_exec).
void preempt_block_signals();
// Just before main() re-executes itself: a stop request already received survives the exec.
void preempt_before_exec();
// Installs the handlers and delivers what was held (main(), once, after MPI_Init, so they are ours).
void preempt_install_handlers();
// Gives the signals their default action back (a command that ends with an error: MPI_Abort's
// SIGTERM must end the rank, as it always did).
void preempt_uninstall_handlers();
// Whether a stop signal reached this process (async-signal-safe flag read).
bool preempt_requested();
// The signal's name ("SIGTERM"), or "" when none arrived.
const char* preempt_signal_name();
// What a command stopped by a signal before it wrote anything says (the base policy's training
// stops at its next step: a base is never written half-trained). Thrown on the ranks that train;
// the run (sim/run.cpp) turns it into the status "preempted", `moerl sft` into exit kExitPreempted.
class Preempted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Asks for a stop as a signal would (tests; a sweep's rank 0 told that another group was preempted).
void preempt_request();

}  // namespace moerl
