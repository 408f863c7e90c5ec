/* Fuzz target for the kame_pool_* C API (libFuzzer's LLVMFuzzerTestOneInput).
 *
 * An input is a sequence of operations on the pool, each an opcode byte and
 * a fixed number of argument bytes (the table `ops` below; an input that
 * ends inside an operation reads zeros).  A shadow model follows every live
 * block and checks, after every operation that touches one:
 *
 *   - contents: every block holds a pattern derived from its own seed; it is
 *     checked on free, realloc (the prefix both sizes share), usable-size,
 *     trim and at the end of the input;
 *   - sizes: usable size >= requested, within a bound, and stable while the
 *     block lives; exact for powers of two from 1 KiB to 32 KiB;
 *   - alignment: 16 bytes from 16 bytes up (8 below), the requested alignment
 *     for the aligned calls, natural alignment for power-of-two sizes from
 *     1 KiB to 32 KiB while no byte ceiling is set;
 *   - no two live blocks overlap over their usable sizes (a sorted interval
 *     array);
 *   - calloc zero-fills; free keeps errno; failures return the documented
 *     NULL/errno; with a byte ceiling set, allocations do not raise the
 *     reserved bytes above it;
 *   - at the end of the input, with everything freed and trimmed, the
 *     reserved bytes are whole regions (no large or huge mapping leaked).
 *
 * Blocks up to DENSE_MAX bytes are written and checked whole; bigger ones at
 * both ends, a few probes in between and around the requested size, so a
 * 48 MiB block costs a dozen pages.  A helper thread performs the remote
 * operations synchronously (handed one at a time through semaphores), so a
 * run is deterministic.  The model's own memory is static: with the malloc
 * override (the replay build) plain malloc is the pool itself.
 *
 * Every input frees what it allocated, stops the helper thread, restores the
 * default ceiling and trims, so inputs are independent apart from the pool's
 * regions, which stay mapped.  FUZZ_API_TRACE=1 prints every operation.
 * docs/fuzzing.md describes how to run it and the input format. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kame_pool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The system allocator the pool falls back to is the sanitizer's in these
 * builds; impossible requests reach it and must get NULL, not a report. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define FZ_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(FZ_ASAN)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#if defined(__SANITIZE_THREAD__) || defined(FZ_TSAN)
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#define MAX_LIVE 256
#define LIVE_BYTES_CAP (320 * MiB) /* bytes live at once (see charge_of) */
/* Big blocks cost in proportion to their size where they are copied
 * (realloc) or served by the system allocator (past the ceiling; ASan
 * poisons them, alignment padding included), so an input gets a budget
 * for them. */
#define BIG_BLOCK (1 * MiB)
#define BIG_BYTES_PER_INPUT (256 * MiB)
#define DENSE_MAX (64 * KiB)       /* blocks written and checked whole */
#define EDGE (4 * KiB)             /* checked at each end of bigger blocks */
#define PROBES 6
#define PROBE_LEN 256
#define MAX_RANGES (PROBES + 3)
/* Usable size may exceed the request by rounding to a class, a unit or a
 * page, by a realloc that keeps a block at least twice the new size, and
 * (the system allocator's memalign, past the ceiling) by the alignment. */
#define USABLE_SLACK (256 * KiB)
#define REGION_SIZE (32 * MiB)
#define ERRNO_MARK 4242

/* ---- Reporting ---------------------------------------------------------- */

static int trace;
static unsigned op_index;
static const char *op_name = "setup";

#define TRACE(...)                                                                                 \
    do {                                                                                           \
        if (trace)                                                                                 \
            fprintf(stderr, __VA_ARGS__);                                                          \
    } while (0)

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fuzz_api: op %u (%s): ", op_index, op_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

/* ---- Input -------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t rd_u8(reader *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

static unsigned rd_u16(reader *r)
{
    unsigned lo = rd_u8(r);
    return lo | (unsigned)rd_u8(r) << 8;
}

static const size_t boundaries[] = {
    0,         1,         8,         16,        128,       256,      1 * KiB,  4 * KiB, 32 * KiB,
    64 * KiB,  256 * KiB, 512 * KiB, 1 * MiB,   4 * MiB,   8 * MiB,  32 * MiB, 64 * MiB,
};
#define NBOUNDARIES (sizeof boundaries / sizeof boundaries[0])

static size_t add_delta(size_t base, long delta)
{
    if (delta < 0 && (size_t)-delta > base)
        return 0;
    return base + (size_t)delta;
}

/* A size: a kind byte and a 16-bit value v (3 bytes).  Kinds 11-31 repeat
 * the small ones: most sizes fall in the bucket tier, and big blocks, whose
 * pages cost most, are rare. */
