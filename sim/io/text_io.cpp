// text_io.cpp — see text_io.h.
#include "sim/io/text_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "store/h5io.h"

namespace moerl {

void text_write_atomic(const std::string& path, const std::string& text) {
  remove_stale_temporaries(path);
  const std::string tmp = temporary_path(path);
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.flush();
    out.close();
    if (!out) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": cannot write " + tmp + (err ? std::string(": ") + std::strerror(err) : ""));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot rename " + tmp + " into place");
  }
}

}  // namespace moerl
