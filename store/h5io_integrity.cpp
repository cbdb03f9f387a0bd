// h5io_integrity.cpp — the integrity header (see h5io.h): 512 bytes before the HDF5 data (an
// HDF5 user block) holding the file's size and the CRC-32 of everything after it. commit() writes
// it (h5io_atomic.cpp), open() checks it before HDF5 parses a byte, h5_seal_file renews it.
#include "store/h5io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "store/h5io_internal.h"

namespace moerl {

using namespace h5io_internal;

namespace {
constexpr size_t kHeaderBytes = 512;  // HDF5 finds its superblock after a 512-byte user block
constexpr const char* kHeaderMagic = "moerl-integrity 1\n";

std::string format_header(uint64_t size, uint32_t crc) {
  char text[128];
  std::snprintf(text, sizeof text, "%ssize %llu\ncrc32 %08x\n", kHeaderMagic,
                static_cast<unsigned long long>(size), crc);
  std::string h(kHeaderBytes, '\0');
  std::memcpy(h.data(), text, std::strlen(text));
  return h;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}
}  // namespace

std::string integrity_header(const char* image, size_t n) {
  return format_header(kHeaderBytes + n, crc32_update(0, image, n));
}

void h5_verify_integrity(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw H5Error(path + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string head(kHeaderBytes, '\0');
  const ssize_t got = ::pread(fd, head.data(), kHeaderBytes, 0);
  if (got < 0) throw H5Error(path + ": cannot read: " + std::strerror(errno));
  head.resize(static_cast<size_t>(got));
  static const char kSignature[] = "\x89HDF\r\n\x1a\n";
  if (head.compare(0, 8, kSignature, 8) == 0) return;  // no header: a file from another writer
  const bool ours = starts_with(head, kHeaderMagic);
  if (!ours) {
    // Damage to the header's first line must not turn a checked file into an unchecked one.
    char sig[8] = {};
    if (::pread(fd, sig, 8, static_cast<off_t>(kHeaderBytes)) == 8 && std::memcmp(sig, kSignature, 8) == 0)
      throw H5Error(path + ": corrupted: the 512-byte header before the HDF5 data is not a moerl "
                    "integrity header");
    return;  // not HDF5 at all: open() says so
  }
  if (head.size() < kHeaderBytes)
    throw H5Error(path + ": truncated file: " + std::to_string(head.size()) +
                  " bytes, shorter than its integrity header");
  unsigned long long size = 0;
  unsigned crc = 0;
  int used = 0;
  const std::string body = head.substr(std::strlen(kHeaderMagic));
  if (std::sscanf(body.c_str(), "size %llu\ncrc32 %8x\n%n", &size, &crc, &used) != 2 || used == 0 ||
      head != format_header(size, crc))
    throw H5Error(path + ": corrupted: damaged integrity header");
  struct stat st;
  if (::fstat(fd, &st) != 0) throw H5Error(path + ": cannot stat: " + std::strerror(errno));
  if (static_cast<unsigned long long>(st.st_size) != size)
    throw H5Error(path + ": " + (static_cast<unsigned long long>(st.st_size) < size ? "truncated" : "corrupted") +
                  " file: " + std::to_string(st.st_size) + " bytes, written with " +
                  std::to_string(size));
  std::vector<char> buf(1 << 20);
  uint32_t c = 0;
  off_t off = static_cast<off_t>(kHeaderBytes);
  while (static_cast<unsigned long long>(off) < size) {
    const ssize_t r = ::pread(fd, buf.data(), buf.size(), off);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw H5Error(path + ": cannot read: " + std::strerror(errno));
    }
    if (r == 0) break;
    c = crc32_update(c, buf.data(), static_cast<size_t>(r));
    off += r;
  }
  if (c != crc) {
    char msg[160];
    std::snprintf(msg, sizeof msg, ": corrupted: CRC-32 of the content is %08x, written as %08x "
                  "(the file changed after it was written)", c, crc);
    throw H5Error(path + msg);
  }
}

void h5_seal_file(const std::string& path) {
  std::vector<char> bytes;
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw H5Error(path + ": cannot open: " + std::strerror(errno));
    char buf[1 << 16];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0) bytes.insert(bytes.end(), buf, buf + r);
    ::close(fd);
  }
  if (bytes.size() < kHeaderBytes || !starts_with(std::string(bytes.data(), 32), kHeaderMagic))
    throw H5Error(path + ": has no moerl integrity header to renew");
  const std::string h = integrity_header(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::pwrite(fd, h.data(), h.size(), 0) != static_cast<ssize_t>(h.size()))
    throw H5Error(path + ": cannot rewrite its integrity header: " + std::strerror(errno));
  ::close(fd);
}

}  // namespace moerl
