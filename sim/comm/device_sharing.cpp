// device_sharing.cpp — see device_sharing.h.
#include "sim/comm/device_sharing.h"

#include <cstring>
#include <map>

#include "sim/comm/mpi_collectives.h"

namespace moerl {

std::vector<std::vector<int>> device_sharing_groups(const std::vector<RankDevice>& devices) {
  std::map<std::string, size_t> slot;  // key → index into all
  std::vector<std::vector<int>> all;
  for (size_t r = 0; r < devices.size(); ++r) {
    auto [it, fresh] = slot.emplace(devices[r].key, all.size());
    if (fresh) all.emplace_back();
    all[it->second].push_back(static_cast<int>(r));
  }
  std::vector<std::vector<int>> shared;
  for (std::vector<int>& g : all)
    if (g.size() > 1) shared.push_back(std::move(g));
  return shared;
}

namespace {
// "0 and 1", "0, 1 and 2"
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}
}  // namespace

std::string device_sharing_line(const std::vector<std::vector<int>>& groups,
                                const std::vector<RankDevice>& devices) {
  if (groups.empty()) return "";
  std::string s = "run.backend = cuda: ";
  for (size_t i = 0; i < groups.size(); ++i) {
    const RankDevice& d = devices[static_cast<size_t>(groups[i].front())];
    if (i > 0) s += "; ";
    s += "ranks " + rank_list(groups[i]) + " of the expert-parallel group share " + d.label + " on node " + d.node;
  }
  return s + "; NCCL needs a GPU per rank, so the all-to-all runs over MPI";
}

std::vector<RankDevice> device_sharing_gather(MPI_Comm comm, const RankDevice& mine) {
  constexpr int kField = 256;
  int size = 1;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  char send[3 * kField] = {};
  const std::string* fields[3] = {&mine.key, &mine.label, &mine.node};
  for (int f = 0; f < 3; ++f) std::strncpy(send + f * kField, fields[f]->c_str(), kField - 1);
  std::vector<char> recv(static_cast<size_t>(size) * 3 * kField);
  mpi_check(MPI_Allgather(send, 3 * kField, MPI_CHAR, recv.data(), 3 * kField, MPI_CHAR, comm), "MPI_Allgather");
  std::vector<RankDevice> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const char* at = recv.data() + static_cast<size_t>(r) * 3 * kField;
    out[r].key = std::string(at, strnlen(at, kField));
    out[r].label = std::string(at + kField, strnlen(at + kField, kField));
    out[r].node = std::string(at + 2 * kField, strnlen(at + 2 * kField, kField));
  }
  return out;
}

}  // namespace moerl
