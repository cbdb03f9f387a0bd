// mpi_collectives.h — models/collectives.h over an MPI communicator. Failures of an MPI call
// become std::runtime_error naming the call (the communicator returns error codes; see comms.cpp).
#pragma once

#include <mpi.h>

#include "models/collectives.h"

namespace moerl {

class MpiCollectives final : public Collectives {
 public:
  explicit MpiCollectives(MPI_Comm comm);  // the communicator is borrowed, not freed
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm comm() const { return comm_; }

  void alltoallv(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                 int width) override;
  void alltoall(int32_t* recv, const int32_t* send, int n) override;
  void allreduce_sum(double* data, int64_t n) override;
  void allreduce_sum(float* data, int64_t n) override;
  void allreduce_sum(int64_t* data, int64_t n) override;
  void allgatherv(double* recv, const int64_t* counts, const double* send) override;
  void allgatherv(float* recv, const int64_t* counts, const float* send) override;
  void allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

// Throws std::runtime_error("<what>: <MPI error string>") unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* what);

}  // namespace moerl
