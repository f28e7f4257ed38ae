// PageAllocator: an allocator whose large blocks are anonymous mappings of their own, for arrays
// that grow, shrink and are freed many times over a long run (StreamKvCache's heads). Through
// malloc, freed blocks of those sizes stay in the heap as holes that the process's resident size
// keeps counting; a mapping goes back to the system the moment it is freed.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <new>

namespace kvzip::model::detail {

inline constexpr size_t kPagedBytes = size_t(64) << 10;  // smaller blocks come from operator new

template <class T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kPagedBytes) return static_cast<T*>(::operator new(bytes));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = n * sizeof(T);
    if (bytes < kPagedBytes) {
      ::operator delete(p);
    } else {
      munmap(p, bytes);
    }
  }
  template <class U>
  bool operator==(const PageAllocator<U>&) const {
    return true;
  }
};

}  // namespace kvzip::model::detail
