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

/* Gives back to the OS what no thread needs: the recycle cache (the calling
 * thread's part and the global part), the calling thread's empty chunks
 * and its batched cross-thread frees, pages of free units kept resident,
 * and mappings realtime frees parked.  The malloc_trim analogue.  A
 * realtime thread prewarms again after it. */
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

/* ---- Realtime work (docs/realtime.md states the contract) ----------------
 * A thread marked realtime makes no system call in free: a chunk's pages
 * are kept resident instead of being given back (the chunk itself is
 * still free for reuse), and a mapping that would be unmapped is parked,
 * to be unmapped by kame_pool_rt_drain or kame_pool_trim. */
#define KAME_RT_OFF 0
#define KAME_RT_DEFER 1  /* frees make no system call */
#define KAME_RT_STRICT 2 /* also publishes every cross-thread free at once */

/* Marks the calling thread; returns its previous mark, so a scope can
 * restore it.  The thread's effective level is the higher of its mark and
 * the process-wide default; kame_pool_get_realtime_thread returns that
 * effective level.  Unknown levels are taken as KAME_RT_STRICT. */
KAME_POOL_API int kame_pool_set_realtime_thread(int level);
KAME_POOL_API int kame_pool_get_realtime_thread(void);
/* A floor for every thread: KAME_RT_OFF or KAME_RT_DEFER (higher values are
 * taken as KAME_RT_DEFER: STRICT costs throughput and is per thread). */
KAME_POOL_API void kame_pool_set_realtime_default(int level);
KAME_POOL_API int kame_pool_get_realtime_default(void);
/* On: no background release path runs for any thread: the lazy drain
 * stops, an exiting thread's cached memory goes to the global cache
 * instead of back to the OS, and no thread's chunk release purges pages
 * (kame_pool_trim still gives everything back).  The settings of
 * kame_pool_set_lazy_drain_interval_ms and kame_pool_set_thread_exit_reclaim
 * are kept and apply again when the mode is turned off. */
KAME_POOL_API void kame_pool_set_realtime_mode(int on);
KAME_POOL_API int kame_pool_get_realtime_mode(void);

/* For the calling thread: allocates counts[i] blocks of sizes[i] for each
 * i < n, writes to every page of each, and frees them, so that the same
 * working set is then served from resident, cached memory.  Returns 0 when
 * every block came from the pool, -1 otherwise (a block the pool could not
 * serve, or bad arguments). */
KAME_POOL_API int kame_pool_prewarm(const size_t *sizes, const unsigned *counts, unsigned n);
/* Maps n more 32 MiB regions now (regions are never unmapped); with
 * prefault, also makes every page of their free units resident.  Returns
 * how many it made. */
KAME_POOL_API unsigned kame_pool_reserve_regions(unsigned n, int prefault);
/* Pins (and populates) every region the pool has mapped so far, or unpins
 * them; only the pool's regions, not its large blocks nor the rest of the
 * process.  Return the bytes the OS accepted (RLIMIT_MEMLOCK applies). */
KAME_POOL_API size_t kame_pool_mlock_regions(void);
KAME_POOL_API size_t kame_pool_munlock_regions(void);

/* Unmaps every mapping realtime frees parked; the caches stay as they
 * are.  Call it from a non-critical phase.  Returns the bytes unmapped. */
KAME_POOL_API size_t kame_pool_rt_drain(void);
/* Bound on the bytes parked (default 1 GiB).  A realtime free that would
 * park past it unmaps at once instead, and counts a forced release. */
KAME_POOL_API void kame_pool_set_rt_pending_cap(size_t bytes);
KAME_POOL_API size_t kame_pool_get_rt_pending_cap(void);
KAME_POOL_API size_t kame_pool_rt_pending_bytes(void);
/* Counters since start-up: realtime allocations that needed a new mapping
 * (under KAME_RT_OS_COUNT, FAIL and ABORT), and realtime frees that made a
 * system call because the parking space was exhausted.  A section kept
 * the contract iff both are unchanged across it. */
KAME_POOL_API unsigned long long kame_pool_rt_violations(void);
KAME_POOL_API unsigned long long kame_pool_rt_forced_releases(void);

/* What a realtime thread's allocation does when it needs a new mapping
 * (the working set grew past what was prewarmed): */
#define KAME_RT_OS_ALLOW 0 /* map (default); not counted */
#define KAME_RT_OS_COUNT 1 /* map, and count a violation */
#define KAME_RT_OS_FAIL 2  /* count, make no call: the request goes to the system allocator */
#define KAME_RT_OS_ABORT 3 /* count, report on stderr and abort */
KAME_POOL_API void kame_pool_set_rt_os_policy(int policy);
KAME_POOL_API int kame_pool_get_rt_os_policy(void);

/* Transparent huge pages for the pool's regions and large blocks.  SYSTEM
 * (default) leaves the kernel's setting alone; ALWAYS and NEVER advise
 * every region and live large block now and every new one as it is
 * mapped.  Returns the bytes advised now.  Advice once given cannot be
 * withdrawn: going back to SYSTEM only stops advising new mappings. */
#define KAME_THP_SYSTEM 0
#define KAME_THP_ALWAYS 1
#define KAME_THP_NEVER 2
KAME_POOL_API size_t kame_pool_set_thp_policy(int policy);
KAME_POOL_API int kame_pool_get_thp_policy(void);

#ifdef __cplusplus
}
#endif

#endif /* KAME_POOL_H */
