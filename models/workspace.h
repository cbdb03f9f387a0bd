// workspace.h — buffers: Workspace (host memory, growable), ActBuffer (the backend's memory,
// growable: the activations the model's ops chain on) and DeviceArray (the backend's memory, fixed:
// the KV cache).
//
// Workspace: a std::vector whose resize leaves new elements
// uninitialised instead of zeroing them. Every element of an activation buffer is written ('=')
// by its op before anything reads it, so the zero-fill of std::vector::resize was pure cost: 7.6 %
// of an RL step of the collapse grid's model (memset), and page faults on the long answers' large
// buffers freed and reallocated at every forward.
//
// A build with -DMOERL_POISON_WORKSPACE=ON fills every new element with a quiet NaN instead, so
// a read before a write shows up as NaN in the tests' bit-for-bit comparisons (docs/performance.md,
// "The reference grid, side by side").
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace moerl {

template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}

  // value-initialisation (resize's new elements) becomes default-initialisation
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
#ifdef MOERL_POISON_WORKSPACE
    if constexpr (std::is_floating_point_v<U>) {
      ::new (static_cast<void*>(p)) U(std::numeric_limits<U>::quiet_NaN());
      return;
    }
#endif
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <class T>
using Workspace = std::vector<T, UninitAllocator<T>>;

// Where a BackendArray lives: the backend's own memory (kernels/backend.h, mem_*: host memory on
// the CPU backend, the device's on a GPU), or the host memory of its op graphs' copies
// (Backend::host_alloc: pinned on a GPU).
enum class ArrayMemory : uint8_t { backend, host };

// n elements, zero-filled, at an address that stays put: move-only, freed by the backend that
// allocated them, which must outlive them. In the backend's memory (DeviceArray) the host reaches
// the elements only through the backend (its ops, which take the pointer where it lies, and
// mem_copy_2d); data() is for passing it to them. Host memory (HostArray) the host reads and
// writes itself.
template <class T, ArrayMemory M>
class BackendArray {
 public:
  BackendArray() = default;
  BackendArray(const Backend& be, size_t n) : be_(&be), n_(n) {
    if constexpr (M == ArrayMemory::backend) {
      p_ = static_cast<T*>(be.mem_alloc(n * sizeof(T)));
      be.mem_zero(p_, n * sizeof(T));
    } else {
      p_ = static_cast<T*>(be.host_alloc(std::max<size_t>(n, 1) * sizeof(T)));
      std::fill_n(p_, n, T{});
    }
  }
  ~BackendArray() { release(); }
  BackendArray(const BackendArray&) = delete;
  BackendArray& operator=(const BackendArray&) = delete;
  BackendArray(BackendArray&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_) { o.be_ = nullptr; o.p_ = nullptr; o.n_ = 0; }
  BackendArray& operator=(BackendArray&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_; p_ = o.p_; n_ = o.n_;
      o.be_ = nullptr; o.p_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  const Backend* backend() const { return be_; }

 private:
  void release() {
    if (!be_) return;
    if constexpr (M == ArrayMemory::backend) be_->mem_free(p_);
    else be_->host_free(p_);
  }
  const Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};
template <class T>
using DeviceArray = BackendArray<T, ArrayMemory::backend>;
template <class T>
using HostArray = BackendArray<T, ArrayMemory::host>;

// A growable array in a backend's own memory (kernels/backend.h, mem_*), the activations'
// buffer: host memory on the CPU backend (used there as a Workspace is), the device's on a GPU,
// where consecutive ops chain on it without a crossing (docs/gpu.md, "What crosses"). The host
// reaches its elements only through the backend's ops and mem_copy_2d. resize(be, n) keeps the
// memory while n fits and the backend is the same; otherwise it allocates anew, and the contents
// are then undefined (every element is written by its op before it is read, as a Workspace's).
// Under MOERL_POISON_WORKSPACE new host memory is filled with quiet NaNs, as a Workspace's.
template <class T>
class ActBuffer {
 public:
  ActBuffer() = default;
  ~ActBuffer() { release(); }
  ActBuffer(const ActBuffer&) = delete;
  ActBuffer& operator=(const ActBuffer&) = delete;
  ActBuffer(ActBuffer&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_), cap_(o.cap_) { o.forget(); }
  ActBuffer& operator=(ActBuffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_; p_ = o.p_; n_ = o.n_; cap_ = o.cap_;
      o.forget();
    }
    return *this;
  }
  void resize(const Backend& be, size_t n) {
    if (&be == be_ && n <= cap_) {
      n_ = n;
      return;
    }
    release();
    be_ = &be;
    cap_ = std::max<size_t>(n, 1);
    p_ = static_cast<T*>(be.mem_alloc(cap_ * sizeof(T)));
    n_ = n;
#ifdef MOERL_POISON_WORKSPACE
    if constexpr (std::is_floating_point_v<T>)
      if (be.memory_space() == MemorySpace::host) std::fill_n(p_, cap_, std::numeric_limits<T>::quiet_NaN());
#endif
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }

 private:
  void release() {
    if (be_) be_->mem_free(p_);
    forget();
  }
  void forget() { be_ = nullptr; p_ = nullptr; n_ = cap_ = 0; }
  const Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

// dst = src, n elements of backend memory (resized to n): one copy within it.
template <class T>
void act_copy(const Backend& be, ActBuffer<T>* dst, const T* src, size_t n) {
  dst->resize(be, n);
  if (n) be.mem_copy(dst->data(), src, n * sizeof(T), CopyDir::on_device, CrossKind::activations);
}

// The host's copy of n elements of backend memory: downloaded into *host (activations) where the
// backend's memory is the device's; src itself where it is the host's (nothing crosses).
template <class V, class T>
const T* act_to_host(const Backend& be, V* host, const T* src, size_t n) {
  if (be.memory_space() == MemorySpace::host) return src;
  host->resize(n);
  if (n) be.mem_copy(host->data(), src, n * sizeof(T), CopyDir::to_host, CrossKind::activations);
  return host->data();
}

}  // namespace moerl
