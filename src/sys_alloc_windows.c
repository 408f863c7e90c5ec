/* The system allocator on Windows: the C runtime's heap, for pointers the
 * pool did not allocate and for requests past the pool's byte ceiling.
 *
 * The pool does not replace the CRT's malloc on Windows (yet), so the
 * CRT's functions are simply called.  An aligned block of the CRT must be
 * freed with _aligned_free, not free, and a foreign pointer does not say
 * which it is: aligned requests past the ceiling therefore fail (ENOMEM)
 * instead of going to _aligned_malloc. */
#include "internal.h"

#include <malloc.h>
#include <stdlib.h>

void *kp_sys_malloc(size_t size) { return malloc(size); }
void *kp_sys_calloc(size_t count, size_t size) { return calloc(count, size); }
void *kp_sys_realloc(void *p, size_t size) { return realloc(p, size); }
void *kp_sys_memalign(size_t align, size_t size) {
  (void)align;
  (void)size;
  return NULL;
}
void kp_sys_free(void *p) {
  int saved = errno;
  free(p);
  errno = saved;
}
size_t kp_sys_usable_size(void *p) { return _msize(p); }
