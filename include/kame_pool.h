/* kamepoolalloc: a lock-free, per-thread, four-tier memory allocator.
 *
 * The functions below are the explicit C API.  They can be used with or
 * without the malloc-family override that the shared library also provides
 * (see README.md).  All of them are thread-safe and never throw.  None
 * aborts on its own account; a pointer that is not a live block of the
 * pool (a double free, an interior or wild pointer into the pool's memory)
 * given to kame_pool_free, kame_pool_realloc or
 * kame_pool_malloc_usable_size is reported on stderr and aborts the
 * process at the default check level (see kame_pool_set_check_level).
 */
#ifndef KAME_POOL_H
#define KAME_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
/* The DLL exports what it is built with KAME_POOL_BUILD marking; a
 * program calls the functions through the import library either way. */
#if defined(KAME_POOL_BUILD)
#define KAME_POOL_API __declspec(dllexport)
#else
#define KAME_POOL_API
#endif
#if defined(__GNUC__)
#define KAME_POOL_MALLOC_ATTR __attribute__((malloc, warn_unused_result))
#else
#define KAME_POOL_MALLOC_ATTR
#endif
#elif defined(__GNUC__)
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
 * instead of failing.  0 restores the default: no practical limit on
 * 64-bit targets, 2 GiB (half the address space) on 32-bit ones. */
KAME_POOL_API void kame_pool_set_max_bytes(size_t bytes);
KAME_POOL_API size_t kame_pool_get_max_bytes(void);
/* Bytes currently mapped by the pool: regions plus live large/huge blocks. */
KAME_POOL_API size_t kame_pool_reserved_bytes(void);

/* Gives back to the OS what no thread needs: the recycle cache (the calling
 * thread's part and the global part), the calling thread's empty chunks
 * and its batched cross-thread frees, and pages of free units kept
 * resident.  The malloc_trim analogue. */
KAME_POOL_API void kame_pool_trim(void);

/* The recycle cache keeps freed blocks from 32 KiB up to the cache's top
 * (64 MiB by default) warm for reuse.  Its byte cap bounds what all threads'
 * caches hold together (default 512 MiB on 64-bit targets, 64 MiB on
 * 32-bit); past it, freed blocks go back to the OS.  Lowering the cap gives
 * back the excess of the global part and the calling thread's part now. */
KAME_POOL_API void kame_pool_set_large_cache_cap(size_t bytes);
KAME_POOL_API size_t kame_pool_get_large_cache_cap(void);
/* The largest block the cache keeps (default 64 MiB, at most 1 GiB - 1);
 * larger blocks are mapped and unmapped each time. */
KAME_POOL_API void kame_pool_set_large_cache_top(size_t bytes);
KAME_POOL_API size_t kame_pool_get_large_cache_top(void);
/* Cached blocks left unused for two drain intervals go back to the OS, a
 * few at a time, checked when a thread allocates on a slow path (there is
 * no background thread).  0 turns this off.  Default 10 ms. */
KAME_POOL_API void kame_pool_set_lazy_drain_interval_ms(unsigned ms);
KAME_POOL_API unsigned kame_pool_get_lazy_drain_interval_ms(void);
/* On (the default): memory an exiting thread held for reuse (its cache
 * and its empty chunks) goes back to the OS at once.  Off: it goes to the
 * global cache, within the cap, for other threads. */
KAME_POOL_API void kame_pool_set_thread_exit_reclaim(int on);
KAME_POOL_API int kame_pool_get_thread_exit_reclaim(void);

/* How much checking the pool does on the pointers it is given:
 *   0  a bad pointer is ignored (the free does nothing);
 *   1  (default) double frees of any block, and pointers into the pool's
 *      memory that are not live blocks, are reported on stderr and abort;
 *      an interior pointer of a small block freed by the thread that owns
 *      its chunk is not caught at this level;
 *   2  as 1, and every free of a small block is checked in full (catching
 *      that case too), as is every free list before it is used; slower.
 * Also set by the environment variable KAME_POOL_CHECK at start-up.  Takes
 * effect at once for the calling thread, and for other threads' chunks as
 * they take new ones. */
KAME_POOL_API void kame_pool_set_check_level(int level);
KAME_POOL_API int kame_pool_get_check_level(void);
/* Walks every region of the pool and the calling thread's heap, reports
 * each inconsistency on stderr and returns how many it found (0 when all
 * is well).  For tests and debugging. */
KAME_POOL_API int kame_pool_validate(void);

#ifdef __cplusplus
}
#endif

#endif /* KAME_POOL_H */
