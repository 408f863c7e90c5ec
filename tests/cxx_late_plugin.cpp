// A C++ library that a C program opens with dlopen after start-up, for
// test_cxx_late.c: its operator new and delete bind to the preloaded pool,
// whose C++ runtime was not loaded when the pool was.
#include <malloc.h>

#include <cstddef>
#include <new>

namespace {
int handler_calls;
void counting_handler() {
  if (++handler_calls == 2) std::set_new_handler(nullptr);
}
}  // namespace

// new[] and delete[] of 4096 bytes; returns the block's usable size
// (exactly 4096 from the pool, more from the C library's allocator).
extern "C" size_t late_new_usable() {
  char *p = new char[4096];
  p[0] = p[4095] = 1;
  size_t n = malloc_usable_size(p);
  delete[] p;
  return n;
}

// Past PTRDIFF_MAX, a size no allocator serves (half the address space
// can be had on a 32-bit target).  Volatile, so the compiler does not
// warn about a constant it can see is too large.
static volatile std::size_t impossible = ~std::size_t{0} / 2 + 1;

// A request no allocator can serve, with a handler that uninstalls itself
// on its second call: returns how many times it ran (2) if bad_alloc
// reached the catch, -1 if new returned.
extern "C" int late_new_oom() {
  handler_calls = 0;
  std::set_new_handler(counting_handler);
  try {
    void *p = ::operator new(impossible);
    ::operator delete(p);
    return -1;
  } catch (const std::bad_alloc &) {
    return handler_calls;
  }
}

// The nothrow form with no handler: nullptr.
extern "C" int late_new_nothrow_null() {
  std::set_new_handler(nullptr);
  return ::operator new(impossible, std::nothrow) == nullptr;
}
