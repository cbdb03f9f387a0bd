// enum_names.h — one table per enum of the vocabulary: the names in enum order, read and written by
// one helper, which also writes the "must be …" message of a bad value. An enum's header declares
//   inline constexpr EnumNames<Scoring, 2> kScoringNames{{"softmax", "sigmoid"}};
// and its name()/parse() pair and every error message come from that one line; a static_assert
// beside the table ties its size to the enum's last value.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace moerl {

// "a or b" / "a, b or c": how a message lists the values allowed.
std::string allowed_list(const std::vector<std::string>& names);

// "must be a or b" / "must be a, b or c".
inline std::string must_be(const std::vector<std::string>& names) {
  return "must be " + allowed_list(names);
}

template <class E, std::size_t N>
struct EnumNames {
  std::array<const char*, N> names;  // names[i] is the name of static_cast<E>(i)

  static constexpr std::size_t size() { return N; }

  constexpr const char* name(E e) const {
    const auto i = static_cast<std::size_t>(e);
    return i < N ? names[i] : "?";
  }
  bool parse(std::string_view s, E* out) const {
    for (std::size_t i = 0; i < N; ++i) {
      if (s == names[i]) {
        *out = static_cast<E>(i);
        return true;
      }
    }
    return false;
  }
  // "a, b or c": the values allowed, leaving out those a key does not accept ...
  std::string allowed(std::initializer_list<E> except = {}) const {
    std::vector<std::string> kept;
    for (std::size_t i = 0; i < N; ++i) {
      bool skip = false;
      for (E e : except) skip = skip || static_cast<std::size_t>(e) == i;
      if (!skip) kept.emplace_back(names[i]);
    }
    return allowed_list(kept);
  }
  // ... and the message of a bad value: "must be a, b or c".
  std::string must_be(std::initializer_list<E> except = {}) const { return "must be " + allowed(except); }
};

// The table with its size counted from the names, for an enum whose count others read from it:
//   inline constexpr auto kCorrectionNames = enum_names<Correction>({"none", "tis", …});
template <class E, std::size_t N>
constexpr EnumNames<E, N> enum_names(const char* const (&names)[N]) {
  EnumNames<E, N> t{};
  for (std::size_t i = 0; i < N; ++i) t.names[i] = names[i];
  return t;
}

}  // namespace moerl
