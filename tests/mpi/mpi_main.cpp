// mpi_main.cpp — main() of test_mpi: MPI_Init, one rank grid of all ranks, GoogleTest on every
// rank. Rank 0 prints the usual report; other ranks print only their failures, prefixed with the
// rank. Every rank exits with the worst status of all ranks, so ctest sees any rank's failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "mpi_env.h"

namespace moerl::test {
namespace {
Comms g_world;
std::unique_ptr<RankGrid> g_grid;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

const Comms& mpi_world() { return g_world; }
const RankGrid& mpi_grid() { return *g_grid; }

}  // namespace moerl::test

int main(int argc, char** argv) {
  using namespace moerl;
  test::g_world = comms_init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (!test::g_world.is_root) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new test::FailurePrinter(test::g_world.rank));
  }
  int code = 0;
  {
    test::g_grid = std::make_unique<RankGrid>(test::g_world, 0);
    code = RUN_ALL_TESTS();
    test::g_grid.reset();
  }
  code = comms_agree_exit(test::g_world, code);
  comms_finalize(&test::g_world);
  return code;
}
