// nccl_collectives.h — models/collectives.h with the expert-parallel all-to-alls on NCCL (one GPU per
// rank), for the CUDA backend on a GPU cluster. Built only where NCCL is found (MOERL_HAVE_NCCL).
//
// Bootstrap: over the MPI communicator of the group, every rank uses the GPU its thread is bound to
// (cuda::select_device, which backend_select runs: the rank's index among all ranks of its node,
// modulo the node's device count — construct this after it, on the same thread), rank 0 creates the
// NCCL id and broadcasts it with MPI, and every rank joins with ncclCommInitRank. Two ranks of the
// group on one GPU would make ncclCommInitRank fail ("duplicate GPU"): backend_ep_collectives
// (sim/backend_select.h) checks that first and does not build one then.
//
// alltoallv / alltoall take and return HOST pointers like every collective of this interface: the
// send buffer is staged to the device, one grouped ncclSend/ncclRecv per peer moves it
// (ncclGroupStart/End), and the result is copied back; the stream is synchronised before return.
// The sums and concatenations (allreduce_sum, allgatherv) are delegated to `host` — the MPI
// collectives of the same group — so reductions keep the canonical order of the CPU path.
// Errors of NCCL or CUDA calls throw std::runtime_error naming the call and the library's message.
#pragma once

#if MOERL_HAVE_NCCL

#include <mpi.h>

#include <memory>

#include "models/collectives.h"

namespace moerl {

class NcclCollectives final : public Collectives {
 public:
  // comm and host are borrowed; host must be a collective over the same group of ranks, in the
  // same rank order (e.g. MpiCollectives(comm)). Collective over comm.
  NcclCollectives(MPI_Comm comm, Collectives* host);
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }  // the CUDA device this rank uses

  void alltoallv(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                 int width) override;
  void alltoall(int32_t* recv, const int32_t* send, int n) override;
  void allreduce_sum(double* data, int64_t n) override { host_->allreduce_sum(data, n); }
  void allreduce_sum(float* data, int64_t n) override { host_->allreduce_sum(data, n); }
  void allreduce_sum(int64_t* data, int64_t n) override { host_->allreduce_sum(data, n); }
  void allgatherv(double* recv, const int64_t* counts, const double* send) override {
    host_->allgatherv(recv, counts, send);
  }
  void allgatherv(float* recv, const int64_t* counts, const float* send) override {
    host_->allgatherv(recv, counts, send);
  }
  void allgatherv(int32_t* recv, const int64_t* counts, const int32_t* send) override {
    host_->allgatherv(recv, counts, send);
  }

 private:
  struct Impl;  // NCCL communicator, stream, device staging buffers (nccl.h stays in the .cpp)
  std::unique_ptr<Impl> impl_;
  Collectives* host_;
  int rank_ = 0, size_ = 1, device_ = 0;
};

std::unique_ptr<Collectives> make_nccl_collectives(MPI_Comm comm, Collectives* host);

}  // namespace moerl

#endif  // MOERL_HAVE_NCCL
