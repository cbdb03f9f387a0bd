// json_check.cpp — a recursive-descent JSON syntax check (json_check.h).
#include "sim/io/json_check.h"

#include <cctype>
#include <cstring>

namespace moerl {

namespace {

class JsonChecker {
 public:
  explicit JsonChecker(const std::string& t) : t_(t) {}

  std::string check() {
    space();
    if (!value(0)) return error_;
    space();
    if (i_ != t_.size()) return at("text after the JSON value");
    return "";
  }

 private:
  const std::string& t_;
  size_t i_ = 0;
  std::string error_;

  bool fail(const std::string& what) {
    if (error_.empty()) error_ = at(what);
    return false;
  }
  std::string at(const std::string& what) const { return "at byte " + std::to_string(i_) + ": " + what; }
  bool end() const { return i_ >= t_.size(); }
  void space() {
    while (!end() && std::strchr(" \t\r\n", t_[i_])) ++i_;
  }
  bool literal(const char* word) {
    const size_t n = std::strlen(word);
    if (t_.compare(i_, n, word) != 0) return fail("not a JSON value");
    i_ += n;
    return true;
  }
  bool digits() {
    const size_t from = i_;
    while (!end() && t_[i_] >= '0' && t_[i_] <= '9') ++i_;
    return i_ > from || fail(end() ? "the text ends inside a number" : "a digit expected");
  }
  bool number() {
    if (t_[i_] == '-') ++i_;
    if (!end() && t_[i_] == '0') ++i_;
    else if (!digits()) return false;
    if (!end() && t_[i_] == '.') {
      ++i_;
      if (!digits()) return false;
    }
    if (!end() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (!end() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      if (!digits()) return false;
    }
    return true;
  }
  bool string() {
    ++i_;  // the opening quote
    while (!end()) {
      const unsigned char c = static_cast<unsigned char>(t_[i_]);
      if (c == '"') {
        ++i_;
        return true;
      }
      if (c < 0x20) return fail("a control character inside a string");
      if (c == '\\') {
        ++i_;
        if (end()) break;
        if (t_[i_] == 'u') {
          for (int k = 0; k < 4; ++k) {
            ++i_;
            if (end() || !std::isxdigit(static_cast<unsigned char>(t_[i_]))) return fail("a bad \\u escape");
          }
        } else if (!std::strchr("\"\\/bfnrt", t_[i_])) {
          return fail("a bad escape in a string");
        }
      }
      ++i_;
    }
    return fail("the text ends inside a string");
  }
  bool value(int depth) {
    if (depth > 512) return fail("nested deeper than 512 levels");
    space();
    if (end()) return fail("the text ends where a value was expected");
    const char c = t_[i_];
    if (c == '{' || c == '[') return container(depth, c == '{');
    if (c == '"') return string();
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    return fail(std::string("not a JSON value (") + (c >= 0x20 && c < 0x7f ? std::string(1, c) : "a non-text byte") +
                ")");
  }
  bool container(int depth, bool object) {
    const char close = object ? '}' : ']';
    const char* what = object ? "an object" : "an array";
    ++i_;
    space();
    if (!end() && t_[i_] == close) {
      ++i_;
      return true;
    }
    while (true) {
      space();
      if (end()) return fail(std::string("the text ends inside ") + what);
      if (object) {
        if (t_[i_] != '"') return fail("a key (a string) expected in an object");
        if (!string()) return false;
        space();
        if (end()) return fail("the text ends inside an object");
        if (t_[i_] != ':') return fail("':' expected after a key");
        ++i_;
      }
      if (!value(depth + 1)) return false;
      space();
      if (end()) return fail(std::string("the text ends inside ") + what);
      if (t_[i_] == close) {
        ++i_;
        return true;
      }
      if (t_[i_] != ',') return fail(std::string("',' or '") + close + "' expected in " + what);
      ++i_;
    }
  }
};

}  // namespace

std::string json_syntax_error(const std::string& text) { return JsonChecker(text).check(); }

}  // namespace moerl
