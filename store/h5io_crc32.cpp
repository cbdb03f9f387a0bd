// h5io_crc32.cpp — the CRC-32 of the integrity header (h5io_integrity.cpp).
#include <array>

#include "store/h5io_internal.h"

namespace moerl::h5io_internal {

uint32_t crc32_update(uint32_t crc, const char* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i)
    crc = table[(crc ^ static_cast<unsigned char>(data[i])) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

}  // namespace moerl::h5io_internal
