// nccl_collectives.cpp — see nccl_collectives.h.
#include "sim/comm/nccl_collectives.h"

#if MOERL_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/buffer.h"
#include "sim/comm/mpi_collectives.h"

namespace moerl {

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL error in ") + what + ": " + ncclGetErrorString(r));
}
#define MOERL_NCCL_CHECK(call) nccl_check((call), #call)

// Element displacements of rank-major blocks; returns the total.
size_t prefix(const std::vector<size_t>& counts, std::vector<size_t>* displs) {
  displs->resize(counts.size());
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    (*displs)[r] = at;
    at += counts[r];
  }
  return at;
}

}  // namespace

struct NcclCollectives::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer<unsigned char> send, recv;  // staging, grow-only
  ~Impl() {  // errors at teardown are ignored (the job may be ending after a failure)
    if (comm) ncclCommDestroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }

  // recv blocks (rank-major, recv_counts elements of `bytes` each) ← send blocks, one grouped
  // send/recv per peer; this rank's own block is copied on the host.
  void exchange(void* recv_host, const std::vector<size_t>& rc, const void* send_host,
                const std::vector<size_t>& sc, size_t bytes, ncclDataType_t type, int rank) {
    std::vector<size_t> sd, rd;
    const size_t ns = prefix(sc, &sd), nr = prefix(rc, &rd);
    send.resize(ns * bytes);
    recv.resize(nr * bytes);
    if (ns) MOERL_CUDA_CHECK(cudaMemcpyAsync(send.get(), send_host, ns * bytes, cudaMemcpyHostToDevice, stream));
    MOERL_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < static_cast<int>(sc.size()); ++r) {
      if (r == rank) continue;
      if (sc[r]) MOERL_NCCL_CHECK(ncclSend(send.get() + sd[r] * bytes, sc[r], type, r, comm, stream));
      if (rc[r]) MOERL_NCCL_CHECK(ncclRecv(recv.get() + rd[r] * bytes, rc[r], type, r, comm, stream));
    }
    MOERL_NCCL_CHECK(ncclGroupEnd());
    if (nr) MOERL_CUDA_CHECK(cudaMemcpyAsync(recv_host, recv.get(), nr * bytes, cudaMemcpyDeviceToHost, stream));
    MOERL_CUDA_CHECK(cudaStreamSynchronize(stream));
    ncclResult_t async = ncclSuccess;
    MOERL_NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    nccl_check(async, "ncclSend/ncclRecv (asynchronous error)");
    if (sc[rank] != rc[rank])
      throw std::runtime_error("NcclCollectives: this rank's own block differs in send and receive size");
    if (sc[rank])
      std::memcpy(static_cast<unsigned char*>(recv_host) + rd[rank] * bytes,
                  static_cast<const unsigned char*>(send_host) + sd[rank] * bytes, sc[rank] * bytes);
  }
};

NcclCollectives::NcclCollectives(MPI_Comm comm, Collectives* host) : host_(host) {
  if (!host) throw std::invalid_argument("NcclCollectives: needs the host collectives of the group");
  mpi_check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  if (host->size() != size_ || host->rank() != rank_)
    throw std::invalid_argument("NcclCollectives: host collectives are not over the same group");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    devices = 0;
  }
  // Every rank learns whether every rank has a device before any waits in the NCCL bootstrap.
  int ok = devices > 0 ? 1 : 0, all_ok = 0;
  mpi_check(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (!all_ok) throw std::runtime_error("NcclCollectives: a rank of the group has no CUDA device");
  // The device this thread is bound to: cuda::select_device(local rank among ALL the node's ranks,
  // sim/comm/comms.cpp), which backend_select runs first. Picking by the rank within `comm` instead
  // would move a rank of a DP×EP grid off its backend's GPU (two ranks on one GPU, others idle).
  MOERL_CUDA_CHECK(cudaGetDevice(&device_));
  MOERL_CUDA_CHECK(cudaSetDevice(device_));  // creates the context now, before the bootstrap
  // Rank 0's id, with whether creating it worked, to every rank.
  struct {
    int ok;
    ncclUniqueId id;
  } boot{};
  ncclResult_t id_result = ncclSuccess;
  if (rank_ == 0) {
    id_result = ncclGetUniqueId(&boot.id);
    boot.ok = id_result == ncclSuccess ? 1 : 0;
  }
  mpi_check(MPI_Bcast(&boot, sizeof(boot), MPI_BYTE, 0, comm), "MPI_Bcast");
  if (!boot.ok)
    throw std::runtime_error(std::string("NCCL error in ncclGetUniqueId (rank 0): ") +
                             (rank_ == 0 ? ncclGetErrorString(id_result) : "see rank 0"));
  impl_ = std::make_unique<Impl>();
  MOERL_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  MOERL_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, boot.id, rank_));
}

NcclCollectives::~NcclCollectives() = default;

void NcclCollectives::alltoallv(float* recv, const int* recv_rows, const float* send, const int* send_rows,
                                int width) {
  std::vector<size_t> sc(size_), rc(size_);
  for (int r = 0; r < size_; ++r) {
    sc[r] = static_cast<size_t>(send_rows[r]) * static_cast<size_t>(width);
    rc[r] = static_cast<size_t>(recv_rows[r]) * static_cast<size_t>(width);
  }
  impl_->exchange(recv, rc, send, sc, sizeof(float), ncclFloat32, rank_);
}

void NcclCollectives::alltoall(int32_t* recv, const int32_t* send, int n) {
  const std::vector<size_t> c(size_, static_cast<size_t>(n));
  impl_->exchange(recv, c, send, c, sizeof(int32_t), ncclInt32, rank_);
}

std::unique_ptr<Collectives> make_nccl_collectives(MPI_Comm comm, Collectives* host) {
  return std::make_unique<NcclCollectives>(comm, host);
}

}  // namespace moerl

#endif  // MOERL_HAVE_NCCL
