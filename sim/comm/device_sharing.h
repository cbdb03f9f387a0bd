// device_sharing.h — which ranks of a group run on the same GPU. NCCL refuses a communicator with
// two ranks on one device (ncclCommInitRank: "invalid usage", its log "Duplicate GPU detected"),
// and on one rank only — the others then wait in the bootstrap. So before NCCL is set up every
// rank of the expert-parallel group tells the others which GPU it has (device_sharing_gather, one
// MPI_Allgather), and every rank reaches the same verdict from the same table: with no GPU shared
// NCCL carries the all-to-all; with one shared the group keeps its MPI all-to-all (host staging,
// which every GPU of a node can take part in) and the group's root prints device_sharing_line.
// A run of one rank never builds NCCL, so one-rank runs of a sweep share a GPU freely.
//
// The table is host data (no CUDA here): the logic is tested on the CPU (tests/cuda_host).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace moerl {

// One rank's GPU: `key` identifies the device across the job (its UUID, else node + PCI bus id);
// `label` names it for people ("GPU 0, NVIDIA H200, PCI 0000:19:00.0"); `node` is the host name.
struct RankDevice {
  std::string key, label, node;
};

// The ranks (indices into `devices`, ascending) of every device used by two or more of them, in
// order of each device's first rank. Empty when every rank has a GPU of its own.
std::vector<std::vector<int>> device_sharing_groups(const std::vector<RankDevice>& devices);

// One line naming the ranks and the device of each shared GPU and what the run does about it:
//   "run.backend = cuda: ranks 0 and 1 of the expert-parallel group share GPU 0, NVIDIA H200, PCI
//    0000:19:00.0 on node gpu07; NCCL needs a GPU per rank, so the all-to-all runs over MPI"
// (several devices joined with "; "). Empty when `groups` is.
std::string device_sharing_line(const std::vector<std::vector<int>>& groups,
                                const std::vector<RankDevice>& devices);

// Every rank's RankDevice, in rank order of comm (collective over comm; each field cut to 255
// bytes).
std::vector<RankDevice> device_sharing_gather(MPI_Comm comm, const RankDevice& mine);

}  // namespace moerl
