/* Shared helpers for the multi-thread tests (test_stress, test_fork,
 * test_thread_churn).  Everything here goes through the kame_pool_* C API so
 * the tests also run in sanitizer builds, where plain malloc belongs to the
 * sanitizer runtime.  The test machinery itself (queues, the live-block
 * registry) takes its memory straight from mmap so it never disturbs the
 * allocator under test.
 *
 * Scale: the environment variable KP_TEST_SCALE multiplies the amount of work.
 * It is a positive decimal factor ("1" is the default run, "0.1" a tenth,
 * "3" three times as much) or an integer percent with a trailing '%' ("10%").
 * Every test keeps floors so that even a tiny scale still exercises each
 * scenario.  A watchdog (st_watchdog) ends a deadlocked test with a failure
 * after 14 minutes (times the scale when above 1).
 *
 * Blocks: a block of n >= 16 bytes carries (n, seed) in its first two words;
 * every other byte it owns holds a pattern derived from its address and seed,
 * so a block handed out twice, or overlapping another, shows up as a pattern
 * mismatch.  Blocks above ST_FULL_FILL bytes are filled sparsely (first and
 * last 4 KiB plus 64 bytes of every page) to keep huge blocks cheap while
 * still touching every page.  Independently of contents, every live block is
 * entered in a registry of address ranges, and a new block that intersects a
 * live one is reported at once. */
#ifndef KP_STRESS_COMMON_H
#define KP_STRESS_COMMON_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <sys/mman.h>
#endif

#include "kame_pool.h"

/* MinGW's own stdio (__USE_MINGW_ANSI_STDIO) takes the C99 formats used
 * here; gcc calls that format gnu_printf there. */
#ifdef _WIN32
#define ST_PRINTF gnu_printf
#else
#define ST_PRINTF printf
#endif

#define ST_FN static __attribute__((unused))

#define ST_KIB ((size_t)1024)
#define ST_MIB ((size_t)1024 * 1024)
#define ST_SMALL_MAX (32 * ST_KIB)     /* last bucket size */
#define ST_DEDICATED_MAX (4 * ST_MIB)  /* last dedicated size */
#define ST_LARGE_MAX (32 * ST_MIB)     /* last large size */
#define ST_FULL_FILL (64 * ST_KIB)     /* blocks up to this are filled completely */
#define ST_PAGE ((size_t)4096)

/* ------------------------------------------------------------------ */
/* Results.  Passes are counted per thread and folded in by st_flush() so the
 * hot loops do not contend on one counter. */

static atomic_ulong st_passed_total;
static atomic_ulong st_failed_total;
static atomic_uint st_fail_messages;
static const char *st_fail_prefix = ""; /* e.g. "[child 3] " in a forked child */
static _Thread_local unsigned long st_local_passed;
#define ST_MAX_FAIL_MESSAGES 60

/* Failure output goes through write(2): no stdio lock, so it is safe in a
 * child forked from a threaded parent and never interleaves mid-line. */
ST_FN void st_write_line(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(2, buf, len);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

__attribute__((format(ST_PRINTF, 4, 5), noinline, cold))
ST_FN void st_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    atomic_fetch_add(&st_failed_total, 1);
    if (atomic_fetch_add(&st_fail_messages, 1) >= ST_MAX_FAIL_MESSAGES)
        return;
    char buf[768];
    int n = snprintf(buf, sizeof buf, "%sFAIL %s:%d: CHECK(%s): ", st_fail_prefix, file, line,
                     cond);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    st_write_line(buf, (size_t)n);
}

#define ST_CHECK(cond, ...)                                        \
    do {                                                           \
        if (__builtin_expect(!(cond), 0))                          \
            st_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);       \
        else                                                       \
            st_local_passed++;                                     \
    } while (0)

ST_FN void st_flush(void)
{
    atomic_fetch_add(&st_passed_total, st_local_passed);
    st_local_passed = 0;
}

ST_FN unsigned long st_failures(void)
{
    return atomic_load(&st_failed_total);
}

/* Progress / information lines on stdout (never from a forked child: stdio
 * locks may be stale there). */
__attribute__((format(ST_PRINTF, 1, 2)))
ST_FN void st_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* Prints the mandatory last line and gives the exit status. */
ST_FN int st_finish(const char *name)
{
    int problems = kame_pool_validate();
    ST_CHECK(problems == 0, "kame_pool_validate found %d problems at the end", problems);
    st_flush();
    unsigned long p = atomic_load(&st_passed_total), f = atomic_load(&st_failed_total);
    if (f)
        printf("%s: FAILED (%lu failed checks, first %u shown above)\n", name, f,
               f < ST_MAX_FAIL_MESSAGES ? (unsigned)f : ST_MAX_FAIL_MESSAGES);
    printf("%lu passed, %lu failed\n", p, f);
    fflush(stdout);
    return f ? 1 : 0;
}

