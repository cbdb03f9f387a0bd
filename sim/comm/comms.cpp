// comms.cpp — MPI start-up and shutdown, the rank grid, checked phases and the
// one-message-then-abort error path.
#include "sim/comm/comms.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <new>
#include <thread>

#include "sim/comm/mpi_collectives.h"
#include "sim/io/text_io.h"
#include "sim/process/preempt.h"

namespace moerl {

Comms comms_init(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  Comms c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c.world);
  // Errors come back as codes (and become exceptions) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(c.world, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c.world, &c.rank);
  MPI_Comm_size(c.world, &c.size);
  c.is_root = c.rank == 0;
  // the rank's index among the ranks on its node: which GPU it takes (run.backend = cuda)
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(c.world, MPI_COMM_TYPE_SHARED, c.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &c.local_rank);
  MPI_Comm_free(&node);
  return c;
}

Comms comms_local() { return Comms{}; }

void comms_finalize(Comms* c) {
  if (c->world == MPI_COMM_NULL) return;
  MPI_Comm_free(&c->world);
  MPI_Finalize();
}

int comms_run_guarded(const Comms& c, const std::function<int()>& fn) {
  int code = 0;
  std::string message;
  try {
    return fn();
  } catch (const CollectiveError& e) {  // every rank has it: one message, no abort
    if (c.is_root) {
      std::fprintf(stderr, "moerl: error: %s\n", text_visible(e.what()).c_str());
      std::fflush(stderr);
    }
    return e.code();
  } catch (const ExitError& e) {
    code = e.code();
    message = e.what();
  } catch (const std::bad_alloc&) {  // a size no check caught: say what it is, not "std::bad_alloc"
    code = 1;
    message = "out of memory (std::bad_alloc): a size the scenario or the options ask for (a batch, a prompt "
              "count, the model) needs more memory than this process can have; moerl sweep GRID --dry-run "
              "checks the sizes it knows";
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  // The job ends with an error: the SIGTERM of MPI_Abort must end this rank at once, not ask it
  // for a clean stop at the next step (sim/process/preempt.h).
  preempt_uninstall_handlers();
  if (c.is_root) {
    std::fprintf(stderr, "moerl: error: %s\n", text_visible(message).c_str());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fprintf(stderr, "moerl: error on rank %d: %s\n", c.rank, text_visible(message).c_str());
  }
  std::fflush(stderr);
  if (c.world != MPI_COMM_NULL && c.size > 1) MPI_Abort(c.world, code);
  return code;
}

namespace {

// Completes a non-blocking collective, sleeping between tests instead of spinning.
void wait_sleeping(MPI_Request* req, const char* what) {
  int done = 0;
  while (true) {
    mpi_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The checked phase on one communicator (see comms_checked).
void checked_on(MPI_Comm comm, const std::function<void()>& fn) {
  int size = 1;
  if (comm != MPI_COMM_NULL) MPI_Comm_size(comm, &size);
  if (size == 1) {  // nobody to tell: the error keeps its type
    fn();
    return;
  }
  int code = 0;
  std::string message;
  try {
    fn();
  } catch (const ExitError& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  int me = 0;
  MPI_Comm_rank(comm, &me);
  int first = code != 0 ? me : INT_MAX;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm), "checked phase");
  if (first == INT_MAX) return;
  int head[2] = {code, static_cast<int>(message.size())};
  mpi_check(MPI_Bcast(head, 2, MPI_INT, first, comm), "checked phase");
  std::string text(static_cast<size_t>(head[1]), '\0');
  if (me == first) text = message;
  mpi_check(MPI_Bcast(text.data(), head[1], MPI_CHAR, first, comm), "checked phase");
  throw CollectiveError(head[0], text);
}

}  // namespace

int comms_agree_exit(const Comms& c, int code) {
  if (c.world == MPI_COMM_NULL || c.size == 1) return code;
  int all = code;
  MPI_Request req;
  if (MPI_Iallreduce(&code, &all, 1, MPI_INT, MPI_MAX, c.world, &req) != MPI_SUCCESS) return code;
  try {
    wait_sleeping(&req, "exit status");
  } catch (const std::exception&) {
    return code;
  }
  return all;
}

void comms_checked(const Comms& c, const std::function<void()>& fn) { checked_on(c.world, fn); }

RankGrid::RankGrid(const Comms& c, int ranks_per_run) {
  const int n = ranks_per_run > 0 ? ranks_per_run : c.size;
  comms_checked(c, [&] {
    if (ranks_per_run < 0 || c.size % n != 0)
      throw usage_error("--ranks-per-run " + std::to_string(ranks_per_run) + ": the " +
                        std::to_string(c.size) + " rank(s) do not divide into groups of " +
                        std::to_string(n) + " (use a divisor of the world size)");
  });
  if (c.world == MPI_COMM_NULL) {
    ep_ = std::make_unique<LocalCollectives>();
    dp_ = std::make_unique<LocalCollectives>();
    return;
  }
  groups_ = c.size / n;
  group_ = c.rank / n;
  mpi_check(MPI_Comm_split(c.world, group_, c.rank, &group_comm_), "MPI_Comm_split (group)");
  MPI_Comm_set_errhandler(group_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(group_comm_, &rank_);
  MPI_Comm_size(group_comm_, &size_);
  // EP and DP: the whole group, each its own communicator (their traffic never mixes).
  mpi_check(MPI_Comm_split(group_comm_, 0, rank_, &ep_comm_), "MPI_Comm_split (ep)");
  mpi_check(MPI_Comm_split(group_comm_, 0, rank_, &dp_comm_), "MPI_Comm_split (dp)");
  MPI_Comm_set_errhandler(ep_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(dp_comm_, MPI_ERRORS_RETURN);
  ep_ = std::make_unique<MpiCollectives>(ep_comm_);
  dp_ = std::make_unique<MpiCollectives>(dp_comm_);
}

RankGrid::~RankGrid() {
  ep_.reset();
  dp_.reset();
  for (MPI_Comm* comm : {&ep_comm_, &dp_comm_, &group_comm_})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

ModelParallel RankGrid::model_parallel(int reduce_chunks) const {
  ModelParallel p;
  p.ep = ep_.get();
  p.dp = dp_.get();
  p.reduce_chunks = reduce_chunks;
  return p;
}

void RankGrid::checked(const std::function<void()>& fn) const { checked_on(group_comm_, fn); }

void RankGrid::wait() const {
  if (group_comm_ == MPI_COMM_NULL || size_ == 1) return;
  MPI_Request req;
  mpi_check(MPI_Ibarrier(group_comm_, &req), "MPI_Ibarrier");
  wait_sleeping(&req, "MPI_Ibarrier");
}

std::string RankGrid::broadcast(const std::string& s) const {
  if (group_comm_ == MPI_COMM_NULL || size_ == 1) return s;
  int len = static_cast<int>(s.size());
  mpi_check(MPI_Bcast(&len, 1, MPI_INT, 0, group_comm_), "MPI_Bcast");
  std::string out(static_cast<size_t>(len), '\0');
  if (rank_ == 0) out = s;
  mpi_check(MPI_Bcast(out.data(), len, MPI_CHAR, 0, group_comm_), "MPI_Bcast");
  return out;
}

void RankGrid::max_ints(std::vector<int>* v) const {
  if (group_comm_ == MPI_COMM_NULL || size_ == 1 || v->empty()) return;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, v->data(), static_cast<int>(v->size()), MPI_INT, MPI_MAX, group_comm_),
            "MPI_Allreduce");
}

}  // namespace moerl
