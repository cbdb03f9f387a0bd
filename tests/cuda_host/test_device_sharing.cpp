// test_device_sharing.cpp — ranks that share a GPU (sim/comm/device_sharing.h): found from the
// gathered table, named in one line; a group whose ranks each have a GPU, or a group of one rank
// (a sweep's one-rank runs), shares nothing and builds NCCL (or, for one rank, needs none). The
// gather over MPI: tests/mpi/test_device_sharing_mpi.cpp.
#include <gtest/gtest.h>

#include "sim/comm/device_sharing.h"

namespace moerl {
namespace {

RankDevice gpu(int i, const char* node = "gpu07") {
  return RankDevice{std::string("GPU-uuid-") + node + "-" + std::to_string(i),
                    "GPU " + std::to_string(i) + ", NVIDIA H200, PCI 0000:1" + std::to_string(i) + ":00.0", node};
}

TEST(DeviceSharing, OwnGpusShareNothing) {
  EXPECT_TRUE(device_sharing_groups({}).empty());
  EXPECT_TRUE(device_sharing_groups({gpu(0)}).empty());  // one rank: no NCCL at all
  EXPECT_TRUE(device_sharing_groups({gpu(0), gpu(1), gpu(2), gpu(3)}).empty());
  // the same index on two nodes is two GPUs (the key is the UUID, not the index)
  EXPECT_TRUE(device_sharing_groups({gpu(0, "a"), gpu(0, "b")}).empty());
  EXPECT_EQ(device_sharing_line({}, {gpu(0)}), "");
}

TEST(DeviceSharing, TwoRanksOnOneGpu) {
  const std::vector<RankDevice> d{gpu(0), gpu(0)};
  const auto g = device_sharing_groups(d);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(device_sharing_line(g, d),
            "run.backend = cuda: ranks 0 and 1 of the expert-parallel group share GPU 0, NVIDIA H200, "
            "PCI 0000:10:00.0 on node gpu07; NCCL needs a GPU per rank, so the all-to-all runs over MPI");
}

// 4 ranks on 2 GPUs (local_rank mod 2): two shared devices, each named once, in one line.
TEST(DeviceSharing, FourRanksOnTwoGpus) {
  const std::vector<RankDevice> d{gpu(0), gpu(1), gpu(0), gpu(1)};
  const auto g = device_sharing_groups(d);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(g[1], (std::vector<int>{1, 3}));
  const std::string line = device_sharing_line(g, d);
  EXPECT_NE(line.find("ranks 0 and 2 of the expert-parallel group share GPU 0"), std::string::npos) << line;
  EXPECT_NE(line.find("; ranks 1 and 3 of the expert-parallel group share GPU 1"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const std::vector<RankDevice> three{gpu(0), gpu(0), gpu(0), gpu(1)};
  EXPECT_NE(device_sharing_line(device_sharing_groups(three), three).find("ranks 0, 1 and 2 "), std::string::npos);
}

}  // namespace
}  // namespace moerl
