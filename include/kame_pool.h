/* kamepoolalloc: a lock-free, per-thread, four-tier memory allocator.
 *
 * The functions below are the explicit C API.  They can be used with or
 * without the malloc-family override that the shared library also provides
 * (see README.md).  All of them are thread-safe, never throw and never abort.
 */
#ifndef KAME_POOL_H
#define KAME_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KAME_POOL_API __attribute__((visibility("default")))
#define KAME_POOL_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define KAME_POOL_API
#define KAME_POOL_MALLOC_ATTR
#endif

#define KAME_POOL_VERSION_MAJOR 0
#define KAME_POOL_VERSION_MINOR 1
#define KAME_POOL_VERSION_PATCH 0

/* Allocation, with the semantics of the C library functions of the same
 * name.  Sizes that cannot be served return NULL with errno = ENOMEM; an
 * invalid alignment gives EINVAL.  kame_pool_free and kame_pool_realloc
 * accept pointers the pool did not allocate (they go to the system
 * allocator).  kame_pool_realloc(p, 0) with p != NULL frees p and returns
 * NULL, as glibc does. */
KAME_POOL_API void *kame_pool_malloc(size_t size) KAME_POOL_MALLOC_ATTR;
KAME_POOL_API void *kame_pool_calloc(size_t count, size_t size) KAME_POOL_MALLOC_ATTR;
KAME_POOL_API void *kame_pool_realloc(void *ptr, size_t size);
KAME_POOL_API void kame_pool_free(void *ptr);
KAME_POOL_API void *kame_pool_aligned_alloc(size_t alignment, size_t size) KAME_POOL_MALLOC_ATTR;
KAME_POOL_API int kame_pool_posix_memalign(void **out, size_t alignment, size_t size);
KAME_POOL_API size_t kame_pool_malloc_usable_size(const void *ptr);

/* Ceiling on the address space the pool maps (regions and large and huge
 * blocks together).  Past it, requests are served by the system allocator
 * instead of failing.  0 restores the default (no practical limit). */
KAME_POOL_API void kame_pool_set_max_bytes(size_t bytes);
KAME_POOL_API size_t kame_pool_get_max_bytes(void);
/* Bytes currently mapped by the pool: regions plus live large/huge blocks. */
KAME_POOL_API size_t kame_pool_reserved_bytes(void);

/* Gives back to the OS what no thread needs: the pages of free units kept
 * resident for reuse, the calling thread's empty chunks, and chunks left by
 * exited threads that have since emptied.  The malloc_trim analogue. */
KAME_POOL_API void kame_pool_trim(void);

#ifdef __cplusplus
}
#endif

#endif /* KAME_POOL_H */
