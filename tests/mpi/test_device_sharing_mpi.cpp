// test_device_sharing_mpi.cpp — device_sharing_gather (sim/comm/device_sharing.h) on 1, 2 and 4
// ranks: every rank gets every rank's fields in rank order, so every rank reaches the same verdict
// (here: ranks on "GPU rank mod 2" of one node share when there are more than two).
#include <gtest/gtest.h>

#include "mpi_env.h"
#include "sim/comm/device_sharing.h"

namespace moerl::test {
namespace {

TEST(DeviceSharingMpi, GatherIsTheSameTableOnEveryRank) {
  const RankGrid& g = mpi_grid();
  const int gpu = g.rank() % 2;
  RankDevice me{"GPU-uuid-" + std::to_string(gpu), "GPU " + std::to_string(gpu) + ", test", std::string(300, 'n')};
  const std::vector<RankDevice> all = device_sharing_gather(g.ep_comm(), me);
  EXPECT_EQ(static_cast<int>(all.size()), g.size());
  for (size_t r = 0; r < all.size(); ++r) {
    EXPECT_EQ(all[r].key, "GPU-uuid-" + std::to_string(r % 2));
    EXPECT_EQ(all[r].node, std::string(255, 'n'));  // cut to the field's 255 bytes
  }
  const auto shared = device_sharing_groups(all);
  EXPECT_EQ(shared.size(), g.size() > 2 ? 2u : 0u);
}

}  // namespace
}  // namespace moerl::test
