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
#include <stdio.h>

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

#ifdef _WIN32
/* Windows: routes the malloc family (malloc, calloc, realloc, free, _msize,
 * _expand, _recalloc, _aligned_malloc, _aligned_realloc, _aligned_free,
 * _aligned_msize) of every loaded module bound to a C runtime DLL to the
 * pool, by rewriting the modules' import tables, and has modules loaded
 * later rewritten as they load.  The DLL does this itself when it loads;
 * a program linked with the static library calls it first thing in main,
 * and anyone may call it again (it is idempotent).  A block the pool did
 * not allocate, given to a rewritten free, realloc or _msize, goes to the
 * runtime the caller was bound to.  Returns the import entries rewritten
 * by this call.  Not in a library built with KAME_POOL_OVERRIDE=OFF. */
KAME_POOL_API unsigned kame_pool_redirect(void);
#endif

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
 * and its batched cross-thread frees, pages of free units kept resident,
 * and mappings realtime frees parked.  The malloc_trim analogue.  A
 * realtime thread prewarms again after it. */
KAME_POOL_API void kame_pool_trim(void);

/* The recycle cache keeps freed blocks from 32 KiB up to the cache's top
 * (64 MiB by default) warm for reuse.  Its byte cap bounds what all threads'
 * caches hold together (default 512 MiB on 64-bit targets, 64 MiB on
 * 32-bit); past it, freed blocks go back to the OS.  Freed chunks the cache
 * does not take keep their pages, within 1/32 of the cap, until the drain
 * finds them idle; the next chunk of the pool reuses them first.  Lowering
 * the cap gives back the excess of the global part and the calling
 * thread's part now. */
KAME_POOL_API void kame_pool_set_large_cache_cap(size_t bytes);
KAME_POOL_API size_t kame_pool_get_large_cache_cap(void);
/* The largest block the cache keeps (default 64 MiB, at most 1 GiB - 1);
 * larger blocks are mapped and unmapped each time.  It bounds the mapped
 * blocks (above 4 MiB): the blocks of 4 MiB and less are chunks of the
 * pool's regions, which the cache keeps whatever the top, so a top below
 * 4 MiB keeps no mapped block.  Lowering it gives back
 * the calling thread's cached blocks above it now; another thread stops
 * keeping them at its next slow-path allocation or within 256 frees of big
 * blocks, and its blocks above the top then go back to the OS. */
KAME_POOL_API void kame_pool_set_large_cache_top(size_t bytes);
KAME_POOL_API size_t kame_pool_get_large_cache_top(void);
/* Cached blocks left unused for two drain intervals go back to the OS, a
 * few at a time, checked when a thread allocates on a slow path (there is
 * no background thread); blocks that threads free for others to take stay
 * while their size was asked for within the last eight intervals.  Freed
 * chunks' pages kept outside the cache go back after ten intervals.  A new
 * interval counts from the call.  0 turns this off (and freed chunks the
 * cache does not take are purged at once).  Default 10 ms. */
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

/* Transparent huge pages for the pool's regions and large blocks.  BLOCKS
 * (default) advises huge pages for the large and huge blocks the recycle
 * cache can keep (2 MiB up to its top), live and new, and leaves the
 * regions and the blocks above the top to the kernel's setting; SYSTEM
 * leaves everything to it; ALWAYS and NEVER advise every region and live
 * large block now and every new one as it is mapped.  Returns the bytes
 * advised now.  Advice once given cannot be withdrawn: going to SYSTEM
 * only stops advising new mappings, going to BLOCKS leaves the regions'
 * advice as it was. */
#define KAME_THP_SYSTEM 0
#define KAME_THP_ALWAYS 1
#define KAME_THP_NEVER 2
#define KAME_THP_BLOCKS 3
KAME_POOL_API size_t kame_pool_set_thp_policy(int policy);
KAME_POOL_API int kame_pool_get_thp_policy(void);

/* ---- Options ---------------------------------------------------------------
 * Every knob above is also an option: a row of one table, set at start-up
 * by the environment variable KAME_POOL_<NAME> (read once, when the
 * library is loaded) and at any time by its kame_pool_set_* call or by
 * kame_pool_set_option.  Values parse the same way everywhere: booleans as
 * 1/true/on/yes or 0/false/off/no, sizes as a number with an optional
 * K, M, G or T suffix (powers of 1024; "64M", "2G", "512KiB"), a few as
 * words (KAME_POOL_CHECK=full) or the word's number.  A malformed value is
 * reported on stderr and ignored.  The table is listed in
 * kamepoolalloc(3) and printed by kame_pool_print_options.
 *
 *   KAME_POOL_VERBOSE=1     prints the options in force at start-up
 *   KAME_POOL_SHOW_STATS=1  prints the statistics (below) at exit
 *   KAME_POOL_STATS_JSON=1  ... as JSON instead of a table */
