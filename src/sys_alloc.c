/* The fallback to the system allocator: the policy, portable.  The pool
 * hands a request to the system allocator when it cannot serve it itself
 * (past the byte ceiling, or the OS refused memory), and a pointer it did
 * not allocate goes back there (free, realloc, malloc_usable_size of a
 * foreign pointer).  Which allocator "the system's" is, and how it is
 * reached, is per OS and C library: sys_alloc_<os>.c provides the
 * kp_sys_* calls. */
#include "internal.h"

void *kp_fallback_alloc(size_t size, size_t align, bool zero) {
  void *p;
  if (align > KP_MIN_ALIGN) p = kp_sys_memalign(align, size);
  else p = zero ? kp_sys_calloc(1, size) : kp_sys_malloc(size);
  if (p == NULL) errno = ENOMEM;
  return p;
}

/* The bucket tier serves an aligned request from a class whose slots are
 * aligned; past the ceiling it falls back without knowing the alignment,
 * and the system allocator promises only KP_MIN_ALIGN.  Such a block is
 * exchanged for one of the system allocator's aligned ones. */
void *kp_fallback_realign(void *p, size_t size, size_t align) {
  if (p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
  kp_sys_free(p);
  return kp_fallback_alloc(size, align, false);
}