static size_t rd_size(reader *r)
{
    unsigned kind = rd_u8(r) % 32;
    unsigned v = rd_u16(r), lo = v & 0xff, hi = v >> 8;
    static const long unit_delta[] = {-4096, -1, 0, 1, 4096};
    if (kind > 10)
        kind %= 4;
    switch (kind) {
    case 0: return v % 65;
    case 1: return v % 513;
    case 2: return v % 4097;
    case 3: return v % (32 * KiB + 1);
    case 4: /* around a tier, unit or page boundary */
        return add_delta(boundaries[lo % NBOUNDARIES], (long)(hi % 9) - 4);
    case 5: /* around a power of two, 1 B .. 64 MiB */
        return add_delta((size_t)1 << (lo % 27), (long)(hi % 3) - 1);
    case 6: return 32 * KiB + (size_t)v * 64;  /* dedicated, a little past 4 MiB */
    case 7: return 4 * MiB + (size_t)v * 450;  /* large, a little past 32 MiB */
    case 8: return 32 * MiB + (size_t)v * 256; /* huge, up to 48 MiB */
    case 9: /* around a multiple of the 256 KiB unit */
        return add_delta((1 + lo % 20) * 256 * KiB, unit_delta[hi % 5]);
    default: { /* 10: around a size class: 2^b + k/4 * 2^b, 8 B .. 56 KiB */
        size_t b = (size_t)1 << (3 + lo % 13);
        return add_delta(b + (hi % 4) * (b / 4), (long)((hi >> 2) % 3) - 1);
    }
    }
}

/* ---- The pattern -------------------------------------------------------- */

/* Period of the pattern: prime, so a block shifted by a page or a unit
 * does not match itself. */
#define PAT_PERIOD 4093
static unsigned char pat[2 * PAT_PERIOD];

static void pat_init(void)
{
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < PAT_PERIOD; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        pat[i] = pat[i + PAT_PERIOD] = (unsigned char)(x >> 24);
    }
}

static void pat_fill(unsigned char *p, size_t lo, size_t hi, uint32_t seed)
{
    while (lo < hi) {
        size_t j = (lo + seed) % PAT_PERIOD;
        size_t n = hi - lo < PAT_PERIOD ? hi - lo : PAT_PERIOD;
        memcpy(p + lo, pat + j, n);
        lo += n;
    }
}

/* Returns the first offset in [lo, hi) that does not hold the pattern, or
 * hi. */
static size_t pat_find_bad(const unsigned char *p, size_t lo, size_t hi, uint32_t seed)
{
    while (lo < hi) {
        size_t j = (lo + seed) % PAT_PERIOD;
        size_t n = hi - lo < PAT_PERIOD ? hi - lo : PAT_PERIOD;
        if (memcmp(p + lo, pat + j, n) != 0) {
            for (size_t k = 0; k < n; k++)
                if (p[lo + k] != pat[j + k])
                    return lo + k;
        }
        lo += n;
    }
    return hi;
}

static size_t zero_find_bad(const unsigned char *p, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        if (p[i] != 0)
            return i;
    return hi;
}

/* ---- The shadow model --------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t size;   /* requested */
    size_t usable; /* reported when it was allocated */
    size_t charge; /* counted against the caps */
    uint32_t seed;
    uint32_t id;
} block;

typedef struct {
    size_t lo, hi;
} range;

static block live[MAX_LIVE];
static size_t nlive, live_bytes; /* live_bytes: the sum of the charges */
static size_t big_bytes;  /* charges of BIG_BLOCK or more, this input */
static uint32_t next_id;
static size_t ceiling;         /* 0: the default, no ceiling */
static size_t reserved_before; /* reserved bytes before the current call */

/* Live blocks' [start, start + max(usable, 1)), sorted by start. */
typedef struct {
    uintptr_t lo, hi;
} span;
static span spans[MAX_LIVE];
static size_t nspans;