KAME_POOL_API void kame_pool_set_verbose(int on);
KAME_POOL_API int kame_pool_get_verbose(void);
KAME_POOL_API void kame_pool_set_show_stats(int on);
KAME_POOL_API int kame_pool_get_show_stats(void);
KAME_POOL_API void kame_pool_set_stats_json(int on);
KAME_POOL_API int kame_pool_get_stats_json(void);
/* Sets option `name` (without the KAME_POOL_ prefix, any case) from text,
 * parsed as its environment variable would be.  Returns 0, or EINVAL for
 * an unknown name or a malformed value (nothing is changed then). */
KAME_POOL_API int kame_pool_set_option(const char *name, const char *value);
/* The option's value in force (booleans 0/1); EINVAL for an unknown name. */
KAME_POOL_API int kame_pool_get_option(const char *name, unsigned long long *value);
/* Prints every option, KAME_POOL_<NAME>=value, one a line (stderr when
 * `out` is NULL). */
KAME_POOL_API void kame_pool_print_options(FILE *out);

/* ---- Statistics --------------------------------------------------------------
 * kame_pool_get_stats fills a kame_pool_stats_t from the pool's own state.
 * Nothing is counted on the malloc/free hit paths: each figure is either
 *   EXACT     a counter kept on a slow path (always exact), or
 *   SNAPSHOT  derived when read, by walking the regions' chunk headers,
 *             the address map and the caches: exact while no other thread
 *             allocates or frees, otherwise a near value (each chunk is
 *             read as it is at that instant, not all at one instant).
 * Live bytes are slot or block capacities (what malloc_usable_size says),
 * not the sizes requested.
 *
 * Versioning: the caller sets `version` to the KAME_POOL_STATS_VERSION it
 * was built with (KAME_POOL_STATS_INIT does); the library fills the fields
 * that version has and sets `version` to the version it filled and `size`
 * to the bytes it wrote.  Fields are only ever appended, so a caller built
 * against an older header gets exactly the fields it knows.
 *
 * One list defines the struct, the table and the JSON printers:
 *   X(name, since_version, accuracy, unit, description, source)
 * `source` is how the library computes the figure; it is expanded only
 * inside the library. */
#define KAME_POOL_STATS_VERSION 1

