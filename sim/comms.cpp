// comms.cpp — MPI start-up, shutdown and the one-message-then-abort error path.
#include "sim/comms.h"

#include <chrono>
#include <cstdio>
#include <thread>

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
  } catch (const ExitError& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    code = 1;
    message = e.what();
  }
  if (c.is_root) {
    std::fprintf(stderr, "moerl: error: %s\n", message.c_str());
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fprintf(stderr, "moerl: error on rank %d: %s\n", c.rank, message.c_str());
  }
  std::fflush(stderr);
  if (c.world != MPI_COMM_NULL && c.size > 1) MPI_Abort(c.world, code);
  return code;
}

}  // namespace moerl
