// output_lock.cpp — see output_lock.h.
#include "store/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace moerl {

std::string output_lock_path(const std::string& path) { return path + ".lock"; }

namespace {
std::string read_all(int fd) {
  std::string s;
  char buf[256];
  off_t off = 0;
  while (s.size() < 4096) {
    const ssize_t r = ::pread(fd, buf, sizeof buf, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    s.append(buf, static_cast<size_t>(r));
    off += r;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string holder_line() {
  char host[256] = "?";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  host[sizeof host - 1] = '\0';
  char when[64] = "";
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (::localtime_r(&now, &tm)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  return "pid " + std::to_string(::getpid()) + " on host " + host + " since " + when + "\n";
}
}  // namespace

OutputLock OutputLock::take(const std::string& path, const std::string& what) {
  return acquire(path, what, false);
}

OutputLock OutputLock::wait(const std::string& path) { return acquire(path, "", true); }

OutputLock OutputLock::acquire(const std::string& path, const std::string& what, bool block) {
  OutputLock l;
  l.lock_path_ = output_lock_path(path);
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(l.lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw std::runtime_error(path + ": cannot create the lock file " + l.lock_path_ + ": " + std::strerror(errno) +
                               " (directory missing or not writable?)");
    int rc;
    do rc = ::flock(fd, LOCK_EX | (block ? 0 : LOCK_NB));
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      std::string holder = read_all(fd);
      // the holder writes its line just after taking the lock: give it a moment to be named
      for (int i = 0; i < 20 && holder.empty() && err == EWOULDBLOCK; ++i) {
        ::usleep(10000);
        holder = read_all(fd);
      }
      ::close(fd);
      if (err == EWOULDBLOCK)
        throw std::runtime_error(path + ": is being written by another moerl (" +
                                 (holder.empty() ? std::string("holder unknown") : holder) + "; lock file " +
                                 l.lock_path_ + "): wait for it to finish, or choose another " + what);
      throw std::runtime_error(path + ": cannot lock " + l.lock_path_ + ": " + std::strerror(err));
    }
    // The path must still name the inode we locked: a holder removes its lock file on release.
    struct stat a, b;
    if (::fstat(fd, &a) != 0 || ::stat(l.lock_path_.c_str(), &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino) {
      ::close(fd);
      if (attempt > 1000) throw std::runtime_error(path + ": cannot take the lock " + l.lock_path_ + " (it keeps changing)");
      continue;
    }
    l.stale_ = read_all(fd);  // a holder that died without removing its file (the kernel freed its lock)
    const std::string me = holder_line();
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
      const int err = errno;
      ::unlink(l.lock_path_.c_str());
      ::close(fd);
      throw std::runtime_error(path + ": cannot write the lock file " + l.lock_path_ + ": " + std::strerror(err));
    }
    l.fd_ = fd;
    return l;
  }
}

OutputLock::OutputLock(OutputLock&& o) noexcept
    : lock_path_(std::move(o.lock_path_)), stale_(std::move(o.stale_)), fd_(o.fd_) {
  o.fd_ = -1;
}

OutputLock& OutputLock::operator=(OutputLock&& o) noexcept {
  if (this != &o) {
    release();
    lock_path_ = std::move(o.lock_path_);
    stale_ = std::move(o.stale_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

OutputLock::~OutputLock() { release(); }

void OutputLock::release() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still holding it: see the inode check in acquire()
  ::close(fd_);
  fd_ = -1;
}

}  // namespace moerl
