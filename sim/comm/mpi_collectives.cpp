// mpi_collectives.cpp — see mpi_collectives.h.
#include "sim/comm/mpi_collectives.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <vector>

namespace moerl {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(msg, static_cast<size_t>(len)));
}

namespace {
// MPI counts are int: element counts and displacements of one call must stay below 2^31.
std::vector<int> displs_of(const std::vector<int64_t>& counts, std::vector<int>* icounts,
                           const char* what) {
  std::vector<int> d(counts.size());
  icounts->resize(counts.size());
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (at + counts[i] > INT_MAX)
      throw std::runtime_error(std::string(what) + ": more than 2^31 elements in one call");
    (*icounts)[i] = static_cast<int>(counts[i]);
    d[i] = static_cast<int>(at);
    at += counts[i];
  }
  return d;
}

template <class T>
void allgatherv_impl(MPI_Comm comm, int size, T* recv, const int64_t* counts, const T* send,
                     MPI_Datatype type, int rank) {
  std::vector<int> ic;
  const std::vector<int> d = displs_of(std::vector<int64_t>(counts, counts + size), &ic, "MPI_Allgatherv");
  mpi_check(MPI_Allgatherv(send, ic[rank], type, recv, ic.data(), d.data(), type, comm),
            "MPI_Allgatherv");
}

template <class T>
void allreduce_impl(MPI_Comm comm, T* data, int64_t n, MPI_Datatype type) {
  for (int64_t at = 0; at < n; at += INT_MAX / 2) {  // large buffers in pieces
    const int m = static_cast<int>(std::min<int64_t>(n - at, INT_MAX / 2));
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, data + at, m, type, MPI_SUM, comm), "MPI_Allreduce");
  }
}
}  // namespace

MpiCollectives::MpiCollectives(MPI_Comm comm) : comm_(comm) {
  mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
}

void MpiCollectives::alltoallv(float* recv, const int* recv_rows, const float* send,
                               const int* send_rows, int width) {
  std::vector<int64_t> sc(size_), rc(size_);
  for (int r = 0; r < size_; ++r) {
    sc[r] = static_cast<int64_t>(send_rows[r]) * width;
    rc[r] = static_cast<int64_t>(recv_rows[r]) * width;
  }
  std::vector<int> sci, rci;
  const std::vector<int> sd = displs_of(sc, &sci, "MPI_Alltoallv"), rd = displs_of(rc, &rci, "MPI_Alltoallv");
  mpi_check(MPI_Alltoallv(send, sci.data(), sd.data(), MPI_FLOAT, recv, rci.data(), rd.data(),
                          MPI_FLOAT, comm_),
            "MPI_Alltoallv");
}

void MpiCollectives::alltoall(int32_t* recv, const int32_t* send, int n) {
  mpi_check(MPI_Alltoall(send, n, MPI_INT32_T, recv, n, MPI_INT32_T, comm_), "MPI_Alltoall");
}

void MpiCollectives::allreduce_sum(double* data, int64_t n) { allreduce_impl(comm_, data, n, MPI_DOUBLE); }
void MpiCollectives::allreduce_sum(float* data, int64_t n) { allreduce_impl(comm_, data, n, MPI_FLOAT); }
void MpiCollectives::allreduce_sum(int64_t* data, int64_t n) { allreduce_impl(comm_, data, n, MPI_INT64_T); }

void MpiCollectives::allgatherv(double* recv, const int64_t* counts, const double* send) {
  allgatherv_impl(comm_, size_, recv, counts, send, MPI_DOUBLE, rank_);
}
void MpiCollectives::allgatherv(float* recv, const int64_t* counts, const float* send) {
  allgatherv_impl(comm_, size_, recv, counts, send, MPI_FLOAT, rank_);
}
void MpiCollectives::allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) {
  allgatherv_impl(comm_, size_, recv, counts, send, MPI_INT32_T, rank_);
}

}  // namespace moerl
