// test_device.cpp — see test_device.h.
#include "kernels/test_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace moerl {

namespace {
size_t page_round(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(n, 1) + page - 1) / page * page;
}
}  // namespace

TestDeviceBackend::TestDeviceBackend(size_t reserve, bool fence) : reserve_(page_round(reserve)), fence_(fence) {
  void* p = mmap(nullptr, reserve_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("TestDeviceBackend: cannot reserve " + std::to_string(reserve_) + " bytes");
  base_ = static_cast<char*>(p);
  if (!fence_) protect(true);
}

TestDeviceBackend::~TestDeviceBackend() { munmap(base_, reserve_); }

void TestDeviceBackend::protect(bool open) const {
  if (top_ == 0) return;
  if (mprotect(base_, top_, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
    throw std::runtime_error("TestDeviceBackend: mprotect failed");
}

TestDeviceBackend::Open::Open(const TestDeviceBackend& b) : b_(b) {
  b_.mu_.lock();
  if (b_.fence_ && b_.open_++ == 0) b_.protect(true);
}

TestDeviceBackend::Open::~Open() {
  if (b_.fence_ && --b_.open_ == 0) b_.protect(false);
  b_.mu_.unlock();
}

void TestDeviceBackend::not_recording(const char* what) const {
  if (recording_)
    throw std::logic_error(std::string("TestDeviceBackend: ") + what +
                           " while recording a graph (a CUDA stream capture allows none)");
}

void TestDeviceBackend::refuse_recording(const char* op) const {
  throw std::logic_error(std::string("TestDeviceBackend: ") + op +
                         " with host memory while recording a graph (its copy could not be captured)");
}

void* TestDeviceBackend::mem_alloc(size_t bytes) const {
  not_recording("mem_alloc");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const size_t n = page_round(bytes);
  size_t at;
  if (auto it = free_.find(n); it != free_.end()) {
    at = it->second;
    free_.erase(it);
  } else {
    if (top_ + n > reserve_) throw std::bad_alloc();
    at = top_;
    top_ += n;
    const int prot = !fence_ || open_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE;
    if (mprotect(base_ + at, n, prot) != 0) throw std::runtime_error("TestDeviceBackend: mprotect failed");
  }
  live_[at] = n;
  ++epoch_;
  return base_ + at;
}

void TestDeviceBackend::mem_free(void* p) const {
  if (!p) return;
  not_recording("mem_free");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const size_t at = static_cast<size_t>(static_cast<char*>(p) - base_);
  auto it = live_.find(at);
  if (!is_device_pointer(p) || it == live_.end())
    throw std::invalid_argument("TestDeviceBackend::mem_free: not a block of this device");
  free_.emplace(it->second, at);
  live_.erase(it);
  ++epoch_;
}

void TestDeviceBackend::mem_zero(void* p, size_t bytes) const {
  if (!bytes) return;
  if (!is_device_pointer(p)) throw std::invalid_argument("TestDeviceBackend::mem_zero: not device memory");
  if (recording_) {
    recording_->steps.push_back([=, this] { mem_zero(p, bytes); });
    return;
  }
  Open open(*this);
  std::memset(p, 0, bytes);
}

void TestDeviceBackend::mem_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                    size_t height, CopyDir dir, CrossKind kind) const {
  if (!width || !height) return;
  // The pointers must be where the direction says: a copy "to the device" from device memory, or
  // to a host pointer, is a bug in the caller that a GPU would turn into a fault.
  const bool dst_dev = is_device_pointer(dst), src_dev = is_device_pointer(src);
  const bool ok = dir == CopyDir::to_device ? dst_dev && !src_dev
                  : dir == CopyDir::to_host ? !dst_dev && src_dev
                                            : dst_dev && src_dev;
  if (!ok) throw std::invalid_argument("TestDeviceBackend::mem_copy_2d: a pointer is not where the direction says");
  if (recording_) {
    // A captured copy reads (writes) its host side at each launch: pinned memory that stays put.
    const bool up = dir == CopyDir::to_device;
    if (dir != CopyDir::on_device && !host_allocated(up ? src : dst, (height - 1) * (up ? spitch : dpitch) + width))
      throw std::logic_error("TestDeviceBackend: a copy recorded into a graph uses host memory that is not "
                             "host_alloc'd (a CUDA graph cannot capture a copy from pageable memory)");
    recording_->steps.push_back([=, this] { copy_now(dst, dpitch, src, spitch, width, height, dir, kind); });
    return;
  }
  copy_now(dst, dpitch, src, spitch, width, height, dir, kind);
}

void TestDeviceBackend::copy_now(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                 size_t height, CopyDir dir, CrossKind kind) const {
  if (dir == CopyDir::to_device) log_.add(CrossDir::up, kind, static_cast<int64_t>(width * height));
  if (dir == CopyDir::to_host) log_.add(CrossDir::down, kind, static_cast<int64_t>(width * height));
  Open open(*this);
  cpu_.mem_copy_2d(dst, dpitch, src, spitch, width, height, dir, kind);
}

bool TestDeviceBackend::is_device_pointer(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return c >= base_ && c < base_ + reserve_;
}

void TestDeviceBackend::graph_begin() const {
  if (!graphs_) Backend::graph_begin();
  if (recording_) throw std::logic_error("TestDeviceBackend::graph_begin: already recording");
  recording_ = std::make_unique<Recording>();
}

std::unique_ptr<Backend::Graph> TestDeviceBackend::graph_end() const {
  if (!recording_) throw std::logic_error("TestDeviceBackend::graph_end: not recording");
  ++recorded_;
  recording_->epoch = epoch_;
  return std::move(recording_);
}

bool TestDeviceBackend::graph_launch(const Graph& g) const {
  not_recording("graph_launch");
  const auto* r = dynamic_cast<const Recording*>(&g);
  if (!r) throw std::invalid_argument("TestDeviceBackend::graph_launch: not a graph of this backend");
  if (r->epoch != epoch_) return false;
  ++launches_;
  for (const auto& step : r->steps) step();
  return true;
}

void* TestDeviceBackend::host_alloc(size_t bytes) const {
  not_recording("host_alloc");
  void* p = Backend::host_alloc(bytes);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  host_blocks_[static_cast<const char*>(p)] = bytes;
  return p;
}

void TestDeviceBackend::host_free(void* p) const {
  if (!p) return;
  not_recording("host_free");
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    host_blocks_.erase(static_cast<const char*>(p));
  }
  Backend::host_free(p);
}

bool TestDeviceBackend::host_allocated(const void* p, size_t bytes) const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const char* c = static_cast<const char*>(p);
  auto it = host_blocks_.upper_bound(c);
  if (it == host_blocks_.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

size_t TestDeviceBackend::device_bytes_in_use() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  size_t s = 0;
  for (const auto& [at, n] : live_) s += n;
  return s;
}

}  // namespace moerl
