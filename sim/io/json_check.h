// json_check.h — whether a text is one JSON value (RFC 8259), without building it: the inputs moerl
// reads with a few key lookups (a peer's bench JSON) are checked whole first, so a truncated or
// damaged file is named as "not valid JSON" instead of read as missing keys.
#pragma once

#include <string>

namespace moerl {

// "" when text is exactly one JSON value (whitespace around it allowed), else what is wrong and
// where: "at byte 41: the text ends inside an object". Nesting deeper than 512 levels is refused.
std::string json_syntax_error(const std::string& text);

}  // namespace moerl
