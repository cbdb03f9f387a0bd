// The enum-name helper (kernels/enum_names.h): every table reads back each of its names, refuses
// near misses, and writes the "must be …" message of a bad value.
#include <gtest/gtest.h>

#include "kernels/backend.h"
#include "kernels/enum_names.h"
#include "kernels/numerics.h"
#include "models/config.h"

namespace moerl {
namespace {

template <class E, std::size_t N>
void expect_round_trip(const EnumNames<E, N>& t) {
  for (std::size_t i = 0; i < N; ++i) {
    E e{};
    ASSERT_TRUE(t.parse(t.names[i], &e)) << t.names[i];
    EXPECT_EQ(static_cast<std::size_t>(e), i);
    EXPECT_STREQ(t.name(e), t.names[i]);
    for (std::size_t j = 0; j < i; ++j) EXPECT_STRNE(t.names[i], t.names[j]) << "names repeat";
  }
  E e{};
  EXPECT_FALSE(t.parse("", &e));
  EXPECT_FALSE(t.parse(std::string(t.names[0]) + " ", &e));
  EXPECT_STREQ(t.name(static_cast<E>(N)), "?");
}

TEST(EnumNames, EveryTableRoundTrips) {
  expect_round_trip(kFormatNames);
  expect_round_trip(kScalingNames);
  expect_round_trip(kTieBreakNames);
  expect_round_trip(kBackendNames);
  expect_round_trip(kScoringNames);
  expect_round_trip(kLoadBalanceNames);
}

TEST(EnumNames, MessageListsTheAllowedValues) {
  EXPECT_EQ(kBackendNames.must_be(), "must be cpu or cuda");
  EXPECT_EQ(kTieBreakNames.must_be(), "must be lowest, highest or random");
  EXPECT_EQ(kTieBreakNames.must_be({TieBreak::random}), "must be lowest or highest");
  EXPECT_EQ(must_be({"a"}), "must be a");
  EXPECT_EQ(allowed_list({"a", "b", "c", "d"}), "a, b, c or d");
}

}  // namespace
}  // namespace moerl
