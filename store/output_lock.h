// output_lock.h — one writer per output. A command that writes a file (a run's results and
// checkpoint, an sft checkpoint, a cached base policy, a sweep's runs) first takes an exclusive
// lock on it: the lock file "<path>.lock", held with flock(2) for as long as the object lives and
// holding the holder's PID, host and start time for the message another writer gets.
//
// Why flock and a check of the inode: the kernel releases a flock when its holder dies, however it
// dies (kill -9 included), so a lock file left behind is stale by construction and the next writer
// takes it over — no PID guessing across hosts. The holder removes the lock file when it is done;
// a writer that opened the file just before that removal, and then got the lock on the removed
// inode, sees that the path no longer names what it locked and tries again, so two writers can
// never both hold a lock on the same path.
//
// Not a lock against writers that do not take it (other tools), nor on file systems without flock
// (some network mounts: taking the lock then fails, naming the errno, instead of running unlocked).
#pragma once

#include <string>

namespace moerl {

class OutputLock {
 public:
  // Takes the lock on `path` or throws std::runtime_error naming the path, the holder (PID, host)
  // and what to do. `what` names the output in that message ("--out", "the sft checkpoint").
  static OutputLock take(const std::string& path, const std::string& what);
  // Waits for the lock (the base-policy cache: a second run waits for the first to write the base,
  // then reads it instead of training it again).
  static OutputLock wait(const std::string& path);

  OutputLock() = default;  // holds nothing
  OutputLock(OutputLock&& o) noexcept;
  OutputLock& operator=(OutputLock&& o) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  ~OutputLock();  // removes the lock file and releases the lock

  bool held() const { return fd_ >= 0; }
  const std::string& lock_path() const { return lock_path_; }
  // The holder line a previous, dead holder left in the lock file ("" when there was none).
  const std::string& stale_holder() const { return stale_; }

 private:
  static OutputLock acquire(const std::string& path, const std::string& what, bool block);
  void release();
  std::string lock_path_, stale_;
  int fd_ = -1;
};

// "<path>.lock".
std::string output_lock_path(const std::string& path);

}  // namespace moerl
