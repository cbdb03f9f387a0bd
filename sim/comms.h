// comms.h — the MPI bundle of a moerl process: built once in main() after MPI_Init and passed to
// every command. Nothing below sim/ touches MPI; nothing in sim/ touches MPI_COMM_WORLD except
// comms_init, which duplicates it.
//
// Only the root rank prints. Errors: a command that throws on any rank ends the whole job — the
// error is printed once and MPI_Abort(world, code) takes down every rank, so nothing hangs waiting
// for a rank that died (see comms_run_guarded).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include <mpi.h>

namespace moerl {

struct Comms {
  MPI_Comm world = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD (MPI_COMM_NULL: no MPI)
  int rank = 0;
  int size = 1;
  bool is_root = true;
};

// An error that carries the process exit status: 2 for usage errors (bad options, unknown command,
// not yet available), 1 for everything else.
class ExitError : public std::runtime_error {
 public:
  ExitError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};
inline ExitError usage_error(const std::string& what) { return ExitError(2, what); }

// MPI_Init (thread level FUNNELED: only the main thread calls MPI) and the world duplicate.
Comms comms_init(int* argc, char*** argv);
// A single-process bundle without MPI, for running commands in-process (tests).
Comms comms_local();
// MPI_Finalize (no-op for comms_local bundles).
void comms_finalize(Comms* c);

// Runs fn and returns its exit status. If fn throws: the root prints "moerl: error: <what>" at
// once; another rank waits briefly first (if the error is collective, the root's abort ends it
// before it prints, so the message appears once; if it is local to that rank, it is printed after
// the pause). Then with more than one rank MPI_Abort(world, code) ends every rank; with one rank
// the status is returned (1, or ExitError::code()).
int comms_run_guarded(const Comms& c, const std::function<int()>& fn);

}  // namespace moerl
