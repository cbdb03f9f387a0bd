// mpi_env.h — the MPI world of the test_mpi executable (tests/mpi/mpi_main.cpp starts MPI and
// builds one rank grid of all ranks). Every test runs on every rank; a test compares what the
// ranks compute together with what one process computes alone, in the same executable.
//
// Collectives must be reached by every rank: tests use EXPECT_* (never ASSERT_*) before a
// collective call, so a failing rank does not leave the others waiting.
#pragma once

#include "sim/comm/comms.h"

namespace moerl::test {

const Comms& mpi_world();
const RankGrid& mpi_grid();

}  // namespace moerl::test
