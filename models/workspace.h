// workspace.h — the activations' buffers: a std::vector whose resize leaves new elements
// uninitialised instead of zeroing them. Every element of an activation buffer is written ('=')
// by its op before anything reads it, so the zero-fill of std::vector::resize was pure cost: 7.6 %
// of an RL step of the collapse grid's model (memset), and page faults on the long answers' large
// buffers freed and reallocated at every forward.
//
// A build with -DMOERL_POISON_WORKSPACE=ON fills every new element with a quiet NaN instead, so
// a read before a write shows up as NaN in the tests' bit-for-bit comparisons (docs/performance.md,
// "The reference grid, side by side").
#pragma once

#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

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

}  // namespace moerl
