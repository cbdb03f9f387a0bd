// text_io.cpp — see text_io.h.
#include "sim/io/text_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "store/h5io.h"
#include "store/path_checks.h"

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

std::string text_read_input(const std::string& path, const std::string& what, size_t max_bytes) {
  path_check_input_file(path, what);  // a directory, a device, a FIFO: refused by kind, unread
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::invalid_argument(path + ": cannot read " + what + ": " + std::strerror(errno));
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      throw std::invalid_argument(path + ": cannot read " + what + ": " + std::strerror(err));
    }
    if (r == 0) break;
    text.append(buf, static_cast<size_t>(r));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw std::invalid_argument(path + ": " + what + " larger than " + std::to_string(max_bytes >> 10) +
                                  " KiB (the limit of a " + what + "; is it one?)");
    }
  }
  ::close(fd);
  return text;
}

namespace {
// Length of the UTF-8 sequence at s[i] and its code point; 0 when the bytes are not UTF-8.
size_t utf8_at(const std::string& s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = c >= 0xF0 && c < 0xF5 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (c >= 0xF5) n = 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v < 0xE000)) return 0;
  *cp = v;
  return n;
}

bool invisible(uint32_t cp) {
  return (cp >= 0x80 && cp < 0xA0) || cp == 0xA0 || cp == 0xAD || cp == 0x034F || cp == 0x061C ||
         cp == 0x115F || cp == 0x1160 || cp == 0x180E || (cp >= 0x2000 && cp <= 0x200F) ||
         (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 ||
         cp == 0x3164 || (cp >= 0xFE00 && cp <= 0xFE0F) || cp == 0xFEFF || cp == 0xFFA0 ||
         (cp >= 0xFFF0 && cp <= 0xFFFB) || (cp >= 0xE0000 && cp <= 0xE0FFF);
}
}  // namespace

std::string text_visible(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  char esc[16];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\t' || c == '\r' || c == '\n') {
      out += c == '\t' ? "\\t" : c == '\r' ? "\\r" : "\\n";
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t n = c >= 0x80 ? utf8_at(s, i, &cp) : 0;
    if (n == 0) {  // a control byte, or a byte that is not UTF-8
      std::snprintf(esc, sizeof esc, "\\x%02X", c);
      out += esc;
      ++i;
      continue;
    }
    if (invisible(cp)) {
      std::snprintf(esc, sizeof esc, "<U+%04X>", cp);
      out += esc;
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

std::string text_strip_bom(const std::string& s) {
  return s.rfind("\xEF\xBB\xBF", 0) == 0 ? s.substr(3) : s;
}

std::string text_shown(const std::string& s, size_t max) {
  if (s.size() <= max) return text_visible(s);
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
  return text_visible(s.substr(0, n)) + "... (" + std::to_string(s.size()) + " bytes)";
}

}  // namespace moerl
