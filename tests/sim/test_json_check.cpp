// test_json_check.cpp — json_syntax_error (sim/io/json_check.h): what bench's --peer-json is
// checked with first, so a truncated file is "not valid JSON", not a file without its keys.
#include <gtest/gtest.h>

#include "sim/io/json_check.h"

namespace moerl {
namespace {

TEST(JsonCheck, ValidTextsPass) {
  for (const char* t : {"{}", "[]", " {\"peer\": \"torch\", \"rollout_s\": 0.5, \"train_s\": 1.5e0}\n", "-0.25",
                        "[true, false, null, \"a\\\"b\\u00e9\", {\"x\": [1, 2, {\"y\": -3E+2}]}]", "\"\""})
    EXPECT_EQ(json_syntax_error(t), "") << t;
}

TEST(JsonCheck, DamagedTextsSayWhereAndWhat) {
  const struct {
    const char* text;
    const char* what;
  } cases[] = {
      {"{\"rollout_s\": 1.0, \"train", "the text ends inside a string"},
      {"{\"rollout_s\": 1.0,", "the text ends inside an object"},
      {"{\"rollout_s\": 1.}", "a digit expected"},
      {"{\"a\": 1} x", "text after the JSON value"},
      {"{a: 1}", "a key (a string) expected"},
      {"[1 2]", "',' or ']' expected"},
      {"", "the text ends where a value was expected"},
      {"nul", "not a JSON value"},
      {"{\"a\": \"x\ty\"}", "a control character inside a string"},
  };
  for (const auto& c : cases) {
    const std::string got = json_syntax_error(c.text);
    EXPECT_NE(got.find(c.what), std::string::npos) << c.text << " → " << got;
  }
  EXPECT_NE(json_syntax_error(std::string(600, '[') + std::string(600, ']')).find("deeper than 512"), std::string::npos);
}

}  // namespace
}  // namespace moerl
