// h5io_atomic.cpp — the atomic write (see h5io.h): create() builds the file in memory behind
// "<path>.tmp-<pid>", commit() writes the image with its integrity header there, fsyncs it and
// renames it into place; the temporaries of killed writers are removed by the next create().
#include "store/h5io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "store/h5io_internal.h"
#include "store/path_checks.h"

namespace moerl {

using namespace h5io_internal;

namespace {
// Writers build the file in memory (HDF5's core driver without backing store), so HDF5 itself never
// writes to disk: commit() writes the finished image with plain POSIX calls, so a full disk or a
// file-size limit is one errno for us to report, never a half-closed HDF5 file that the library
// tries (and fails, fatally) to flush again at exit.
hid_t memory_fapl() {
  hid_t fapl = strong_close_fapl();
  H5Pset_fapl_core(fapl, 1 << 20, 0);
  return fapl;
}

// Writes all of buf to fd; false with errno set on failure.
bool write_all(int fd, const char* buf, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, buf, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (w == 0) {
      errno = EIO;
      return false;
    }
    buf += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// True when "<base>.tmp-<digits>" names a temporary of `base` whose process is gone.
bool is_stale_temporary(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return false;
  if (digits.size() > 9) return true;
  const long pid = std::stol(digits);
  if (pid == static_cast<long>(::getpid())) return false;  // our own: the caller truncates it
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}
}  // namespace

int remove_stale_temporaries(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (is_stale_temporary(e->d_name, base) && ::unlink((dir + "/" + e->d_name).c_str()) == 0)
      ++removed;
  }
  ::closedir(d);
  return removed;
}

std::string temporary_path(const std::string& path) {
  return path + ".tmp-" + std::to_string(static_cast<long>(::getpid()));
}

namespace {
// Clears stale temporaries of `path` and creates this process's one (returned in *tmp): a missing
// or read-only directory fails here, before any work.
int create_temporary(const std::string& path, std::string* tmp) {
  remove_stale_temporaries(path);
  *tmp = temporary_path(path);
  const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw H5Error(path + ": cannot create " + *tmp + ": " + std::strerror(errno) +
                  " (directory missing or not writable?)");
  return fd;
}
}  // namespace

void h5_check_writable(const std::string& path) {
  try {
    path_check_output_file(path, "the output");
  } catch (const std::invalid_argument& e) {
    throw H5Error(e.what());
  }
  std::string tmp;
  ::close(create_temporary(path, &tmp));
  ::unlink(tmp.c_str());
}

H5File H5File::create(const std::string& path) {
  h5_silence();
  std::string tmp;
  const int fd = create_temporary(path, &tmp);
  Handle fapl(memory_fapl(), H5Pclose);
  const hid_t id = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (id < 0) {
    const std::string detail = h5_detail();
    ::close(fd);
    ::unlink(tmp.c_str());
    throw H5Error(path + ": cannot create an HDF5 file in memory" + detail);
  }
  return H5File(path, tmp, id, true, fd);
}

void H5File::commit() {
  if (!writable_ || id_ < 0) fail("", "commit() on a file not open for writing");
  if (H5Fflush(id_, H5F_SCOPE_GLOBAL) < 0) fail("", "flush failed");
  const ssize_t size = H5Fget_file_image(id_, nullptr, 0);
  if (size < 0) fail("", "cannot take the file image");
  std::vector<char> image(static_cast<size_t>(size));
  if (H5Fget_file_image(id_, image.data(), image.size()) != size) fail("", "cannot take the file image");
  const herr_t rc = H5Fclose(id_);
  id_ = -1;
  if (rc < 0) fail("", "close failed");
  // Our own writes: ENOSPC, EFBIG, EIO come back as one clear error; the destructor removes the
  // temporary file and the previous file at the final name is untouched.
  const auto io_fail = [&](const char* what) {
    throw H5Error(path_ + ": cannot " + what + " " + tmp_path_ + ": " + std::strerror(errno) +
                  " (the previous " + path_ + ", if any, is unchanged)");
  };
  const std::string header = integrity_header(image.data(), image.size());
  if (!write_all(fd_, header.data(), header.size()) || !write_all(fd_, image.data(), image.size()))
    io_fail("write");
  // fsync before rename: after a crash the final name holds either the old or the new file.
  if (::fsync(fd_) != 0 && errno != EINVAL) io_fail("sync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) io_fail("close");
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("", "cannot rename " + tmp_path_ + " into place: " + std::strerror(errno));
  tmp_path_.clear();
}

}  // namespace moerl