/* A watchdog: a test that deadlocks still ends, with a failure and the usual
 * last line, before the test driver's own timeout.  Only async-signal-safe
 * calls in the handler. */
static const char *st_watch_name = "test";

static size_t st_put(char *buf, size_t at, const char *s)
{
    while (*s && at < 255)
        buf[at++] = *s++;
    return at;
}

static size_t st_put_num(char *buf, size_t at, unsigned long v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i > 0 && at < 255)
        buf[at++] = tmp[--i];
    return at;
}

static void st_watchdog_fire(int sig)
{
    (void)sig;
    char buf[256];
    size_t n = st_put(buf, 0, "FAIL: ");
    n = st_put(buf, n, st_watch_name);
    n = st_put(buf, n, " did not finish before its watchdog (deadlock?)\n");
    n = st_put_num(buf, n, atomic_load(&st_passed_total));
    n = st_put(buf, n, " passed, ");
    n = st_put_num(buf, n, atomic_load(&st_failed_total) + 1);
    n = st_put(buf, n, " failed\n");
    ssize_t w = write(1, buf, n);
    (void)w;
    _exit(1);
}

/* 14 minutes at scale <= 1 (under the 15 of the test driver), more for a
 * bigger scale. */
ST_FN void st_watchdog(const char *name, double scale)
{
    st_watch_name = name;
#ifdef _WIN32
    /* No SIGALRM: the test driver's timeout is the only watchdog. */
    (void)scale;
    (void)st_watchdog_fire;
#else
    signal(SIGALRM, st_watchdog_fire);
    alarm((unsigned)(840.0 * (scale > 1.0 ? scale : 1.0)));
#endif
}

/* ------------------------------------------------------------------ */
/* Scale and time. */

ST_FN double st_scale(void)
{
    const char *s = getenv("KP_TEST_SCALE");
    if (!s || !*s)
        return 1.0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end && *end == '%')
        v /= 100.0;
    if (!(v > 0.0) || v > 1000.0) {
        fprintf(stderr, "KP_TEST_SCALE=%s is not a positive factor or percent; using 1\n", s);
        return 1.0;
    }
    return v;
}

/* n * scale, but at least lo. */
ST_FN size_t st_scaled(size_t n, double scale, size_t lo)
{
    double v = (double)n * scale;
    size_t r = v < 1.0 ? 1 : (size_t)v;
    return r < lo ? lo : r;
}

ST_FN double st_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ST_FN void st_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ------------------------------------------------------------------ */
/* Deterministic PRNG: splitmix64.  Each thread seeds its own from a fixed
 * base and its index, so a failing run can be replayed with the same seed
 * (set KP_TEST_SEED). */

typedef struct {
    uint64_t s;
} st_rng;