static size_t span_lower(uintptr_t lo)
{
    size_t a = 0, b = nspans;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (spans[m].lo < lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

static const block *block_at(uintptr_t lo)
{
    for (size_t i = 0; i < nlive; i++)
        if ((uintptr_t)live[i].p == lo)
            return &live[i];
    return NULL;
}

static void overlap_fail(uintptr_t lo, uintptr_t hi, const span *other)
{
    const block *b = block_at(other->lo);
    fail("new block [%#lx, %#lx) overlaps live block #%u [%#lx, %#lx) (size %zu)", (unsigned long)lo,
         (unsigned long)hi, b ? b->id : 0, (unsigned long)other->lo, (unsigned long)other->hi,
         b ? b->size : 0);
}

static void span_insert(uintptr_t lo, uintptr_t hi)
{
    size_t k = span_lower(lo);
    if (k < nspans && spans[k].lo < hi)
        overlap_fail(lo, hi, &spans[k]);
    if (k > 0 && spans[k - 1].hi > lo)
        overlap_fail(lo, hi, &spans[k - 1]);
    memmove(&spans[k + 1], &spans[k], (nspans - k) * sizeof spans[0]);
    spans[k] = (span){lo, hi};
    nspans++;
}

static void span_remove(uintptr_t lo)
{
    size_t k = span_lower(lo);
    if (k == nspans || spans[k].lo != lo)
        fail("model: no span at %#lx", (unsigned long)lo);
    memmove(&spans[k], &spans[k + 1], (nspans - k - 1) * sizeof spans[0]);
    nspans--;
}

/* The byte ranges of a block that are written and checked. */
static int sample_ranges(size_t size, size_t usable, range *out)
{
    int n = 0;
    if (usable <= DENSE_MAX) {
        out[n++] = (range){0, usable};
        return n;
    }
    out[n++] = (range){0, EDGE};
    out[n++] = (range){usable - EDGE, usable};
    for (size_t k = 1; k <= PROBES; k++) {
        size_t at = (usable / (PROBES + 1) * k) & ~(size_t)63;
        out[n++] = (range){at, at + PROBE_LEN};
    }
    size_t lo = size > PROBE_LEN ? size - PROBE_LEN : 0;
    size_t hi = usable - size > PROBE_LEN ? size + PROBE_LEN : usable;
    out[n++] = (range){lo, hi};
    return n;
}

static void fill(const block *b)
{
    range r[MAX_RANGES];
    int n = sample_ranges(b->size, b->usable, r);
    for (int i = 0; i < n; i++)
        pat_fill(b->p, r[i].lo, r[i].hi, b->seed);
}

/* Checks the pattern of `b` (its ranges cut at `limit`) in the memory at
 * `at`: the block itself, or where realloc moved it. */
static void check_pattern_at(const block *b, const unsigned char *at, size_t limit, const char *what)
{
    range r[MAX_RANGES];
    int n = sample_ranges(b->size, b->usable, r);
    for (int i = 0; i < n; i++) {
        size_t hi = r[i].hi < limit ? r[i].hi : limit;
        size_t bad = pat_find_bad(at, r[i].lo, hi, b->seed);
        if (bad < hi)
            fail("%s: block #%u %p (size %zu, usable %zu%s%p) byte %zu is %#x, expected %#x", what,
                 b->id, (void *)b->p, b->size, b->usable, at == b->p ? ", at " : ", moved to ",
                 (const void *)at, bad, at[bad], pat[(bad + b->seed) % PAT_PERIOD]);
    }
}

static void verify(const block *b, const char *what)
{
    size_t u = kame_pool_malloc_usable_size(b->p);
    if (u != b->usable)
        fail("%s: block #%u %p (size %zu): usable size changed from %zu to %zu", what, b->id,
             (void *)b->p, b->size, b->usable, u);
    check_pattern_at(b, b->p, b->usable, what);
}

static void verify_all(const char *what)
{
    for (size_t i = 0; i < nlive; i++)
        verify(&live[i], what);
}

static int is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* The alignment malloc, calloc and realloc owe a block of `size` bytes. */
static size_t malloc_align(size_t size) { return size >= 16 ? 16 : 8; }

/* A power of two from 1 KiB to 32 KiB gets an exact, naturally aligned
 * slot, unless the ceiling sent the request to the system allocator. */
static int exact_slot(size_t size)
{
    return ceiling == 0 && is_pow2(size) && size >= 1 * KiB && size <= 32 * KiB;
}

static size_t natural_align(size_t size) { return exact_slot(size) ? size : malloc_align(size); }

/* What a block costs: its size, and a big alignment's padding. */
static size_t charge_of(size_t size, size_t align) { return align >= BIG_BLOCK ? size + align : size; }

/* Whether an allocation or realloc charged `charge`, `more` of it new,
 * fits the caps; a big one is then counted against the input's budget. */
static int bytes_room(size_t charge, size_t more)
{
    if (live_bytes + more > LIVE_BYTES_CAP)
        return 0;
    if (charge >= BIG_BLOCK) {
        if (big_bytes + charge > BIG_BYTES_PER_INPUT)
            return 0;
        big_bytes += charge;
    }
    return 1;
}

static int room_for(size_t size, size_t align)
{
    size_t charge = charge_of(size, align);
    return nlive < MAX_LIVE && bytes_room(charge, charge);
}

static void before_call(void) { reserved_before = kame_pool_reserved_bytes(); }

/* With a ceiling, the pool maps nothing past it (or past what it already
 * had when the ceiling was set lower). */
static void check_ceiling(void)
{
    if (ceiling == 0)
        return;
    size_t now = kame_pool_reserved_bytes();
    size_t limit = ceiling > reserved_before ? ceiling : reserved_before;
    if (now > limit)
        fail("reserved bytes %zu past the ceiling %zu (was %zu before the call)", now, ceiling,
             reserved_before);
}

enum { FRESH, ZEROED };

/* Enters a block the pool just returned into the model and fills it.  When
 * `from` is given, the block is a realloc of it: the shared prefix must
 * have come along. */
static void adopt(void *ptr, size_t size, size_t align, int how, const block *from)
{
    unsigned char *p = ptr;
    if ((uintptr_t)p % align != 0)
        fail("%p (size %zu) is not aligned to %zu", ptr, size, align);
    size_t usable = kame_pool_malloc_usable_size(p);
    if (usable < size)
        fail("%p: usable size %zu below the requested %zu", ptr, usable, size);
    if (align == size && exact_slot(size) && usable != size)
        fail("%p: usable size %zu of a power-of-two request of %zu", ptr, usable, size);
    if (usable > 2 * size + align + USABLE_SLACK)
        fail("%p: usable size %zu far above the requested %zu (alignment %zu)", ptr, usable, size,
             align);
    span_insert((uintptr_t)p, (uintptr_t)p + (usable ? usable : 1));
    block b = {p, size, usable, charge_of(size, align), (next_id * 977u) % PAT_PERIOD, next_id};
    next_id++;
    if (how == ZEROED) {
        range r[MAX_RANGES];
        int n = sample_ranges(size, usable, r);
        for (int i = 0; i < n; i++) {
            size_t hi = r[i].hi < size ? r[i].hi : size;
            size_t bad = zero_find_bad(p, r[i].lo, hi);
            if (bad < hi)
                fail("calloc block %p (size %zu) byte %zu is %#x, not 0", ptr, size, bad, p[bad]);
        }
    }
    if (from != NULL)
        check_pattern_at(from, p, from->size < size ? from->size : size, "realloc");
    live[nlive++] = b;
    live_bytes += b.charge;
    fill(&live[nlive - 1]);
    check_ceiling();
    TRACE("  -> #%u %p size %zu usable %zu\n", b.id, ptr, size, usable);
}

/* Takes block i out of the model after checking it; the caller frees it. */
static block release(size_t i, const char *what)
{
    block b = live[i];
    verify(&b, what);
    span_remove((uintptr_t)b.p);
    live[i] = live[--nlive];
    live_bytes -= b.charge;
    return b;
}

static void free_checked(void *p)
{
    errno = ERRNO_MARK;
    kame_pool_free(p);
    if (errno != ERRNO_MARK)
        fail("free(%p) changed errno to %d", p, errno);
}

static void free_local(size_t i)
{
    block b = release(i, "free");
    TRACE("  free #%u %p\n", b.id, (void *)b.p);
    free_checked(b.p);
}

/* ---- The helper thread -------------------------------------------------- */

enum { H_FREE, H_MALLOC, H_CALLOC, H_REALLOC, H_EXIT };

static struct {
    pthread_t thread;
    int running, initialised;
    sem_t go, done;
    int op;
    void *p;
    size_t n;
    void *ret;
    int err;
} helper;

static void sem_wait_all(sem_t *s)
{
    while (sem_wait(s) != 0)
        ;
}

static void *helper_main(void *arg)
{
    (void)arg;
    for (;;) {
        sem_wait_all(&helper.go);
        int op = helper.op;
        switch (op) {
        case H_FREE:
            errno = ERRNO_MARK;
            kame_pool_free(helper.p);
            helper.err = errno;
            break;
        case H_MALLOC: helper.ret = kame_pool_malloc(helper.n); break;
        case H_CALLOC: helper.ret = kame_pool_calloc(1, helper.n); break;
        case H_REALLOC: helper.ret = kame_pool_realloc(helper.p, helper.n); break;
        default: break;
        }
        sem_post(&helper.done);
        if (op == H_EXIT)
            return NULL;
    }
}

static void helper_start(void)
{
    if (helper.running)
        return;
    if (!helper.initialised) {
        if (sem_init(&helper.go, 0, 0) != 0 || sem_init(&helper.done, 0, 0) != 0)
            fail("sem_init: %s", strerror(errno));
        helper.initialised = 1;
    }
    int rc = pthread_create(&helper.thread, NULL, helper_main, NULL);
    if (rc != 0)
        fail("pthread_create: %s", strerror(rc));
    helper.running = 1;
}

/* Runs one operation on the helper thread and waits for it. */
static void *helper_do(int op, void *p, size_t n)
{
    helper_start();
    helper.op = op;
    helper.p = p;
    helper.n = n;
    helper.ret = NULL;
    sem_post(&helper.go);
    sem_wait_all(&helper.done);
    return helper.ret;
}

/* The helper thread exits: its chunks with live slots become orphans. */
static void helper_stop(void)
{
    if (!helper.running)
        return;
    helper_do(H_EXIT, NULL, 0);
    pthread_join(helper.thread, NULL);
    helper.running = 0;
}

/* ---- Operations --------------------------------------------------------- */

static void op_malloc(reader *r)
{
    size_t n = rd_size(r);
    TRACE("malloc(%zu)\n", n);
    if (nlive == MAX_LIVE)
        free_local(0);
    if (!room_for(n, 1))
        return;
    before_call();
    void *p = kame_pool_malloc(n);
    if (p == NULL)
        fail("malloc(%zu) returned NULL", n);
    adopt(p, n, natural_align(n), FRESH, NULL);
}

static void op_free(reader *r)
{
    uint8_t s = rd_u8(r);
    if (nlive)
        free_local(s % nlive);
}

static void op_calloc(reader *r)
{
    uint8_t c = rd_u8(r);
    size_t n = rd_size(r);
    size_t count = 1 + c % 4, elem = n / count;
    if (c & 0x80) {
        size_t t = count;
        count = elem;
        elem = t;
    }
    size_t total = count * elem;
    TRACE("calloc(%zu, %zu)\n", count, elem);
    if (nlive == MAX_LIVE)
        free_local(0);
    if (!room_for(total, 1))
        return;
    before_call();
    void *p = kame_pool_calloc(count, elem);
    if (p == NULL)
        fail("calloc(%zu, %zu) returned NULL", count, elem);
    adopt(p, total, natural_align(total), ZEROED, NULL);
}

/* Reallocs live block i to n bytes, on the helper thread when `remote`. */
static void realloc_block(size_t i, size_t n, int remote)
{
    block old = live[i];
    TRACE("%srealloc(#%u %p size %zu usable %zu, %zu)\n", remote ? "remote " : "", old.id,
          (void *)old.p, old.size, old.usable, n);
    verify(&old, "before realloc");
    if (!bytes_room(n, n > old.charge ? n - old.charge : 0))
        return;
    before_call();
    void *q = remote ? helper_do(H_REALLOC, old.p, n) : kame_pool_realloc(old.p, n);
    if (n == 0) {
        if (q != NULL)
            fail("realloc(%p, 0) returned %p, not NULL", (void *)old.p, q);
        span_remove((uintptr_t)old.p);
        live[i] = live[--nlive];
        live_bytes -= old.charge;
        return;
    }
    if (q == NULL)
        fail("realloc(%p, %zu) returned NULL", (void *)old.p, n);
    span_remove((uintptr_t)old.p);
    live[i] = live[--nlive];
    live_bytes -= old.charge;
    adopt(q, n, malloc_align(n), FRESH, &old);
}

static void op_realloc(reader *r)
{
    uint8_t s = rd_u8(r), m = rd_u8(r);
    size_t n = rd_size(r);
    if (nlive == 0 || (m >> 3) % 16 == 15) {
        /* realloc(NULL, n) is malloc(n) */
        TRACE("realloc(NULL, %zu)\n", n);
        if (nlive == MAX_LIVE)
            free_local(0);
        if (!room_for(n, 1))
            return;
        before_call();
        void *p = kame_pool_realloc(NULL, n);
        if (p == NULL)
            fail("realloc(NULL, %zu) returned NULL", n);
        adopt(p, n, malloc_align(n), FRESH, NULL);
        return;
    }
    size_t i = s % nlive;
    const block *b = &live[i];
    /* Modes 4-7 aim at the edges of realloc in place: the usable size and
     * half of it. */
    switch (m % 8) {
    case 4: n = b->usable; break;
    case 5: n = b->usable + 1; break;
    case 6: n = b->usable / 2; break;
    case 7: n = b->usable / 2 > 0 ? b->usable / 2 - 1 : 0; break;
    default: break;
    }
    realloc_block(i, n, 0);
}

static size_t rd_align(reader *r) { return (size_t)1 << (rd_u8(r) % 28); }

static void op_aligned_alloc(reader *r)
{
    size_t a = rd_align(r), n = rd_size(r);
    TRACE("aligned_alloc(%zu, %zu)\n", a, n);
    if (nlive == MAX_LIVE)
        free_local(0);
    if (!room_for(n, a))
        return;
    before_call();
    void *p = kame_pool_aligned_alloc(a, n);
    if (p == NULL)
        fail("aligned_alloc(%zu, %zu) returned NULL", a, n);
    adopt(p, n, a, FRESH, NULL);
}

static void op_posix_memalign(reader *r)
{
    size_t a = rd_align(r), n = rd_size(r);
    TRACE("posix_memalign(%zu, %zu)\n", a, n);
    if (nlive == MAX_LIVE)
        free_local(0);
    if (!room_for(n, a))
        return;
    void *mark = &helper, *p = mark;
    before_call();
    int rc = kame_pool_posix_memalign(&p, a, n);
    if (a < sizeof(void *)) {
        if (rc != EINVAL || p != mark)
            fail("posix_memalign(%zu, %zu) returned %d, %p; expected EINVAL and no store", a, n, rc, p);
        return;
    }
    if (rc != 0 || p == NULL)
        fail("posix_memalign(%zu, %zu) returned %d, %p", a, n, rc, p);
    adopt(p, n, a, FRESH, NULL);
}

static void op_usable_size(reader *r)
{
    uint8_t s = rd_u8(r);
    if (nlive == 0) {
        if (kame_pool_malloc_usable_size(NULL) != 0)
            fail("malloc_usable_size(NULL) is not 0");
        return;
    }
    verify(&live[s % nlive], "usable_size");
}

static void op_trim(reader *r)
{
    (void)r;
    TRACE("trim\n");
    kame_pool_trim();
    verify_all("after trim");
}

static void op_set_max_bytes(reader *r)
{
    uint8_t m = rd_u8(r), d = rd_u8(r);
    size_t now = kame_pool_reserved_bytes(), x;
    switch (m % 4) {
    case 0: x = 0; break;
    case 1: x = now + d * MiB; break;
    case 2: x = now > d * MiB ? now - d * MiB : 1; break;
    default: x = 1; break;
    }
    TRACE("set_max_bytes(%zu) (reserved %zu)\n", x, now);
    kame_pool_set_max_bytes(x);
    ceiling = x;
    size_t got = kame_pool_get_max_bytes();
    if (x != 0 ? got != x : got < ((size_t)1 << (sizeof(size_t) == 8 ? 47 : 31)))
        fail("get_max_bytes() is %zu after set_max_bytes(%zu)", got, x);
}

static void op_remote_free(reader *r)
{
    uint8_t s = rd_u8(r);
    if (nlive == 0)
        return;
    block b = release(s % nlive, "remote free");
    TRACE("remote free #%u %p\n", b.id, (void *)b.p);
    helper_do(H_FREE, b.p, 0);
    if (helper.err != ERRNO_MARK)
        fail("free(%p) on the helper thread changed errno to %d", (void *)b.p, helper.err);
}

static void op_remote_alloc(reader *r)
{
    uint8_t m = rd_u8(r);
    size_t n = rd_size(r);
    int zero = m & 1;
    TRACE("remote %s(%zu)\n", zero ? "calloc" : "malloc", n);
    if (nlive == MAX_LIVE)
        free_local(0);
    if (!room_for(n, 1))
        return;
    helper_start(); /* thread creation may allocate (with the override) */
    before_call();
    void *p = helper_do(zero ? H_CALLOC : H_MALLOC, NULL, n);
    if (p == NULL)
        fail("malloc(%zu) on the helper thread returned NULL", n);
    adopt(p, n, natural_align(n), zero ? ZEROED : FRESH, NULL);
}

static void op_helper_exit(reader *r)
{
    (void)r;
    TRACE("helper exit\n");
    helper_stop();
}

static void op_free_run(reader *r)
{
    uint8_t s = rd_u8(r), c = rd_u8(r);
    for (unsigned k = 0; k <= c % 16u && nlive; k++)
        free_local(s % nlive);
}

static void op_malloc_run(reader *r)
{
    uint8_t c = rd_u8(r);
    size_t n = rd_size(r);
    TRACE("malloc run %u x %zu\n", 1 + c % 64u, n);
    for (unsigned k = 0; k <= c % 64u; k++) {
        if (nlive == MAX_LIVE)
            free_local(0);
        if (!room_for(n, 1))
            return;
        before_call();
        void *p = kame_pool_malloc(n);
        if (p == NULL)
            fail("malloc(%zu) returned NULL", n);
        adopt(p, n, natural_align(n), FRESH, NULL);
    }
}

static void expect_null(void *p, int err, const char *call)
{
    if (p != NULL || errno != err)
        fail("%s returned %p with errno %d; expected NULL and %d", call, p, errno, err);
}

/* Requests that must fail, and leave the pool and the block they name as
 * they were. */
static void op_bad_request(reader *r)
{
    uint8_t k = rd_u8(r), s = rd_u8(r);
    const size_t big_align = (size_t)1 << (sizeof(size_t) * 8 - 2);
    void *p;
    block *b = nlive ? &live[s % nlive] : NULL;
    TRACE("bad request %u\n", k % 8u);
    errno = 0;
    switch (k % 8) {
    case 0:
        expect_null(kame_pool_malloc(SIZE_MAX), ENOMEM, "malloc(SIZE_MAX)");
        if (kame_pool_malloc_usable_size(NULL) != 0)
            fail("malloc_usable_size(NULL) is not 0");
        free_checked(NULL);
        break;
    case 1:
        expect_null(kame_pool_malloc((size_t)PTRDIFF_MAX + 1), ENOMEM, "malloc(PTRDIFF_MAX + 1)");
        break;
    case 2:
        if (s & 1)
            expect_null(kame_pool_calloc(SIZE_MAX / 8 + 2, 8), ENOMEM, "calloc(SIZE_MAX / 8 + 2, 8)");
        else
            expect_null(kame_pool_calloc(2, (size_t)PTRDIFF_MAX / 2 + 1), ENOMEM,
                        "calloc(2, PTRDIFF_MAX / 2 + 1)");
        break;
    case 3:
    case 7: {
        /* PTRDIFF_MAX is past any 64-bit address space, not a 32-bit one. */
        size_t n = k % 8 == 3 || sizeof(size_t) < 8 ? SIZE_MAX : (size_t)PTRDIFF_MAX;
        if (b == NULL) {
            expect_null(kame_pool_realloc(NULL, n), ENOMEM, "realloc(NULL, huge)");
            break;
        }
        expect_null(kame_pool_realloc(b->p, n), ENOMEM, "realloc(p, huge)");
        verify(b, "after a failed realloc");
        break;
    }
    case 4: {
        static const size_t bad[] = {0, 3, 24, 48, (size_t)3 << 20};
        size_t a = bad[s % 5];
        expect_null(kame_pool_aligned_alloc(a, 16), EINVAL, "aligned_alloc(bad alignment)");
        break;
    }
    case 5: {
        static const size_t bad[] = {0, 1, 2, sizeof(void *) / 2, 24, (size_t)3 << 20};
        size_t a = bad[s % 6];
        p = &helper;
        int rc = kame_pool_posix_memalign(&p, a, 16);
        if (rc != EINVAL || p != &helper)
            fail("posix_memalign(%zu, 16) returned %d, %p; expected EINVAL and no store", a, rc, p);
        break;
    }
    default: /* 6 */
        expect_null(kame_pool_aligned_alloc(big_align, 16), ENOMEM, "aligned_alloc(2^62, 16)");
        p = &helper;
        if (kame_pool_posix_memalign(&p, big_align, 16) != ENOMEM || p != &helper)
            fail("posix_memalign(2^62, 16) did not fail with ENOMEM");
        break;
    }
}

static void op_remote_realloc(reader *r)
{
    uint8_t s = rd_u8(r);
    size_t n = rd_size(r);
    if (nlive == 0)
        return;
    helper_start();
    realloc_block(s % nlive, n, 1);
}

typedef struct {
    const char *name;
    void (*run)(reader *r);
} op_def;

/* Opcode byte modulo OP_SLOTS selects the operation.  Slots past the
 * defined operations repeat the table from its start; a new operation takes
 * the first repeating slot, so that inputs keep their meaning in the
 * defined slots (and the seed corpus, which uses only those, all of it).
 * Argument bytes: malloc 3, free 1, calloc 4, realloc 5, aligned_alloc 4,
 * posix_memalign 4, usable_size 1, trim 0, set_max_bytes 2, remote_free 1,
 * remote_alloc 4, helper_exit 0, free_run 2, malloc_run 4, bad_request 2,
 * remote_realloc 4. */
static const op_def ops[] = {
    {"malloc", op_malloc},
    {"free", op_free},
    {"calloc", op_calloc},
    {"realloc", op_realloc},
    {"aligned_alloc", op_aligned_alloc},
    {"posix_memalign", op_posix_memalign},
    {"usable_size", op_usable_size},
    {"trim", op_trim},
    {"set_max_bytes", op_set_max_bytes},
    {"remote_free", op_remote_free},
    {"remote_alloc", op_remote_alloc},
    {"helper_exit", op_helper_exit},
    {"free_run", op_free_run},
    {"malloc_run", op_malloc_run},
    {"bad_request", op_bad_request},
    {"remote_realloc", op_remote_realloc},
};
#define NOPS (sizeof ops / sizeof ops[0])
#define OP_SLOTS 32
_Static_assert(NOPS <= OP_SLOTS, "no opcode slot left");

/* ---- The entry point ---------------------------------------------------- */

static void finish_input(void)
{
    op_name = "cleanup";
    while (nlive)
        free_local(nlive - 1);
    helper_stop();
    kame_pool_set_max_bytes(0);
    ceiling = 0;
    kame_pool_trim();
    /* Regions stay mapped; every large or huge block has been unmapped. */
    size_t reserved = kame_pool_reserved_bytes();
    if (reserved % REGION_SIZE != 0)
        fail("%zu bytes reserved with every block freed: not whole regions", reserved);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int initialised;
    if (!initialised) {
        pat_init();
        const char *t = getenv("FUZZ_API_TRACE");
        trace = t != NULL && *t != '\0' && *t != '0';
        initialised = 1;
    }
    reader r = {data, size};
    nlive = live_bytes = nspans = big_bytes = 0;
    next_id = 1;
    ceiling = 0;
    for (op_index = 0; r.n > 0; op_index++) {
        const op_def *op = &ops[rd_u8(&r) % OP_SLOTS % NOPS];
        op_name = op->name;
        op->run(&r);
    }
    finish_input();
    return 0;
}
