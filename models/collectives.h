// collectives.h — the communication a model needs, as an interface: the model code below sim/
// never sees MPI. sim/comm/mpi_collectives.cpp implements it over an MPI communicator; the
// single-process implementation here is a group of one, where every collective is a copy.
//
// All calls are collective over the group: every rank calls them in the same order with matching
// sizes. Buffers are laid out rank-major ("rank order"): what goes to / comes from rank r is the
// r-th block, blocks back to back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moerl {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Rows of `width` floats: send_rows[r] rows go to rank r, recv_rows[r] rows arrive from rank r.
  // The caller knows recv_rows beforehand (exchange counts first, with alltoall below).
  virtual void alltoallv(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                         int width) = 0;
  // n ints to every rank: send[r·n, (r+1)·n) go to rank r; recv[r·n, (r+1)·n) come from rank r.
  virtual void alltoall(int32_t* recv, const int32_t* send, int n) = 0;

  // Element-wise sums, result on every rank. Integer sums are exact; floating-point sums follow
  // the implementation's order (see models/parallel.h for the canonical, rank-count-free way).
  virtual void allreduce_sum(double* data, int64_t n) = 0;
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  virtual void allreduce_sum(int64_t* data, int64_t n) = 0;

  // Concatenation of every rank's block in rank order, on every rank: recv has Σ counts elements.
  virtual void allgatherv(double* recv, const int64_t* counts, const double* send) = 0;
  virtual void allgatherv(float* recv, const int64_t* counts, const float* send) = 0;
  virtual void allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) = 0;
};

// A group of one process: nothing to communicate.
class LocalCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void alltoallv(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                 int width) override;
  void alltoall(int32_t* recv, const int32_t* send, int n) override;
  void allreduce_sum(double*, int64_t) override {}
  void allreduce_sum(float*, int64_t) override {}
  void allreduce_sum(int64_t*, int64_t) override {}
  void allgatherv(double* recv, const int64_t* counts, const double* send) override;
  void allgatherv(float* recv, const int64_t* counts, const float* send) override;
  void allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) override;
};

// Every rank's count of `mine` (one int64 each), in rank order.
std::vector<int64_t> collectives_gather_counts(Collectives& c, int64_t mine);

// Concatenates every rank's vector in rank order (sizes may differ).
template <class T>
std::vector<T> collectives_allgather(Collectives& c, const std::vector<T>& mine) {
  const std::vector<int64_t> counts = collectives_gather_counts(c, static_cast<int64_t>(mine.size()));
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  std::vector<T> all(static_cast<size_t>(total));
  c.allgatherv(all.data(), counts.data(), mine.data());
  return all;
}

}  // namespace moerl
