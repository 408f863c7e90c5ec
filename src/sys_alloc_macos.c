/* The system allocator on macOS, for pointers the pool did not allocate
 * (blocks of malloc zones made before the pool was loaded, or by code
 * that asks a zone directly) and for requests past the pool's byte
 * ceiling.  Compile-checked, never run (README.md, Platforms).
 *
 * The override replaces the malloc family through dyld's interposing
 * (override_macos.c), which applies to every image except the one that
 * interposes: a call to malloc from inside the pool's own library still
 * reaches the system's.  So with or without the override the system
 * allocator is reached by its public names. */
#include "internal.h"

#include <malloc/malloc.h>
#include <stdlib.h>

void *kp_sys_malloc(size_t size) { return malloc(size); }
void *kp_sys_calloc(size_t count, size_t size) { return calloc(count, size); }
void *kp_sys_realloc(void *p, size_t size) { return realloc(p, size); }

/* posix_memalign rather than aligned_alloc, which needs macOS 10.15 and
 * a size that is a multiple of the alignment. */
void *kp_sys_memalign(size_t align, size_t size) {
  void *p = NULL;
  int saved = errno;
  int rc = posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size);
  errno = saved;
  return rc == 0 ? p : NULL;
}

void kp_sys_free(void *p) {
  int saved = errno;
  free(p);
  errno = saved;
}

size_t kp_sys_usable_size(void *p) { return malloc_size(p); }
