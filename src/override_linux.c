/* The malloc family for Linux programs: every name a glibc or musl
 * program may call to allocate or free, so LD_PRELOAD (or linking the
 * library) replaces the C library's allocator entirely.  Each is a tail
 * call into the pool.  glibc's extra names (its __libc_* aliases, cfree,
 * pvalloc, malloc_trim) are defined only against glibc: musl has none of
 * them as public names, and a static musl link must not meet a second
 * definition of a name its own archive uses internally. */
#include "internal.h"

#define KP_EXPORT KAME_POOL_EXPORT

/* The hit paths are inlined here rather than reached by a jump. */
KP_EXPORT KP_HOT_ENTRY void *malloc(size_t size) { return kp_malloc_inline(size); }
KP_EXPORT KP_HOT_ENTRY void free(void *p) { kp_free_inline(p); }
KP_EXPORT void *calloc(size_t count, size_t size) { return kp_calloc(count, size); }
KP_EXPORT void *realloc(void *p, size_t size) { return kp_realloc(p, size); }
KP_EXPORT void *memalign(size_t align, size_t size) { return kp_memalign(align, size); }
KP_EXPORT int posix_memalign(void **out, size_t align, size_t size) { return kp_posix_memalign(out, align, size); }
KP_EXPORT size_t malloc_usable_size(void *p) { return kp_usable_size(p); }

KP_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return kp_realloc(p, bytes);
}

KP_EXPORT void *aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return kp_memalign(align, size);
}

KP_EXPORT void *valloc(size_t size) { return kp_memalign(kp_page_size(), size); }

/* C23: the size and alignment are hints the pool does not need. */
KP_EXPORT void free_sized(void *p, size_t size) {
  (void)size;
  kp_free(p);
}
KP_EXPORT void free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  (void)size;
  kp_free(p);
}

#ifdef __GLIBC__
KP_EXPORT void cfree(void *p) { kp_free(p); }

KP_EXPORT void *pvalloc(size_t size) {
  size_t page = kp_page_size();
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  return kp_memalign(page, size ? (size + page - 1) & ~(page - 1) : page);
}

/* glibc's own names for its allocator, which some programs and libraries
 * call directly. */
KP_EXPORT void *__libc_malloc(size_t size) { return kp_malloc(size); }
KP_EXPORT void __libc_free(void *p) { kp_free(p); }
KP_EXPORT void *__libc_calloc(size_t count, size_t size) { return kp_calloc(count, size); }
KP_EXPORT void *__libc_realloc(void *p, size_t size) { return kp_realloc(p, size); }
KP_EXPORT void *__libc_memalign(size_t align, size_t size) { return kp_memalign(align, size); }
KP_EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
KP_EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }

/* malloc_trim(0) is how glibc programs ask for memory back. */
KP_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return kp_trim() != 0;
}
#endif