#define KAME_POOL_STATS_FIELDS(X)                                                                   \
  X(reserved_bytes, 1, EXACT, BYTES, "address space mapped: regions, large and huge blocks", kp_reserved_now()) \
  X(reserved_peak_bytes, 1, EXACT, BYTES, "highest reserved_bytes so far", kp_reserved_peak()) \
  X(regions, 1, EXACT, COUNT, "32 MiB regions (never unmapped)", g.regions) \
  X(units_claimed, 1, SNAPSHOT, COUNT, "256 KiB units in chunks (metadata units excluded)", g.units_claimed) \
  X(units_dirty, 1, SNAPSHOT, COUNT, "free units whose pages may be resident", g.units_dirty) \
  X(units_clean, 1, SNAPSHOT, COUNT, "free units purged or never touched", g.units_clean) \
  X(chunks_bucket, 1, SNAPSHOT, COUNT, "bucket chunks (owned or detached)", g.chunks_bucket) \
  X(chunks_detached, 1, SNAPSHOT, COUNT, "bucket chunks no thread owns (orphans)", g.chunks_detached) \
  X(chunks_reusable, 1, EXACT, COUNT, "detached chunks marked as having slots to give", kp_remote_reusable_count()) \
  X(chunks_dedicated, 1, SNAPSHOT, COUNT, "dedicated chunks holding a live block", g.chunks_dedicated) \
  X(chunks_cached, 1, SNAPSHOT, COUNT, "chunks held by the recycle cache", g.chunks_cached) \
  X(small_live_blocks, 1, SNAPSHOT, COUNT, "live blocks of the bucket tier (up to 32 KiB)", g.small_blocks) \
  X(small_live_bytes, 1, SNAPSHOT, BYTES, "their slot bytes", g.small_bytes) \
  X(small_free_bytes, 1, SNAPSHOT, BYTES, "bytes of bucket chunks not in live slots", g.small_free) \
  X(dedicated_live_blocks, 1, SNAPSHOT, COUNT, "live blocks of the dedicated tier (32 KiB .. 4 MiB)", g.chunks_dedicated) \
  X(dedicated_live_bytes, 1, SNAPSHOT, BYTES, "their chunk bytes", g.dedicated_bytes) \
  X(large_live_blocks, 1, SNAPSHOT, COUNT, "live blocks of the large tier (4 .. 32 MiB)", g.large_blocks) \
  X(large_live_bytes, 1, SNAPSHOT, BYTES, "their mapping bytes", g.large_bytes) \
  X(huge_live_blocks, 1, SNAPSHOT, COUNT, "live blocks of the huge tier (above 32 MiB)", g.huge_blocks) \
  X(huge_live_bytes, 1, SNAPSHOT, BYTES, "their mapping bytes", g.huge_bytes) \
  X(live_bytes, 1, SNAPSHOT, BYTES, "live bytes of every tier", g.small_bytes + g.dedicated_bytes + g.large_bytes + g.huge_bytes) \
  X(cache_bytes, 1, SNAPSHOT, BYTES, "held by the recycle cache (every thread's part and the global part)", g.cache_chunk_bytes + g.cache_map_bytes) \
  X(cache_global_bytes, 1, EXACT, BYTES, "held by the global part of the cache", kp_cache_l2_bytes()) \
  X(cache_chunk_bytes, 1, SNAPSHOT, BYTES, "chunks held by the cache", g.cache_chunk_bytes) \
  X(cache_mappings, 1, SNAPSHOT, COUNT, "mappings held by the cache", g.cache_maps) \
  X(cache_mapping_bytes, 1, SNAPSHOT, BYTES, "their bytes", g.cache_map_bytes) \
  X(purged_bytes, 1, EXACT, BYTES, "bytes whose pages were given back to the OS, mapping kept", kp_stat_purged_bytes()) \
  X(unmapped_bytes, 1, EXACT, BYTES, "bytes of blocks unmapped", kp_stat_unmapped_bytes()) \
  X(unmap_pending_bytes, 1, EXACT, BYTES, "bytes the OS refused to unmap, purged, to be retried", kp_unmap_pending_bytes()) \
  X(trims, 1, EXACT, COUNT, "trims (kame_pool_trim, malloc_trim)", kp_stat_trims()) \
  X(trim_returned_bytes, 1, EXACT, BYTES, "bytes the trims gave back to the OS", kp_stat_trim_bytes()) \
  X(drain_ticks, 1, EXACT, COUNT, "drain intervals elapsed while the pool was busy", kp_drain_now()) \
  X(threads_seen, 1, EXACT, COUNT, "thread heaps made so far", kp_heaps_made()) \
  X(threads_live, 1, EXACT, COUNT, "thread heaps alive now", kp_heaps_live()) \
  X(invalid_pointers, 1, EXACT, COUNT, "bad pointers reported (or ignored at check level 0)", kp_stat_invalid_pointers()) \
  X(rt_violations, 1, EXACT, COUNT, "realtime allocations that needed a new mapping (counting policies)", kame_pool_rt_violations()) \
  X(rt_forced_releases, 1, EXACT, COUNT, "realtime frees that made a system call: parking space exhausted", kame_pool_rt_forced_releases()) \
  X(rt_pending_bytes, 1, EXACT, BYTES, "mappings realtime frees parked, awaiting kame_pool_rt_drain", kame_pool_rt_pending_bytes())

typedef struct kame_pool_stats {
  unsigned version; /* in: KAME_POOL_STATS_VERSION; out: the version filled */
  unsigned size;    /* out: bytes filled */
#define KAME_POOL_STATS_MEMBER_(name, since, accuracy, unit, text, source) unsigned long long name;
  KAME_POOL_STATS_FIELDS(KAME_POOL_STATS_MEMBER_)
#undef KAME_POOL_STATS_MEMBER_
} kame_pool_stats_t;

#define KAME_POOL_STATS_INIT {.version = KAME_POOL_STATS_VERSION}

/* Returns the version filled (the caller's or the library's, the lower),
 * or 0 when `stats` is NULL or its version is 0. */
KAME_POOL_API unsigned kame_pool_get_stats(kame_pool_stats_t *stats);

#define KAME_POOL_STATS_TABLE 0
#define KAME_POOL_STATS_JSON 1
/* Prints the statistics to `out` (stderr when NULL) as a
 * readable table or as one JSON object, with each figure's accuracy. */
KAME_POOL_API void kame_pool_print_stats(FILE *out, int format);

#ifdef __cplusplus
}
#endif

#endif /* KAME_POOL_H */