ST_FN uint64_t st_next(st_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (tiny modulo bias is irrelevant here). */
ST_FN uint64_t st_below(st_rng *r, uint64_t n)
{
    return st_next(r) % n;
}

/* Uniform in [lo, hi]. */
ST_FN uint64_t st_range(st_rng *r, uint64_t lo, uint64_t hi)
{
    return lo + st_below(r, hi - lo + 1);
}

/* Roughly log-uniform in [lo, hi], lo >= 1. */
ST_FN size_t st_log_range(st_rng *r, size_t lo, size_t hi)
{
    int lb = 63 - __builtin_clzll(lo), hb = 63 - __builtin_clzll(hi);
    int b = (int)st_range(r, (uint64_t)lb, (uint64_t)hb);
    size_t a = (size_t)1 << b, z = a * 2 - 1;
    if (a < lo)
        a = lo;
    if (z > hi)
        z = hi;
    return (size_t)st_range(r, a, z);
}

ST_FN uint64_t st_base_seed(void)
{
    const char *s = getenv("KP_TEST_SEED");
    return s && *s ? strtoull(s, NULL, 0) : 0x6b616d65706f6f6cULL;
}

ST_FN st_rng st_rng_for(uint64_t stream)
{
    st_rng r = {st_base_seed() ^ (stream * 0xd1342543de82ef95ULL)};
    st_next(&r);
    return r;
}

/* ------------------------------------------------------------------ */
/* Size picker across all four tiers.  Most requests are small; the tail is
 * weighted so every tier is hit in a run of a few thousand allocations. */

enum {
    ST_PICK_ALL = 0,     /* every tier */
    ST_PICK_NO_HUGE = 1, /* at most the large tier */
    ST_PICK_SMALL = 2,   /* buckets only */
};

ST_FN size_t st_pick_small(st_rng *r)
{
    uint64_t u = st_below(r, 1000);
    if (u < 2)
        return 0;
    if (u < 450)
        return (size_t)st_range(r, 1, 128);
    if (u < 750)
        return (size_t)st_range(r, 129, 1024);
    if (u < 940)
        return st_log_range(r, 1025, ST_SMALL_MAX);
    if (u < 990) /* exact powers of two: the naturally aligned classes */
        return (size_t)1 << st_range(r, 3, 15);
    /* class edges */
    static const size_t edges[] = {8, 9, 15, 16, 17, 112, 127, 128, 129, 1023, 1025,
                                   4095, 4097, 32767, 32768};
    return edges[st_below(r, sizeof edges / sizeof edges[0])];
}

ST_FN size_t st_pick_size(st_rng *r, int mode)
{
    if (mode == ST_PICK_SMALL)
        return st_pick_small(r);
    uint64_t u = st_below(r, 100000);
    if (u < 97500)
        return st_pick_small(r);
    if (u < 99800) { /* dedicated: sometimes */
        if (st_below(r, 8) == 0) {
            static const size_t edges[] = {32 * 1024 + 1, 64 * 1024, 256 * 1024,
                                           256 * 1024 + 1, 1024 * 1024, 4 * 1024 * 1024};
            return edges[st_below(r, sizeof edges / sizeof edges[0])];
        }
        return st_log_range(r, ST_SMALL_MAX + 1, ST_DEDICATED_MAX);
    }
    if (u < 99985 || mode == ST_PICK_NO_HUGE) /* large: rare */
        return (size_t)st_range(r, ST_DEDICATED_MAX + 1, ST_LARGE_MAX);
    /* huge: very rare */
    return (size_t)st_range(r, ST_LARGE_MAX + 1, ST_LARGE_MAX + 8 * ST_MIB);
}

/* Budget for blocks above the bucket tier, shared by all threads, so the
 * rare big blocks cannot pile up into gigabytes. */
static atomic_size_t st_big_live;
static size_t st_big_cap = 256 * ST_MIB;

ST_FN int st_budget_take(size_t n)
{
    if (n <= ST_SMALL_MAX)
        return 1;
    size_t old = atomic_fetch_add(&st_big_live, n);
    if (old + n > st_big_cap) {
        atomic_fetch_sub(&st_big_live, n);
        return 0;
    }
    return 1;
}

ST_FN void st_budget_give(size_t n)
{
    if (n > ST_SMALL_MAX)
        atomic_fetch_sub(&st_big_live, n);
}

/* ------------------------------------------------------------------ */
/* Pattern. */

typedef struct {
    void *p;
    size_t n;
    uint64_t seed;
    uint64_t tag; /* free for the test's own use (wave number, owner, ...) */
} st_blk;

static inline uint64_t st_pat_word(uint64_t key, size_t off)
{
    uint64_t w = (key + off) * 0xd6e8feb86659fd93ULL;
    return w ^ (w >> 32);
}

static inline uint64_t st_key(const void *addr, uint64_t seed)
{
    return (uint64_t)(uintptr_t)addr ^ (seed * 0x9e3779b97f4a7c15ULL);
}

/* The expected byte at offset off of a block of n bytes (n >= 16 has the
 * header in bytes 0..15). */
static inline uint8_t st_pat_byte(uint64_t key, size_t n, uint64_t seed, size_t off)
{
    if (n >= 16 && off < 16) {
        uint64_t h = off < 8 ? (uint64_t)n : seed;
        return (uint8_t)(h >> (8 * (off & 7)));
    }
    uint64_t w = st_pat_word(key, off & ~(size_t)7);
    return (uint8_t)(w >> (8 * (off & 7)));
}

/* Writes (fill) or checks the pattern of an n-byte block in the byte range
 * [lo, hi) of its layout.  Returns the first mismatching offset, or SIZE_MAX.
 * Whole aligned words go through memcpy (the compiler makes it one load or
 * store); unaligned ends go byte by byte. */
ST_FN size_t st_pat_span(unsigned char *p, size_t n, uint64_t key, uint64_t seed,
                         size_t lo, size_t hi, int fill)
{
    size_t off = lo;
    /* bytes up to the first whole word past the header */
    while (off < hi && !(off >= 16 && !(off & 7) && off + 8 <= hi)) {
        uint8_t e = st_pat_byte(key, n, seed, off);
        if (fill)
            p[off] = e;
        else if (p[off] != e)
            return off;
        off++;
    }
    for (; off + 8 <= hi; off += 8) {
        uint64_t e = st_pat_word(key, off);
        if (fill) {
            memcpy(p + off, &e, 8);
        } else {
            uint64_t g;
            memcpy(&g, p + off, 8);
            if (g != e) {
                for (size_t i = 0; i < 8; i++)
                    if (p[off + i] != (uint8_t)(e >> (8 * i)))
                        return off + i;
            }
        }
    }
    for (; off < hi; off++) {
        uint8_t e = st_pat_byte(key, n, seed, off);
        if (fill)
            p[off] = e;
        else if (p[off] != e)
            return off;
    }
    return SIZE_MAX;
}

/* Distance between the sampled 64-byte pieces of a sparsely filled block:
 * every page up to the dedicated tier's top, every 64 KiB above (touching
 * every page of a 30 MiB block would make the test about page faults). */
static inline size_t st_touch_stride(size_t n)
{
    return n > ST_DEDICATED_MAX ? 16 * ST_PAGE : ST_PAGE;
}

/* Walks the layout of an n-byte block: all of it up to ST_FULL_FILL, else the
 * first and last 4 KiB and 64 bytes every st_touch_stride() bytes.  Only offsets
 * below limit are touched (a block shrunk by realloc keeps its old layout up
 * to its new size). */
ST_FN size_t st_pat_walk(void *base, size_t n, uint64_t key, uint64_t seed, size_t limit,
                         int fill)
{
    unsigned char *p = base;
    if (limit > n)
        limit = n;
    if (n <= ST_FULL_FILL)
        return st_pat_span(p, n, key, seed, 0, limit, fill);
    size_t r = st_pat_span(p, n, key, seed, 0, limit < ST_PAGE ? limit : ST_PAGE, fill);
    if (r != SIZE_MAX)
        return r;
    size_t stride = st_touch_stride(n);
    for (size_t pg = stride; pg < limit && pg < n - ST_PAGE; pg += stride) {
        size_t e = pg + 64 < limit ? pg + 64 : limit;
        r = st_pat_span(p, n, key, seed, pg, e, fill);
        if (r != SIZE_MAX)
            return r;
    }
    size_t t = n - ST_PAGE;
    if (t < limit)
        return st_pat_span(p, n, key, seed, t, limit, fill);
    return SIZE_MAX;
}

/* Same layout, checks that every touched byte is zero (calloc). */
ST_FN size_t st_zero_walk(const void *base, size_t n)
{
    const unsigned char *p = base;
    if (n <= ST_FULL_FILL) {
        for (size_t i = 0; i < n; i++)
            if (p[i])
                return i;
        return SIZE_MAX;
    }
    for (size_t i = 0; i < ST_PAGE; i++)
        if (p[i] || p[n - 1 - i])
            return p[i] ? i : n - 1 - i;
    for (size_t pg = ST_PAGE; pg < n; pg += st_touch_stride(n))
        for (size_t i = 0; i < 64 && pg + i < n; i++)
            if (p[pg + i])
                return pg + i;
    return SIZE_MAX;
}

ST_FN void st_fill(st_blk *b)
{
    st_pat_walk(b->p, b->n, st_key(b->p, b->seed), b->seed, b->n, 1);
}

/* ------------------------------------------------------------------ */
/* Registry of live address ranges.  Ranges are keyed by 64 KiB granule; a
 * block is entered in the shard of every granule it covers, so two
 * intersecting blocks always meet in some shard.  Within a shard the ranges
 * are disjoint and sorted by start, so the only candidate for an overlap with
 * [s, e) is the last range starting below e. */

#define ST_REG_SHARDS 4096
#define ST_REG_GRANULE_SHIFT 16

typedef struct {
    uintptr_t s, e;
} st_range_t;

typedef struct {
    pthread_mutex_t m;
    st_range_t *v;
    size_t n, cap;
    char pad[64];
} st_shard;

static st_shard st_reg[ST_REG_SHARDS];
static int st_registry_on = 1; /* a forked child switches it off: its locks may be stale */
static atomic_ulong st_reg_overlaps;

ST_FN void st_registry_init(void)
{
    for (size_t i = 0; i < ST_REG_SHARDS; i++)
        pthread_mutex_init(&st_reg[i].m, NULL);
}

static inline size_t st_shard_of(uintptr_t granule)
{
    return (size_t)((granule * 0x9e3779b97f4a7c15ULL) >> (64 - 12));
}

ST_FN void *st_map(size_t bytes)
{
#ifdef _WIN32
    void *p = VirtualAlloc(NULL, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (p == NULL) {
#else
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
#endif
        perror("mmap (test infrastructure)");
        abort();
    }
    return p;
}

ST_FN void st_unmap(void *p, size_t bytes)
{
#ifdef _WIN32
    (void)bytes;
    if (p)
        VirtualFree(p, 0, MEM_RELEASE);
#else
    if (p)
        munmap(p, bytes);
#endif
}

/* Index of the first range with start >= key. */
static size_t st_lower(const st_shard *sh, uintptr_t key)
{
    size_t lo = 0, hi = sh->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sh->v[mid].s < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Returns 0 and fills *hit when [s, e) intersects a live range. */
static int st_shard_insert(st_shard *sh, uintptr_t s, uintptr_t e, st_range_t *hit)
{
    pthread_mutex_lock(&sh->m);
    size_t i = st_lower(sh, e); /* ranges [0, i) start below e */
    if (i > 0 && sh->v[i - 1].e > s) {
        *hit = sh->v[i - 1];
        pthread_mutex_unlock(&sh->m);
        return 0;
    }
    if (sh->n == sh->cap) {
        size_t ncap = sh->cap ? sh->cap * 2 : 256;
        st_range_t *nv = st_map(ncap * sizeof *nv);
        if (sh->n)
            memcpy(nv, sh->v, sh->n * sizeof *nv);
        st_unmap(sh->v, sh->cap * sizeof *nv);
        sh->v = nv;
        sh->cap = ncap;
    }
    memmove(&sh->v[i + 1], &sh->v[i], (sh->n - i) * sizeof *sh->v);
    sh->v[i].s = s;
    sh->v[i].e = e;
    sh->n++;
    pthread_mutex_unlock(&sh->m);
    return 1;
}

static int st_shard_remove(st_shard *sh, uintptr_t s, uintptr_t e)
{
    pthread_mutex_lock(&sh->m);
    size_t i = st_lower(sh, s);
    int found = i < sh->n && sh->v[i].s == s && sh->v[i].e == e;
    if (found) {
        memmove(&sh->v[i], &sh->v[i + 1], (sh->n - i - 1) * sizeof *sh->v);
        sh->n--;
    }
    pthread_mutex_unlock(&sh->m);
    return found;
}

/* Runs the statement on every distinct shard sh_ that [s, e) touches. */
#define ST_FOR_SHARDS(s, e, ...)                                                    \
    do {                                                                             \
        uintptr_t g0_ = (s) >> ST_REG_GRANULE_SHIFT, g1_ = ((e)-1) >> ST_REG_GRANULE_SHIFT; \
        uint64_t seen_[ST_REG_SHARDS / 64];                                          \
        if (g1_ != g0_)                                                              \
            memset(seen_, 0, sizeof seen_);                                          \
        for (uintptr_t g_ = g0_; g_ <= g1_; g_++) {                                  \
            size_t sh_ = st_shard_of(g_);                                            \
            if (g1_ != g0_) {                                                        \
                if (seen_[sh_ / 64] & (1ULL << (sh_ % 64)))                          \
                    continue;                                                        \
                seen_[sh_ / 64] |= 1ULL << (sh_ % 64);                               \
            }                                                                        \
            __VA_ARGS__;                                                             \
        }                                                                            \
    } while (0)

/* Enters a new block; an intersection with a live block is a failure (the
 * allocator handed out memory twice). */
#define st_register(b, where) st_register_at((b), (where), __FILE__, __LINE__)
ST_FN void st_register_at(const st_blk *b, const char *where, const char *file, int line)
{
    if (!st_registry_on)
        return;
    uintptr_t s = (uintptr_t)b->p, e = s + (b->n ? b->n : 1);
    int ok = 1;
    st_range_t hit = {0, 0};
    ST_FOR_SHARDS(s, e, {
        if (ok && !st_shard_insert(&st_reg[sh_], s, e, &hit))
            ok = 0;
    });
    if (!ok) {
        atomic_fetch_add(&st_reg_overlaps, 1);
        st_fail(file, line, "no overlap with a live block",
                "%s: new block [%p, %p) (%zu B) intersects live block [%p, %p) (%zu B)", where,
                (void *)s, (void *)e, b->n, (void *)hit.s, (void *)hit.e,
                (size_t)(hit.e - hit.s));
        /* Take out whatever part got in, so later frees stay consistent. */
        ST_FOR_SHARDS(s, e, { st_shard_remove(&st_reg[sh_], s, e); });
    } else {
        st_local_passed++;
    }
}

ST_FN void st_unregister(const st_blk *b)
{
    if (!st_registry_on)
        return;
    uintptr_t s = (uintptr_t)b->p, e = s + (b->n ? b->n : 1);
    int all = 1;
    ST_FOR_SHARDS(s, e, {
        if (!st_shard_remove(&st_reg[sh_], s, e))
            all = 0;
    });
    /* Missing entries are expected only for a block that already failed the
     * overlap check. */
    if (!all && atomic_load(&st_reg_overlaps) == 0)
        st_fail(__FILE__, __LINE__, "registered", "block [%p, +%zu) missing from the registry",
                b->p, b->n);
}

/* ------------------------------------------------------------------ */
/* Block life cycle through the C API, with every check along the way. */

/* Shape checks every block gets: non-NULL, usable size, alignment.  exact
 * adds the rule for a fresh malloc/calloc of a power of two from 1 KiB to
 * 32 KiB: naturally aligned with usable size exactly n (it does not bind
 * realloc, which may keep a bigger block, or an alignment above the size). */
#define st_check_shape(p, n, exact, where) \
    st_check_shape_at((p), (n), (exact), (where), __FILE__, __LINE__)
ST_FN int st_check_shape_at(void *p, size_t n, int exact, const char *where, const char *file,
                            int line)
{
    if (!p) {
        st_fail(file, line, "p != NULL", "%s: allocation of %zu bytes returned NULL (errno %d)",
                where, n, errno);
        return 0;
    }
    size_t us = kame_pool_malloc_usable_size(p);
    int ok = 1;
    if (us < n) {
        st_fail(file, line, "usable_size >= size", "%s: %p usable_size %zu < requested %zu",
                where, p, us, n);
        ok = 0;
    }
    uintptr_t a = (uintptr_t)p;
    size_t want = n <= 8 ? 8 : 16;
    if (exact && n >= ST_KIB && n <= ST_SMALL_MAX && (n & (n - 1)) == 0) {
        want = n;
        if (us != n) {
            st_fail(file, line, "usable_size == size for power-of-two classes",
                    "%s: %p usable_size %zu != %zu", where, p, us, n);
            ok = 0;
        }
    }
    if (a % want) {
        st_fail(file, line, "alignment", "%s: %p (size %zu) not %zu-aligned", where, p, n, want);
        ok = 0;
    }
    if (ok)
        st_local_passed++;
    return ok;
}

/* Allocates n bytes (falls back to a small size when the big-block budget is
 * spent), checks it, registers it and fills it.  Returns 0 on failure. */
#define st_alloc(r, b, n, where) st_alloc_at((r), (b), (n), (where), __FILE__, __LINE__)
ST_FN int st_alloc_at(st_rng *r, st_blk *b, size_t n, const char *where, const char *file,
                      int line)
{
    if (!st_budget_take(n)) {
        n = st_pick_small(r);
        st_budget_take(n);
    }
    uint64_t how = st_below(r, 16);
    void *p;
    int zeroed = 0, exact = 1;
    if (how == 0) {
        /* calloc as count * size, splitting n where it can */
        size_t c = n >= 64 && (n % 4) == 0 ? 4 : 1;
        p = kame_pool_calloc(c, n / c);
        zeroed = 1;
    } else if (how == 1 && n > 0) {
        /* an aligned request: 64 B .. 8 KiB alignment */
        size_t al = (size_t)64 << st_below(r, 8);
        void *q = NULL;
        int rc = kame_pool_posix_memalign(&q, al, n);
        if (rc != 0) {
            st_fail(file, line, "posix_memalign == 0", "%s: posix_memalign(%zu, %zu) = %d",
                    where, al, n, rc);
            st_budget_give(n);
            return 0;
        }
        p = q;
        exact = al <= n;
        if ((uintptr_t)p % al) {
            st_fail(file, line, "aligned result", "%s: posix_memalign(%zu, %zu) gave %p", where,
                    al, n, p);
        }
    } else {
        p = kame_pool_malloc(n);
    }
    if (!st_check_shape_at(p, n, exact, where, file, line)) {
        if (p)
            kame_pool_free(p);
        st_budget_give(n);
        return 0;
    }
    b->p = p;
    b->n = n;
    b->seed = st_next(r);
    st_register_at(b, where, file, line);
    if (zeroed) {
        size_t z = st_zero_walk(p, n);
        if (z != SIZE_MAX)
            st_fail(file, line, "calloc zeroed", "%s: calloc block %p (%zu B) byte %zu = %#x",
                    where, p, n, z, ((unsigned char *)p)[z]);
        else
            st_local_passed++;
    }
    st_fill(b);
    return 1;
}

/* Checks a block's pattern (and that the allocator still knows its size). */
#define st_verify(b, where) st_verify_at((b), (where), __FILE__, __LINE__)
ST_FN int st_verify_at(const st_blk *b, const char *where, const char *file, int line)
{
    size_t us = kame_pool_malloc_usable_size(b->p);
    if (us < b->n) {
        st_fail(file, line, "usable_size >= size", "%s: %p usable_size %zu < %zu", where, b->p,
                us, b->n);
        return 0;
    }
    size_t bad = st_pat_walk(b->p, b->n, st_key(b->p, b->seed), b->seed, b->n, 0);
    if (bad != SIZE_MAX) {
        const unsigned char *c = b->p;
        st_fail(file, line, "pattern intact",
                "%s: block %p (%zu B, seed %#llx) byte %zu is %#x, expected %#x "
                "(header says size %llu)",
                where, b->p, b->n, (unsigned long long)b->seed, bad, c[bad],
                st_pat_byte(st_key(b->p, b->seed), b->n, b->seed, bad),
                b->n >= 16 ? (unsigned long long)*(const uint64_t *)b->p : 0ULL);
        return 0;
    }
    st_local_passed++;
    return 1;
}

/* Verifies, unregisters and frees. */
#define st_release(b, where) st_release_at((b), (where), __FILE__, __LINE__)
ST_FN void st_release_at(st_blk *b, const char *where, const char *file, int line)
{
    st_verify_at(b, where, file, line);
    st_unregister(b);
    kame_pool_free(b->p);
    st_budget_give(b->n);
    b->p = NULL;
}

/* Resizes a live block: the old contents must survive up to the smaller
 * size, the result must have the usual shape; the block is then refilled for
 * its new address. */
#define st_resize(r, b, newn, where) st_resize_at((r), (b), (newn), (where), __FILE__, __LINE__)
ST_FN int st_resize_at(st_rng *r, st_blk *b, size_t newn, const char *where, const char *file,
                       int line)
{
    if (newn == 0)
        newn = 1;
    if (!st_budget_take(newn)) {
        newn = 1 + st_pick_small(r) % ST_SMALL_MAX; /* stays in budget-free sizes */
    }
    st_unregister(b);
    void *old = b->p;
    size_t oldn = b->n;
    void *q = kame_pool_realloc(old, newn);
    if (!st_check_shape_at(q, newn, 0, where, file, line)) {
        if (q) {
            kame_pool_free(q);
            st_budget_give(oldn);
        } else {
            st_register_at(b, where, file, line); /* realloc failure leaves the block */
        }
        st_budget_give(newn);
        if (q)
            b->p = NULL;
        return 0;
    }
    size_t keep = oldn < newn ? oldn : newn;
    size_t bad = st_pat_walk(q, oldn, st_key(old, b->seed), b->seed, keep, 0);
    if (bad != SIZE_MAX)
        st_fail(file, line, "realloc keeps contents",
                "%s: realloc(%p, %zu -> %zu) = %p: byte %zu is %#x, expected %#x", where, old,
                oldn, newn, q, bad, ((unsigned char *)q)[bad],
                st_pat_byte(st_key(old, b->seed), oldn, b->seed, bad));
    else
        st_local_passed++;
    st_budget_give(oldn);
    b->p = q;
    b->n = newn;
    b->seed = st_next(r);
    st_register_at(b, where, file, line);
    st_fill(b);
    return 1;
}

/* A new size for realloc: mostly grow or shrink by a factor, sometimes
 * anything. */
ST_FN size_t st_pick_resize(st_rng *r, size_t n, int mode)
{
    uint64_t u = st_below(r, 10);
    if (u < 4) {
        size_t g = n + 1 + (size_t)st_below(r, n + 64) * (1 + st_below(r, 3));
        size_t top = mode == ST_PICK_ALL ? ST_LARGE_MAX + 8 * ST_MIB : ST_LARGE_MAX;
        return g < top ? g : top;
    }
    if (u < 8)
        return n / (1 + (size_t)st_below(r, 4)) + 1;
    return st_pick_size(r, mode) + 1;
}

/* ------------------------------------------------------------------ */
/* A bounded blocking queue of blocks (mutex + condition variables). */

typedef struct {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    st_blk *buf;
    size_t cap, head, count;
    int closed;
} st_queue;

ST_FN void st_queue_init(st_queue *q, size_t cap)
{
    pthread_mutex_init(&q->m, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->buf = st_map(cap * sizeof *q->buf);
    q->cap = cap;
    q->head = q->count = 0;
    q->closed = 0;
}

ST_FN void st_queue_destroy(st_queue *q)
{
    st_unmap(q->buf, q->cap * sizeof *q->buf);
    pthread_mutex_destroy(&q->m);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
}

static void st_queue_put_locked(st_queue *q, const st_blk *b)
{
    q->buf[(q->head + q->count) % q->cap] = *b;
    q->count++;
    pthread_cond_signal(&q->not_empty);
}

static void st_queue_take_locked(st_queue *q, st_blk *b)
{
    *b = q->buf[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    pthread_cond_signal(&q->not_full);
}

/* Blocks while full. */
ST_FN void st_queue_push(st_queue *q, const st_blk *b)
{
    pthread_mutex_lock(&q->m);
    while (q->count == q->cap)
        pthread_cond_wait(&q->not_full, &q->m);
    st_queue_put_locked(q, b);
    pthread_mutex_unlock(&q->m);
}

/* Returns 0 when full. */
ST_FN int st_queue_try_push(st_queue *q, const st_blk *b)
{
    pthread_mutex_lock(&q->m);
    int ok = q->count < q->cap;
    if (ok)
        st_queue_put_locked(q, b);
    pthread_mutex_unlock(&q->m);
    return ok;
}

/* Blocks while empty; returns 0 once the queue is closed and drained. */
ST_FN int st_queue_pop(st_queue *q, st_blk *b)
{
    pthread_mutex_lock(&q->m);
    while (q->count == 0 && !q->closed)
        pthread_cond_wait(&q->not_empty, &q->m);
    int ok = q->count > 0;
    if (ok)
        st_queue_take_locked(q, b);
    pthread_mutex_unlock(&q->m);
    return ok;
}

/* Returns 0 when empty. */
ST_FN int st_queue_try_pop(st_queue *q, st_blk *b)
{
    pthread_mutex_lock(&q->m);
    int ok = q->count > 0;
    if (ok)
        st_queue_take_locked(q, b);
    pthread_mutex_unlock(&q->m);
    return ok;
}

ST_FN void st_queue_close(st_queue *q)
{
    pthread_mutex_lock(&q->m);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->m);
}

/* ------------------------------------------------------------------ */
/* A thread-local set of live blocks (fixed capacity, mmap'd). */

typedef struct {
    st_blk *v;
    size_t n, cap;
} st_set;

ST_FN void st_set_init(st_set *s, size_t cap)
{
    s->v = st_map(cap * sizeof *s->v);
    s->n = 0;
    s->cap = cap;
}

ST_FN void st_set_destroy(st_set *s)
{
    st_unmap(s->v, s->cap * sizeof *s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

ST_FN void st_set_add(st_set *s, const st_blk *b)
{
    s->v[s->n++] = *b;
}

/* Removes entry i (order is not kept). */
ST_FN st_blk st_set_take(st_set *s, size_t i)
{
    st_blk b = s->v[i];
    s->v[i] = s->v[--s->n];
    return b;
}

ST_FN void st_set_release_all(st_set *s, const char *where)
{
    while (s->n) {
        st_blk b = st_set_take(s, s->n - 1);
        st_release(&b, where);
    }
}

/* Every thread ends by walking the pool's structures it can see (its own
 * heap and every region): kame_pool_validate must find nothing wrong. */
typedef struct {
    void *(*fn)(void *);
    void *arg;
} st_trampoline;

static void *st_thread_main(void *p)
{
    st_trampoline t = *(st_trampoline *)p;
    free(p);
    void *r = t.fn(t.arg);
    int problems = kame_pool_validate();
    ST_CHECK(problems == 0, "kame_pool_validate found %d problems at thread end", problems);
    st_flush();
    return r;
}

ST_FN void st_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    st_trampoline *tr = malloc(sizeof *tr);
    if (tr == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    tr->fn = fn;
    tr->arg = arg;
    int rc = pthread_create(t, NULL, st_thread_main, tr);
    if (rc != 0) {
        fprintf(stderr, "pthread_create failed: %s\n", strerror(rc));
        exit(2);
    }
}

#endif /* KP_STRESS_COMMON_H */
