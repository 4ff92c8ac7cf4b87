// Activation buffers of the fast path without zero-initialisation: every element is written by a
// kernel before it is read (matmul outputs, conv / norm outputs), so value-initialising them only
// costs a memset per buffer per layer (measured ~4% of K3-mini prefill). Use `FBuf b(n)` where
// std::vector<float> b(n) would be written in full anyway; use std::vector when zeros are needed.
#pragma once
#include <memory>
#include <new>
#include <vector>

namespace k3 {

/// std::allocator that default-initialises (leaves trivially constructible elements
/// uninitialised) on resize / size construction instead of value-initialising them.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// fp32 buffer [n] whose elements start uninitialised (see above).
using FBuf = std::vector<float, DefaultInitAllocator<float>>;

}  // namespace k3
