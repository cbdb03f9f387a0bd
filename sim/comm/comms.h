// comms.h — the MPI bundle of a moerl process: built once in main() after MPI_Init and passed to
// every command. Nothing below sim/ touches MPI (models/ sees models/collectives.h); nothing in
// sim/ touches MPI_COMM_WORLD except comms_init, which duplicates it.
//
// The rank grid (RankGrid): the world is split into sweep groups of --ranks-per-run ranks, one run
// each (MPI_Comm_split by group index, ranks kept in world order); inside a group, the
// expert-parallel (EP) and data-parallel (DP) communicators — for now both the whole group
// (experts sharded over all its ranks, sequences split over all of them). Only rank 0 of a group
// prints or writes files.
//
// Errors: a command that throws on any rank ends the whole job — the error is printed once and
// MPI_Abort(world, code) takes down every rank, so nothing hangs waiting for a rank that died
// (see comms_run_guarded). Where an error can be raised on some ranks only, before a collective
// phase (bad input, a file that does not open), a checked phase agrees first: every rank learns
// of the failure and throws a CollectiveError, which ends the job without MPI_Abort — printed once
// by the root, every rank exits with the same non-zero status.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <mpi.h>

#include "models/collectives.h"
#include "models/parallel.h"

namespace moerl {

struct Comms {
  MPI_Comm world = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD (MPI_COMM_NULL: no MPI)
  int rank = 0;
  int size = 1;
  bool is_root = true;
  int local_rank = 0;  // rank among the ranks on this node (one GPU each with run.backend = cuda)
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

// An error raised on every rank of the world together (by a checked phase): no MPI_Abort needed.
class CollectiveError : public ExitError {
 public:
  using ExitError::ExitError;
};

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
// the status is returned (1, or ExitError::code()). A CollectiveError is printed by the root only
// and its status returned on every rank, without MPI_Abort.
int comms_run_guarded(const Comms& c, const std::function<int()>& fn);

// The status every rank exits with: the largest over the world (idle ranks included), waited for
// without spinning. Call once, after comms_run_guarded.
int comms_agree_exit(const Comms& c, int code);

// A checked phase over the world: runs fn (which must not communicate); if it throws on any rank,
// every rank throws CollectiveError with the lowest failing rank's message and status.
void comms_checked(const Comms& c, const std::function<void()>& fn);

// The rank grid of one command (see the file comment). Collective over the world.
class RankGrid {
 public:
  // ranks_per_run = 0: one group of all ranks. Throws CollectiveError (on every rank) when the
  // world does not divide into groups of ranks_per_run.
  RankGrid(const Comms& c, int ranks_per_run);
  ~RankGrid();
  RankGrid(const RankGrid&) = delete;
  RankGrid& operator=(const RankGrid&) = delete;

  int groups() const { return groups_; }
  int group() const { return group_; }    // this rank's group
  int rank() const { return rank_; }      // in the group
  int size() const { return size_; }      // ranks in the group
  bool is_root() const { return rank_ == 0; }  // the group's printing and writing rank
  // Single-run commands (run, score, audit) run on group 0; the other groups wait idle.
  bool active() const { return group_ == 0; }

  Collectives& ep() const { return *ep_; }  // expert-parallel group
  Collectives& dp() const { return *dp_; }  // data-parallel group
  // The model's spread: experts over EP, sequences over DP; reduce_chunks > 0: deterministic mode.
  ModelParallel model_parallel(int reduce_chunks) const;
  // The EP group's communicator (for the NCCL dispatcher's bootstrap, sim/comm/nccl_collectives.h).
  MPI_Comm ep_comm() const { return ep_comm_; }

  // A checked phase over the group (as comms_checked): fn must not communicate.
  void checked(const std::function<void()>& fn) const;
  // Waits until every rank of the group gets here, sleeping rather than spinning (a rank writing a
  // base checkpoint alone must not share its cores with busy-waiting ones).
  void wait() const;
  // The root's string, on every rank of the group.
  std::string broadcast(const std::string& s) const;
  // Every rank's v[i], replaced by their largest over the group (element-wise). A run's ranks agree
  // at each step boundary on whether to stop (a signal reached one of them) and to checkpoint.
  void max_ints(std::vector<int>* v) const;

 private:
  MPI_Comm group_comm_ = MPI_COMM_NULL, ep_comm_ = MPI_COMM_NULL, dp_comm_ = MPI_COMM_NULL;
  int groups_ = 1, group_ = 0, rank_ = 0, size_ = 1;
  std::unique_ptr<Collectives> ep_, dp_;
};

}  // namespace moerl
