// kamepoolalloc: what the C++ adaptors share.  Not for direct use.
//
// The adaptors allocate through the C API (kame_pool.h), so they work with
// or without the library's replacement of malloc and operator new.  They
// keep the standard allocators' out-of-memory behaviour: the installed
// std::new_handler is called while an attempt fails and one is installed,
// then std::bad_alloc is thrown (std::abort() without exceptions).
#ifndef KAME_POOL_DETAIL_ALLOCATE_HPP
#define KAME_POOL_DETAIL_ALLOCATE_HPP

#include <cstddef>
#include <cstdlib>
#include <new>

#include <kame_pool.h>

namespace kame {
namespace detail {

[[noreturn]] inline void throw_bad_alloc() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw std::bad_alloc();
#else
  std::abort();
#endif
}

[[noreturn]] inline void throw_bad_array_new_length() {
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
  throw std::bad_array_new_length();
#else
  std::abort();
#endif
}

// One attempt: up to pointer alignment every block of the pool is aligned
// enough, so the plain call serves it; anything more asks for it (at least
// one byte, so that a zero-byte request still gets a block of its own).
inline void *try_allocate(std::size_t bytes, std::size_t align) noexcept {
  if (align <= alignof(void *)) return kame_pool_malloc(bytes);
  return kame_pool_aligned_alloc(align, bytes ? bytes : 1);
}

// A block of BYTES aligned to ALIGN (a power of two), or the
// new-handler loop and then std::bad_alloc.
inline void *allocate(std::size_t bytes, std::size_t align) {
  for (;;) {
    if (void *p = try_allocate(bytes, align)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw_bad_alloc();
    handler();
  }
}

// Bytes for N objects of SIZE bytes, or std::bad_array_new_length when
// that does not fit in a size_t, as std::allocator does.
inline std::size_t array_bytes(std::size_t n, std::size_t size) {
  std::size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) throw_bad_array_new_length();
  return bytes;
}

inline void deallocate(void *p) noexcept { kame_pool_free(p); }

}  // namespace detail
}  // namespace kame

#endif
