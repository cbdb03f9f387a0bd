// enum_names.cpp — see enum_names.h.
#include "kernels/enum_names.h"

namespace moerl {

std::string allowed_list(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

}  // namespace moerl
