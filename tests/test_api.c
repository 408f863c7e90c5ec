/* API conformance of the explicit C interface (kame_pool_*): every entry
 * point against its edge cases, then tables over sizes, alignments and
 * tiers.  Uses nothing but kame_pool_* for pool memory, so it also runs in
 * the sanitizer builds where plain malloc belongs to the sanitizer.
 *
 * KP_API_QUICK=1 in the environment thins the size tables (for slow
 * sanitizer runs); the edge cases are the same either way. */
#ifdef _WIN32
#include <windows.h>
#else
#include <dlfcn.h>
#endif
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kame_pool.h"
#include "check.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Tier boundaries the sizes below are chosen around. */
#define BUCKET_MAX (32 * KiB)
#define DEDICATED_MAX (4 * MiB)
#define LARGE_MAX (32 * MiB)

static int quick;

/* In the sanitizer builds the system allocator is the sanitizer's, and a
 * request it cannot serve (the pool passes some impossible sizes on to it)
 * aborts the program by default instead of returning NULL with ENOMEM. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KP_TEST_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define KP_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(KP_TEST_ASAN)
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#if defined(__SANITIZE_THREAD__) || defined(KP_TEST_TSAN)
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* The system allocator, for foreign pointers.  With the override, plain
 * malloc is the pool's, so glibc's own is looked up in libc itself. */
static void *(*sys_malloc)(size_t);
static void (*sys_free)(void *);

static int sys_alloc_init(void)
{
#if defined(_WIN32) && defined(KP_TEST_OVERRIDE)
    /* The program's malloc is redirected to the pool: the C runtime's own
     * functions, by name. */
    HMODULE crt = GetModuleHandleA("msvcrt.dll");
    if (crt == NULL)
        return 0;
    sys_malloc = (void *(*)(size_t))(void *)GetProcAddress(crt, "malloc");
    sys_free = (void (*)(void *))(void *)GetProcAddress(crt, "free");
    return sys_malloc != NULL && sys_free != NULL;
#elif defined(KP_TEST_OVERRIDE)
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (libc == NULL)
        return 0;
    sys_malloc = (void *(*)(size_t))dlsym(libc, "malloc");
    sys_free = (void (*)(void *))dlsym(libc, "free");
    return sys_malloc != NULL && sys_free != NULL;
#else
    sys_malloc = malloc;
    sys_free = free;
    return 1;
#endif
}

/* ---- content helpers ---------------------------------------------------- */

/* Writes every page of a big block and its last byte, reads them back. */
static int touch_pages(void *p, size_t n)
{
    unsigned char *b = p;
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = (unsigned char)(i >> 12);
    b[n - 1] = 0x5c;
    for (size_t i = 0; i < n; i += 4096)
        if (i != n - 1 && b[i] != (unsigned char)(i >> 12))
            return 0;
    return b[n - 1] == 0x5c;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Whole-block write for sizes where it is cheap, page touch for the rest. */
static void write_whole_and_check(unsigned char *p, size_t n, unsigned seed)
{
    if (n <= 2 * MiB) {
        kp_fill_pat(p, n, seed);
        EXPECT_PATTERN(p, n, seed);
    } else {
        EXPECTF(touch_pages(p, n), "block %p of %zu bytes not writable page by page", (void *)p, n);
    }
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- bad input ------------------------------------------------------------ */

static const struct named_size {
    const char *name;
    size_t n;
} impossible_sizes[] = {
    { "SIZE_MAX", SIZE_MAX },
    { "SIZE_MAX-1", SIZE_MAX - 1 },
    { "SIZE_MAX-15", SIZE_MAX - 15 },
    { "SIZE_MAX-4095", SIZE_MAX - 4095 },
    { "SIZE_MAX-32MiB+1", SIZE_MAX - 32 * MiB + 1 },
    { "PTRDIFF_MAX+1", (size_t)PTRDIFF_MAX + 1 },
    /* Past any 64-bit address space; in a 32-bit one PTRDIFF_MAX may
     * well be had, so there the next size up stands in. */
    { "PTRDIFF_MAX (32-bit: +1)", (size_t)PTRDIFF_MAX + (sizeof(size_t) == 8 ? 0 : 1) },
};
#define N_IMPOSSIBLE (sizeof impossible_sizes / sizeof impossible_sizes[0])

/* One size per tier, plus both ends of the bucket tier. */
static const size_t tier_sizes[] = { 1, 24, 3000, 32 * KiB, 40000, 3 * MiB, 5 * MiB, 40 * MiB };
#define N_TIER (sizeof tier_sizes / sizeof tier_sizes[0])

static void test_malloc_edges(void)
{
    CHECK("malloc(0) non-NULL, unique, freeable") {
        void *a = kame_pool_malloc(kp_opaque(0));
        void *b = kame_pool_malloc(kp_opaque(0));
        EXPECT_NOT_NULL(a);
        EXPECT_NOT_NULL(b);
        EXPECT(a != b);
        EXPECT_ALIGNED(a, 8);
        EXPECT_ALIGNED(b, 8);
        kame_pool_free(a);
        kame_pool_free(b);
    }

    for (size_t i = 0; i < N_IMPOSSIBLE; i++) {
        CHECK("malloc(%s) -> NULL, ENOMEM", impossible_sizes[i].name) {
            errno = 0;
            void *p = kame_pool_malloc(kp_opaque(impossible_sizes[i].n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            kame_pool_free(p);
        }
    }

    CHECK("malloc_usable_size(NULL) == 0") {
        EXPECT_U_EQ(kame_pool_malloc_usable_size(NULL), 0);
    }
}

static void test_calloc_edges(void)
{
    static const struct { const char *name; size_t n, m; } over[] = {
        { "(SIZE_MAX/2+1) x 2", SIZE_MAX / 2 + 1, 2 },
        { "2 x (SIZE_MAX/2+1)", 2, SIZE_MAX / 2 + 1 },
        { "SIZE_MAX x SIZE_MAX", SIZE_MAX, SIZE_MAX },
        { "SIZE_MAX x 2", SIZE_MAX, 2 },
        { "2^32 x 2^32 (wraps to exactly 0)", KP_SIZE_BIT(KP_SIZE_BITS / 2), KP_SIZE_BIT(KP_SIZE_BITS / 2) },
        { "2^33 x 2^31 (wraps to exactly 0)", KP_SIZE_BIT(KP_SIZE_BITS / 2 + 1), KP_SIZE_BIT(KP_SIZE_BITS / 2 - 1) },
        { "3 x (SIZE_MAX/3+1)", 3, SIZE_MAX / 3 + 1 },
        { "65537 x 2^48 (wraps to small)", 65537, KP_SIZE_BIT(KP_SIZE_BITS - 16) },
        { "2^62 x 2 (no wrap, too big)", KP_SIZE_BIT(KP_SIZE_BITS - 2), 2 },
        { "1 x SIZE_MAX", 1, SIZE_MAX },
        { "SIZE_MAX x 1", SIZE_MAX, 1 },
    };
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        CHECK("calloc(%s) -> NULL, ENOMEM", over[i].name) {
            errno = 0;
            void *p = kame_pool_calloc(kp_opaque(over[i].n), kp_opaque(over[i].m));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            kame_pool_free(p);
        }
    }

    static const struct { size_t n, m; } zero[] = { { 0, 0 }, { 0, 16 }, { 16, 0 }, { 0, SIZE_MAX }, { SIZE_MAX, 0 } };
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        CHECK("calloc(%zu, %zu) (zero bytes) non-NULL, unique, freeable", zero[i].n, zero[i].m) {
            void *a = kame_pool_calloc(kp_opaque(zero[i].n), kp_opaque(zero[i].m));
            void *b = kame_pool_calloc(kp_opaque(zero[i].n), kp_opaque(zero[i].m));
            EXPECT_NOT_NULL(a);
            EXPECT_NOT_NULL(b);
            EXPECT(a != b);
            kame_pool_free(a);
            kame_pool_free(b);
        }
    }
}

static void test_realloc_edges(void)
{
    for (size_t t = 0; t < N_TIER; t++) {
        size_t n = tier_sizes[t];
        CHECK("realloc(p[%zu], impossible) -> NULL, ENOMEM, p intact", n) {
            unsigned char *p = kame_pool_malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            size_t usable = kame_pool_malloc_usable_size(p);
            kp_fill_pat(p, n, 11);
            for (size_t i = 0; i < N_IMPOSSIBLE; i++) {
                errno = 0;
                void *q = kame_pool_realloc(p, kp_opaque(impossible_sizes[i].n));
                EXPECTF(q == NULL, "realloc(p, %s) returned %p", impossible_sizes[i].name, q);
                EXPECTF(errno == ENOMEM, "realloc(p, %s): errno %d, expected ENOMEM",
                        impossible_sizes[i].name, errno);
                if (q != NULL) {
                    /* It claimed success; whatever it is, p is gone. */
                    kame_pool_free(q);
                    p = NULL;
                    break;
                }
            }
            if (p == NULL)
                continue;
            EXPECT_PATTERN(p, n, 11);
            EXPECT_U_EQ(kame_pool_malloc_usable_size(p), usable);
            /* p still works as a live block. */
            unsigned char *r = kame_pool_realloc(p, kp_opaque(n * 2 + 1));
            if (EXPECT_NOT_NULL(r)) {
                EXPECT_PATTERN(r, n, 11);
                kame_pool_free(r);
            } else {
                kame_pool_free(p);
            }
        }
    }

    static const size_t null_sizes[] = { 0, 1, 8, 24, 1000, 4096, 40000, 3 * MiB, 5 * MiB, 40 * MiB };
    for (size_t i = 0; i < sizeof null_sizes / sizeof null_sizes[0]; i++) {
        size_t n = null_sizes[i];
        CHECK("realloc(NULL, %zu) behaves as malloc", n) {
            unsigned char *p = kame_pool_realloc(NULL, kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_GE(kame_pool_malloc_usable_size(p), n);
            EXPECT_ALIGNED(p, n <= 8 ? 8 : 16);
            write_whole_and_check(p, n, 3);
            kame_pool_free(p);
        }
    }

    for (size_t t = 0; t < N_TIER; t++) {
        size_t n = tier_sizes[t];
        CHECK("realloc(p[%zu], 0) frees p and returns NULL", n) {
            void *p = kame_pool_malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            memset(p, 0x33, n);
            void *q = kame_pool_realloc(p, kp_opaque(0));
            EXPECT_NULL(q);
            kame_pool_free(q);
        }
    }

    /* That realloc(p, 0) really frees: a block above the recycle cache's
     * top is unmapped at once, and repeating it many times with smaller
     * blocks must not grow the pool. */
    CHECK("realloc(huge, 0) gives the mapping back") {
        size_t before = kame_pool_reserved_bytes();
        void *p = kame_pool_malloc(kp_opaque(100 * MiB));
        if (!EXPECT_NOT_NULL(p))
            continue;
        size_t held = kame_pool_reserved_bytes();
        EXPECT_U_GE(held, before + 100 * MiB);
        EXPECT_NULL(kame_pool_realloc(p, kp_opaque(0)));
        EXPECT_U_LE(kame_pool_reserved_bytes(), held - 100 * MiB);
    }
    static const struct { size_t n, rounds; } leak[] = { { 1000, 100000 }, { 100 * KiB, 600 }, { 5 * MiB, 40 } };
    for (size_t i = 0; i < sizeof leak / sizeof leak[0]; i++) {
        CHECK("realloc(p[%zu], 0) x %zu does not leak", leak[i].n, leak[i].rounds) {
            /* Warm up so caches are populated before the baseline. */
            void *w = kame_pool_malloc(kp_opaque(leak[i].n));
            kame_pool_free(w);
            size_t before = kame_pool_reserved_bytes();
            size_t nulls = 0;
            for (size_t r = 0; r < leak[i].rounds; r++) {
                unsigned char *p = kame_pool_malloc(kp_opaque(leak[i].n));
                if (p == NULL)
                    break;
                p[0] = 1;
                p[leak[i].n - 1] = 2;
                nulls += kame_pool_realloc(p, kp_opaque(0)) == NULL;
            }
            EXPECT_U_EQ(nulls, leak[i].rounds);
            /* Leaking would map well over 100 MiB. */
            EXPECT_U_LE(kame_pool_reserved_bytes(), before + 64 * MiB);
        }
    }
}

static void test_free_edges(void)
{
    CHECK("free(NULL) is a no-op and keeps errno") {
        errno = 4242;
        kame_pool_free(NULL);
        EXPECT_INT_EQ(errno, 4242);
    }

    for (size_t t = 0; t < N_TIER; t++) {
        size_t n = tier_sizes[t];
        CHECK("free(p[%zu]) preserves errno", n) {
            for (int sentinel = 1234; sentinel <= 1236; sentinel++) {
                unsigned char *p = kame_pool_malloc(kp_opaque(n));
                if (!EXPECT_NOT_NULL(p))
                    break;
                p[0] = 1;
                p[n - 1] = 1;
                errno = sentinel;
                kame_pool_free(p);
                EXPECT_INT_EQ(errno, sentinel);
            }
        }
    }

    CHECK("free of aligned blocks preserves errno") {
        static const size_t al[] = { 64, 4096, 64 * KiB, 1 * MiB, 8 * MiB, 64 * MiB };
        for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
            void *p = kame_pool_aligned_alloc(kp_opaque(al[i]), kp_opaque(100));
            if (!EXPECT_NOT_NULL(p))
                continue;
            errno = 777;
            kame_pool_free(p);
            EXPECTF(errno == 777, "alignment %zu: errno %d after free", al[i], errno);
        }
    }

    CHECK("freeing a whole batch (chunks emptied) preserves errno") {
        enum { N = 3000 };
        static void *ptrs[N];
        size_t got = 0;
        for (size_t i = 0; i < N; i++) {
            ptrs[i] = kame_pool_malloc(kp_opaque(1000 + (i % 7) * 16));
            got += ptrs[i] != NULL;
        }
        EXPECT_U_EQ(got, N);
        int bad = 0;
        for (size_t i = 0; i < N; i++) {
            errno = 9999;
            kame_pool_free(ptrs[i]);
            if (errno != 9999 && bad++ == 0)
                FAILF("free #%zu changed errno to %d", i, errno);
        }
        EXPECT_INT_EQ(bad, 0);
    }
}

static const size_t einval_posix_align[] = { 0, 1, 2, 3, sizeof(void *) / 2, 12, 24, 48, 96, 1000, SIZE_MAX, SIZE_MAX / 2 + 9 };
static const size_t einval_c11_align[] = { 0, 3, 24, 48, 1000, SIZE_MAX, SIZE_MAX / 2 + 9 };
static const struct { size_t align, n; } enomem_align[] = {
    { 16, SIZE_MAX },
    { 64, (size_t)PTRDIFF_MAX + 1 },
    { 4096, SIZE_MAX - 4000 },
    { 1 * MiB, SIZE_MAX - 1 * MiB + 1 },
    { 64 * MiB, SIZE_MAX - 64 * MiB },
    { 64 * MiB, (size_t)PTRDIFF_MAX },
    { KP_SIZE_BIT(KP_SIZE_BITS - 2), 16 },
    { KP_SIZE_BIT(KP_SIZE_BITS - 1), 16 },
    { KP_SIZE_BIT(KP_SIZE_BITS - 1), KP_SIZE_BIT(KP_SIZE_BITS - 1) },
};

static void test_aligned_edges(void)
{
    static int marker;
    for (size_t i = 0; i < sizeof einval_posix_align / sizeof einval_posix_align[0]; i++) {
        size_t a = einval_posix_align[i];
        CHECK("posix_memalign(align %zu) -> EINVAL", a) {
            void *out = &marker;
            int rc = kame_pool_posix_memalign(&out, kp_opaque(a), kp_opaque(64));
            EXPECT_INT_EQ(rc, EINVAL);
            /* POSIX: *out is left alone (or, some say, set to NULL). */
            EXPECTF(out == &marker || out == NULL, "*out changed to %p", out);
            if (rc == 0)
                kame_pool_free(out);
        }
    }
    for (size_t i = 0; i < sizeof enomem_align / sizeof enomem_align[0]; i++) {
        size_t a = enomem_align[i].align, n = enomem_align[i].n;
        CHECK("posix_memalign(align %#zx, size %#zx) -> ENOMEM", a, n) {
            void *out = &marker;
            int rc = kame_pool_posix_memalign(&out, kp_opaque(a), kp_opaque(n));
            EXPECT_INT_EQ(rc, ENOMEM);
            EXPECTF(out == &marker || out == NULL, "*out changed to %p", out);
            if (rc == 0)
                kame_pool_free(out);
        }
        CHECK("aligned_alloc(align %#zx, size %#zx) -> NULL, ENOMEM", a, n) {
            errno = 0;
            void *p = kame_pool_aligned_alloc(kp_opaque(a), kp_opaque(n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            kame_pool_free(p);
        }
    }
    for (size_t i = 0; i < sizeof einval_c11_align / sizeof einval_c11_align[0]; i++) {
        size_t a = einval_c11_align[i];
        CHECK("aligned_alloc(align %zu) -> NULL, EINVAL", a) {
            errno = 0;
            void *p = kame_pool_aligned_alloc(kp_opaque(a), kp_opaque(64));
            EXPECT_NULL(p);
            EXPECT_ERRNO(EINVAL);
            kame_pool_free(p);
        }
    }
    CHECK("posix_memalign / aligned_alloc with size 0: non-NULL, unique, freeable") {
        void *a = NULL, *b = NULL;
        EXPECT_INT_EQ(kame_pool_posix_memalign(&a, kp_opaque(64), kp_opaque(0)), 0);
        EXPECT_INT_EQ(kame_pool_posix_memalign(&b, kp_opaque(64), kp_opaque(0)), 0);
        EXPECT_NOT_NULL(a);
        EXPECT(a != b);
        EXPECT_ALIGNED(a, 64);
        void *c = kame_pool_aligned_alloc(kp_opaque(8), kp_opaque(0));
        void *d = kame_pool_aligned_alloc(kp_opaque(4096), kp_opaque(0));
        EXPECT_NOT_NULL(c);
        EXPECT_NOT_NULL(d);
        EXPECT_ALIGNED(d, 4096);
        kame_pool_free(a);
        kame_pool_free(b);
        kame_pool_free(c);
        kame_pool_free(d);
    }
    CHECK("aligned_alloc with alignment 1, 2, 4 (valid, below a pointer)") {
        static const size_t al[] = { 1, 2, 4 }, sz[] = { 1, 3, 100, 5000 };
        for (size_t i = 0; i < 3; i++) {
            for (size_t j = 0; j < 4; j++) {
                unsigned char *p = kame_pool_aligned_alloc(kp_opaque(al[i]), kp_opaque(sz[j]));
                if (!EXPECTF(p != NULL, "aligned_alloc(%zu, %zu)", al[i], sz[j]))
                    continue;
                EXPECT_U_GE(kame_pool_malloc_usable_size(p), sz[j]);
                memset(p, 0x77, sz[j]);
                kame_pool_free(p);
            }
        }
    }
}

/* ---- foreign pointers ----------------------------------------------------- */

static void test_foreign(void)
{
    static const size_t sizes[] = { 1, 100, 5000, 200 * KiB, 5 * MiB };
    int have_sys = sys_malloc != NULL;
    CHECK("system allocator found for foreign-pointer checks") {
        EXPECT(have_sys);
#ifdef KP_TEST_OVERRIDE
        /* With the override in place the lookup must not give the pool's own. */
        EXPECT((void *)sys_malloc != (void *)kame_pool_malloc);
        EXPECT((void *)sys_malloc != (void *)malloc);
#endif
    }
    if (!have_sys)
        return;

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        CHECK("foreign[%zu]: malloc_usable_size >= requested, contents kept", n) {
            unsigned char *q = sys_malloc(n);
            if (!EXPECT_NOT_NULL(q))
                continue;
            kp_fill_pat(q, n, 21);
            EXPECT_U_GE(kame_pool_malloc_usable_size(q), n);
            EXPECT_PATTERN(q, n, 21);
            sys_free(q);
        }
        CHECK("foreign[%zu]: kame_pool_free releases it and keeps errno", n) {
            unsigned char *q = sys_malloc(n);
            if (!EXPECT_NOT_NULL(q))
                continue;
            kp_fill_pat(q, n, 22);
            errno = 5151;
            kame_pool_free(q);
            EXPECT_INT_EQ(errno, 5151);
        }
        static const size_t targets[] = { 0, 1, 50, 3000, 40000, 300 * KiB, 6 * MiB };
        for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
            size_t m = targets[t];
            CHECK("foreign[%zu]: kame_pool_realloc to %zu keeps contents", n, m) {
                unsigned char *q = sys_malloc(n);
                if (!EXPECT_NOT_NULL(q))
                    continue;
                kp_fill_pat(q, n, 23);
                unsigned char *r = kame_pool_realloc(q, kp_opaque(m));
                if (m == 0) {
                    EXPECT_NULL(r);
                    kame_pool_free(r);
                    continue;
                }
                if (!EXPECT_NOT_NULL(r)) {
                    sys_free(q);
                    continue;
                }
                EXPECT_PATTERN(r, min_sz(n, m), 23);
                EXPECT_U_GE(kame_pool_malloc_usable_size(r), m);
                write_whole_and_check(r, m, 24);
                /* The result may be the pool's or still the system's:
                 * kame_pool_free takes either. */
                kame_pool_free(r);
            }
        }
        CHECK("foreign[%zu]: kame_pool_realloc(q, SIZE_MAX) -> NULL, ENOMEM, q intact", n) {
            unsigned char *q = sys_malloc(n);
            if (!EXPECT_NOT_NULL(q))
                continue;
            kp_fill_pat(q, n, 25);
            errno = 0;
            void *r = kame_pool_realloc(q, kp_opaque(SIZE_MAX));
            EXPECT_NULL(r);
            EXPECT_ERRNO(ENOMEM);
            if (r == NULL) {
                EXPECT_PATTERN(q, n, 25);
                sys_free(q);
            } else {
                kame_pool_free(r);
            }
        }
    }
}

/* ---- size tables ---------------------------------------------------------- */

static void check_one_size(size_t n)
{
    unsigned char *a = kame_pool_malloc(kp_opaque(n));
    unsigned char *b = kame_pool_malloc(kp_opaque(n));
    if (!EXPECTF(a != NULL && b != NULL, "malloc(%zu): %p %p", n, (void *)a, (void *)b)) {
        kame_pool_free(a);
        kame_pool_free(b);
        return;
    }
    size_t ua = kame_pool_malloc_usable_size(a), ub = kame_pool_malloc_usable_size(b);
    EXPECTF(ua >= n && ub >= n, "malloc(%zu): usable sizes %zu and %zu", n, ua, ub);
    if (n <= BUCKET_MAX)
        EXPECTF(ua == ub, "malloc(%zu): same class, yet usable %zu and %zu", n, ua, ub);
    if (n >= 64 && n <= BUCKET_MAX)
        EXPECTF(ua * 4 <= n * 5, "malloc(%zu): usable %zu is more than 25%% over", n, ua);
    /* A page and a header (4 KiB and a little) is a common request. */
    if (n > 4 * KiB && n <= 8 * KiB)
        EXPECTF(ua * 8 <= n * 9, "malloc(%zu): usable %zu is more than 12.5%% over", n, ua);
    size_t align = n <= 8 ? 8 : 16;
    EXPECTF((uintptr_t)a % align == 0 && (uintptr_t)b % align == 0,
            "malloc(%zu): %p / %p not %zu-aligned", n, (void *)a, (void *)b, align);
    if (n >= KiB && n <= BUCKET_MAX && (n & (n - 1)) == 0) {
        EXPECTF(ua == n && ub == n, "malloc(%zu): power-of-two class not exact (usable %zu, %zu)", n, ua, ub);
        EXPECTF((uintptr_t)a % n == 0 && (uintptr_t)b % n == 0,
                "malloc(%zu): %p / %p not naturally aligned", n, (void *)a, (void *)b);
    }
    uintptr_t xa = (uintptr_t)a, xb = (uintptr_t)b;
    EXPECTF(xa + ua <= xb || xb + ub <= xa, "malloc(%zu): blocks overlap: %p+%zu, %p+%zu",
            n, (void *)a, ua, (void *)b, ub);
    /* Every usable byte is the caller's: fill both, read both back. */
    if (ua <= 2 * MiB) {
        memset(a, 0x5a, ua);
        memset(b, 0xa5, ub);
        EXPECT_BYTES(a, ua, 0x5a);
        EXPECT_BYTES(b, ub, 0xa5);
    } else {
        EXPECTF(touch_pages(a, ua) && touch_pages(b, ub), "malloc(%zu): pages not writable", n);
    }
    kame_pool_free(a);
    kame_pool_free(b);
}

static void test_size_tables(void)
{
    size_t step = quick ? 7 : 1;
    CHECK("sizes 0..4096 step %zu: usable, alignment, round-up, exact powers of two", step) {
        for (size_t n = 0; n <= 4096; n += step)
            check_one_size(n);
        check_one_size(4096);
    }
    size_t coarse = quick ? 101 : 13;
    CHECK("sizes 4 KiB..64 KiB step %zu and every KiB +-1", coarse) {
        for (size_t n = 4096; n <= 64 * KiB; n += coarse)
            check_one_size(n);
        for (size_t k = 4 * KiB; k <= 64 * KiB; k += KiB) {
            check_one_size(k - 1);
            check_one_size(k);
            check_one_size(k + 1);
        }
    }

    static const size_t big[] = {
        64 * KiB, 100000, 128 * KiB - 1, 128 * KiB, 256 * KiB - 1, 256 * KiB, 256 * KiB + 1,
        300000, 512 * KiB, 1 * MiB - 1, 1 * MiB, 1 * MiB + 1, 2 * MiB, 3 * MiB + 12345,
        4 * MiB - 1, 4 * MiB, 4 * MiB + 1, 5 * MiB, 8 * MiB, 16 * MiB, 32 * MiB - 1, 32 * MiB,
        32 * MiB + 1, 33 * MiB, 40 * MiB, 64 * MiB, 64 * MiB + 1, 100 * MiB,
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        CHECK("size %zu: usable, alignment, writable", big[i]) {
            check_one_size(big[i]);
        }
    }

    CHECK("power-of-two classes 1 KiB..32 KiB exact and naturally aligned (many slots)") {
        for (size_t n = KiB; n <= BUCKET_MAX; n *= 2) {
            enum { LIVE = 40 };
            void *p[LIVE];
            for (size_t i = 0; i < LIVE; i++) {
                p[i] = kame_pool_malloc(kp_opaque(n));
                if (!EXPECT_NOT_NULL(p[i]))
                    continue;
                EXPECT_U_EQ(kame_pool_malloc_usable_size(p[i]), n);
                EXPECT_ALIGNED(p[i], n);
            }
            for (size_t i = 0; i < LIVE; i++)
                kame_pool_free(p[i]);
        }
    }
}

/* ---- aligned allocation tables -------------------------------------------- */

static void check_aligned_block(const char *how, unsigned char *p, size_t align, size_t n)
{
    if (!EXPECTF(p != NULL, "%s(align %zu, size %zu) failed, errno %d", how, align, n, errno))
        return;
    EXPECTF((uintptr_t)p % align == 0, "%s(align %zu, size %zu) = %p, misaligned", how, align, n, (void *)p);
    size_t u = kame_pool_malloc_usable_size(p);
    EXPECTF(u >= n, "%s(align %zu, size %zu): usable %zu", how, align, n, u);
    if (u > 0)
        p[u - 1] = 0x33;
    if (n > 1) {
        p[0] = 0x11;
        p[n - 1] = 0x22;
        EXPECTF(p[0] == 0x11 && p[n - 1] == 0x22,
                "%s(align %zu, size %zu): bytes did not stick", how, align, n);
    }
}

static void test_aligned_tables(void)
{
    for (size_t align = 1; align <= 64 * MiB; align *= 2) {
        size_t sizes[] = { 1, align - 1, align, align + 1, 3 * align, 24, 3000, 40000, 5 * MiB, 40 * MiB };
        size_t nsizes = sizeof sizes / sizeof sizes[0];
        CHECK("aligned_alloc / posix_memalign, alignment %zu", align) {
            for (size_t s = 0; s < nsizes; s++) {
                size_t n = sizes[s];
                if (n == 0)
                    continue;
                unsigned char *a = kame_pool_aligned_alloc(kp_opaque(align), kp_opaque(n));
                unsigned char *b = kame_pool_aligned_alloc(kp_opaque(align), kp_opaque(n));
                check_aligned_block("aligned_alloc", a, align, n);
                check_aligned_block("aligned_alloc", b, align, n);
                void *c = NULL;
                if (align >= sizeof(void *)) {
                    int rc = kame_pool_posix_memalign(&c, kp_opaque(align), kp_opaque(n));
                    EXPECTF(rc == 0, "posix_memalign(align %zu, size %zu) returned %d", align, n, rc);
                    if (rc == 0)
                        check_aligned_block("posix_memalign", c, align, n);
                    else
                        c = NULL;
                }
                /* Live blocks must not overlap. */
                if (a && b) {
                    size_t ua = kame_pool_malloc_usable_size(a), ub = kame_pool_malloc_usable_size(b);
                    EXPECTF((uintptr_t)a + ua <= (uintptr_t)b || (uintptr_t)b + ub <= (uintptr_t)a,
                            "align %zu size %zu: %p+%zu overlaps %p+%zu", align, n, (void *)a, ua, (void *)b, ub);
                    if (n <= 1 * MiB) {
                        memset(a, 0x61, n);
                        memset(b, 0x62, n);
                        if (c)
                            memset(c, 0x63, n);
                        EXPECT_BYTES(a, n, 0x61);
                        EXPECT_BYTES(b, n, 0x62);
                        if (c)
                            EXPECT_BYTES(c, n, 0x63);
                    }
                }
                kame_pool_free(a);
                kame_pool_free(b);
                kame_pool_free(c);
            }
        }
    }
}

/* ---- realloc content ------------------------------------------------------ */

static void test_realloc_content(void)
{
    static const size_t seq[] = {
        1, 7, 64, 1000, 4096, 40000, 300000, 5 * MiB, 40 * MiB, 100 * MiB,
        40 * MiB, 5 * MiB, 300000, 40000, 4096, 1000, 64, 7, 1,
        100 * MiB, 1, 5 * MiB, 24, 32 * KiB, 32 * KiB + 1, 4 * MiB, 4 * MiB + 1, 32 * MiB, 32 * MiB + 1, 3,
    };
    CHECK("realloc keeps contents growing and shrinking through every tier") {
        unsigned char *p = NULL;
        size_t cur = 0;
        for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            size_t n = seq[i];
            unsigned char *q = kame_pool_realloc(p, kp_opaque(n));
            if (!EXPECTF(q != NULL, "realloc(%zu -> %zu) failed", cur, n))
                break;
            size_t keep = min_sz(cur, n);
            size_t bad = kp_pat_mismatch(q, keep, (unsigned)i);
            if (bad != keep)
                FAILF("realloc %zu -> %zu: byte %zu is 0x%02x, expected 0x%02x",
                      cur, n, bad, q[bad], kp_pat(bad, (unsigned)i));
            else
                kp_check_note(1);
            EXPECTF(kame_pool_malloc_usable_size(q) >= n, "realloc to %zu: usable %zu",
                    n, kame_pool_malloc_usable_size(q));
            EXPECTF((uintptr_t)q % (n <= 8 ? 8 : 16) == 0, "realloc to %zu: %p misaligned", n, (void *)q);
            /* Fresh pattern per step so a stale copy cannot pass. */
            kp_fill_pat(q, n, (unsigned)i + 1);
            p = q;
            cur = n;
        }
        kame_pool_free(p);
    }

    CHECK("realloc random walk keeps contents") {
        uint64_t x = 0x9e3779b97f4a7c15u;
        size_t steps = quick ? 150 : 600;
        unsigned char *p = NULL;
        size_t cur = 0;
        for (size_t i = 0; i < steps; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            unsigned tier = (unsigned)(x % 100);
            size_t n;
            if (tier < 60)
                n = (size_t)(x >> 20) % BUCKET_MAX + 1;
            else if (tier < 90)
                n = BUCKET_MAX + (size_t)(x >> 20) % (DEDICATED_MAX - BUCKET_MAX);
            else if (tier < 97)
                n = (size_t)(x >> 20) % 256 + 1;
            else
                n = DEDICATED_MAX + (size_t)(x >> 20) % (LARGE_MAX - DEDICATED_MAX);
            unsigned char *q = kame_pool_realloc(p, kp_opaque(n));
            if (!EXPECTF(q != NULL, "step %zu: realloc(%zu -> %zu) failed", i, cur, n))
                break;
            size_t keep = min_sz(cur, n);
            size_t bad = kp_pat_mismatch(q, keep, (unsigned)i);
            if (bad != keep) {
                FAILF("step %zu: realloc %zu -> %zu: byte %zu is 0x%02x, expected 0x%02x",
                      i, cur, n, bad, q[bad], kp_pat(bad, (unsigned)i));
                kame_pool_free(q);
                p = NULL;
                break;
            }
            kp_check_note(1);
            kp_fill_pat(q, n, (unsigned)i + 1);
            p = q;
            cur = n;
        }
        kame_pool_free(p);
    }

    CHECK("realloc of aligned blocks keeps contents") {
        static const size_t al[] = { 64, 4096, 64 * KiB, 1 * MiB, 8 * MiB };
        for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
            unsigned char *p = kame_pool_aligned_alloc(kp_opaque(al[i]), kp_opaque(1000));
            if (!EXPECT_NOT_NULL(p))
                continue;
            kp_fill_pat(p, 1000, 40);
            unsigned char *q = kame_pool_realloc(p, kp_opaque(200 * KiB));
            if (!EXPECT_NOT_NULL(q)) {
                kame_pool_free(p);
                continue;
            }
            EXPECT_PATTERN(q, 1000, 40);
            unsigned char *r = kame_pool_realloc(q, kp_opaque(10));
            if (!EXPECT_NOT_NULL(r)) {
                kame_pool_free(q);
                continue;
            }
            EXPECT_PATTERN(r, 10, 40);
            kame_pool_free(r);
        }
    }
}

/* ---- calloc zeroing ------------------------------------------------------- */

static void test_calloc_zero(void)
{
    static const size_t sizes[] = {
        1, 8, 16, 100, 1000, 1024, 4096, 5000, 32 * KiB, 40000, 300000,
        1 * MiB, 4 * MiB, 5 * MiB, 20 * MiB, 40 * MiB,
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        CHECK("calloc(%zu) is zeroed, also on recycled memory", n) {
            /* Dirty a block of this size and give it back so calloc is
             * served from reused memory. */
            unsigned char *d = kame_pool_malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(d))
                continue;
            memset(d, 0xaa, kame_pool_malloc_usable_size(d));
            kame_pool_free(d);
            for (int round = 0; round < 4; round++) {
                /* Alternate the two argument orders; the product is n. */
                unsigned char *p = round & 1 ? kame_pool_calloc(kp_opaque(n), kp_opaque(1))
                                             : kame_pool_calloc(kp_opaque(1), kp_opaque(n));
                if (!EXPECTF(p != NULL, "round %d", round))
                    break;
                EXPECT_BYTES(p, n, 0);
                memset(p, 0xaa, kame_pool_malloc_usable_size(p));
                kame_pool_free(p);
            }
        }
    }

    CHECK("calloc(count, elem) zeroed for split products") {
        static const size_t f[][2] = { { 10, 100 }, { 1000, 33 }, { 33, 1000 }, { 4, 1024 }, { 3000, 16 }, { 257, 1025 }, { 1024, 1024 * 6 } };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
            size_t n = f[i][0] * f[i][1];
            unsigned char *d = kame_pool_malloc(kp_opaque(n));
            if (d != NULL) {
                memset(d, 0xaa, n);
                kame_pool_free(d);
            }
            unsigned char *p = kame_pool_calloc(kp_opaque(f[i][0]), kp_opaque(f[i][1]));
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_GE(kame_pool_malloc_usable_size(p), n);
            EXPECT_BYTES(p, n, 0);
            kame_pool_free(p);
        }
    }

    /* Many dirty blocks freed, then as many calloc'd: whatever order the
     * free lists hand them back in, each must come back zeroed. */
    static const size_t batch_sizes[] = { 8, 48, 256, 2000, 4096, 20000, 100 * KiB };
    for (size_t i = 0; i < sizeof batch_sizes / sizeof batch_sizes[0]; i++) {
        size_t n = batch_sizes[i];
        CHECK("calloc(%zu) x 64 after freeing 64 dirty blocks", n) {
            enum { B = 64 };
            void *p[B];
            for (size_t k = 0; k < B; k++) {
                p[k] = kame_pool_malloc(kp_opaque(n));
                if (p[k] != NULL)
                    memset(p[k], 0xaa, kame_pool_malloc_usable_size(p[k]));
            }
            for (size_t k = 0; k < B; k++)
                kame_pool_free(p[k]);
            for (size_t k = 0; k < B; k++) {
                p[k] = kame_pool_calloc(kp_opaque(1), kp_opaque(n));
                if (EXPECT_NOT_NULL(p[k]))
                    EXPECT_BYTES(p[k], n, 0);
            }
            for (size_t k = 0; k < B; k++)
                kame_pool_free(p[k]);
        }
    }
}

/* ---- limits and trim ------------------------------------------------------ */

static void test_max_bytes(void)
{
    /* Keep a block so the pool has mapped something: a cap of 0 would mean
     * "default" rather than "nothing more". */
    void *anchor = kame_pool_malloc(kp_opaque(64));
    size_t dflt = kame_pool_get_max_bytes();
    size_t cap = kame_pool_reserved_bytes();

    CHECK("max bytes: default nonzero, pool has reserved something") {
        EXPECT_NOT_NULL(anchor);
        EXPECT_U_GT(dflt, 0);
        EXPECT_U_GT(cap, 0);
    }
    if (cap == 0) {
        kame_pool_free(anchor);
        return;
    }

    CHECK("max bytes = current reservation: requests still served") {
        kame_pool_set_max_bytes(cap);
        EXPECT_U_EQ(kame_pool_get_max_bytes(), cap);
        static const size_t sizes[] = {
            16, 1000, 4096, 32 * KiB, 40000, 300 * KiB, 2 * MiB, 4 * MiB, 5 * MiB, 10 * MiB, 40 * MiB, 100 * MiB,
        };
        enum { NS = sizeof sizes / sizeof sizes[0], SMALL = 20000 };
        void *blocks[NS];
        static void *small[SMALL];
        for (size_t i = 0; i < NS; i++) {
            blocks[i] = kame_pool_malloc(kp_opaque(sizes[i]));
            if (!EXPECTF(blocks[i] != NULL, "malloc(%zu) under the cap failed, errno %d", sizes[i], errno))
                continue;
            EXPECT_U_GE(kame_pool_malloc_usable_size(blocks[i]), sizes[i]);
            write_whole_and_check(blocks[i], sizes[i], (unsigned)i);
            EXPECTF(kame_pool_reserved_bytes() <= cap, "after malloc(%zu): reserved %zu > cap %zu",
                    sizes[i], kame_pool_reserved_bytes(), cap);
        }
        /* Enough small blocks to need more chunks than the pool has. */
        size_t got = 0;
        for (size_t i = 0; i < SMALL; i++) {
            small[i] = kame_pool_malloc(kp_opaque(2000));
            if (small[i] != NULL) {
                memset(small[i], (int)(i & 0xff), 2000);
                got++;
            }
        }
        EXPECT_U_EQ(got, SMALL);
        EXPECT_U_LE(kame_pool_reserved_bytes(), cap);
        size_t bad = 0;
        for (size_t i = 0; i < SMALL; i++)
            if (small[i] != NULL && kp_byte_mismatch(small[i], 2000, (unsigned char)(i & 0xff)) != 2000)
                bad++;
        EXPECT_U_EQ(bad, 0);
        void *al = kame_pool_aligned_alloc(kp_opaque(1 * MiB), kp_opaque(3 * MiB));
        if (EXPECT_NOT_NULL(al)) {
            EXPECT_ALIGNED(al, 1 * MiB);
            EXPECT(touch_pages(al, 3 * MiB));
        }
        /* Blocks served from elsewhere still realloc and free through the pool. */
        for (size_t i = 0; i < NS; i++) {
            if (blocks[i] == NULL)
                continue;
            size_t keep = min_sz(sizes[i], 4096);
            kp_fill_pat(blocks[i], keep, 50);
            void *r = kame_pool_realloc(blocks[i], kp_opaque(sizes[i] + 100));
            if (EXPECT_NOT_NULL(r)) {
                EXPECT_PATTERN(r, keep, 50);
                blocks[i] = r;
            }
        }
        for (size_t i = 0; i < NS; i++)
            kame_pool_free(blocks[i]);
        for (size_t i = 0; i < SMALL; i++)
            kame_pool_free(small[i]);
        kame_pool_free(al);
        EXPECT_U_LE(kame_pool_reserved_bytes(), cap);
    }

    CHECK("max bytes 0 restores the default and the pool maps again") {
        kame_pool_set_max_bytes(0);
        EXPECT_U_EQ(kame_pool_get_max_bytes(), dflt);
        size_t before = kame_pool_reserved_bytes();
        void *p = kame_pool_malloc(kp_opaque(100 * MiB)); /* above the cache's top */
        if (EXPECT_NOT_NULL(p)) {
            EXPECT_U_GE(kame_pool_reserved_bytes(), before + 100 * MiB);
            kame_pool_free(p);
        }
    }
    kame_pool_free(anchor);
}

/* The default ceiling fits the target's address space, and the pool keeps
 * to it while big blocks fill that space: the regions, the address map and
 * the fallback past the ceiling work in 4 GiB.  On a 64-bit target the
 * same fill runs against a ceiling 1 GiB above what is mapped. */
static void test_address_space(void)
{
    size_t dflt = kame_pool_get_max_bytes();
    CHECK("default ceiling: none on 64-bit, half of a 32-bit address space") {
        kame_pool_set_max_bytes(0);
        EXPECT_U_EQ(kame_pool_get_max_bytes(), sizeof(size_t) == 8 ? SIZE_MAX : (size_t)2 << 30);
        EXPECT_U_EQ(dflt, kame_pool_get_max_bytes());
    }
    enum { BLOCKS = 48 };
    const size_t size = 96 * MiB; /* above the cache's top: mapped each time */
    static void *blocks[BLOCKS];
    size_t before = kame_pool_reserved_bytes();
    size_t cap = sizeof(size_t) == 8 ? before + ((size_t)1 << 30) : dflt;
    kame_pool_set_max_bytes(cap);
    CHECK("big blocks until the address space runs out: within the ceiling, then the system's") {
        size_t pool_max = 0, got = 0, foreign_ok = 1;
        int first_fail_errno = 0;
        for (size_t i = 0; i < BLOCKS; i++) {
            errno = 0;
            char *p = kame_pool_malloc(kp_opaque(size));
            blocks[i] = p;
            size_t now = kame_pool_reserved_bytes();
            if (now > pool_max)
                pool_max = now;
            if (p == NULL) {
                if (first_fail_errno == 0)
                    first_fail_errno = errno;
                continue;
            }
            got++;
            p[0] = (char)i;
            p[size - 1] = (char)i;
            if (kame_pool_malloc_usable_size(p) < size)
                foreign_ok = 0;
        }
        EXPECTF(pool_max <= cap, "reserved %zu > ceiling %zu", pool_max, cap);
        /* The pool used its share: all but the regions' part of it. */
        EXPECT_U_GE(pool_max + size + 2 * 32 * MiB, cap);
        EXPECT_U_GE(got, (cap - before) / size);
        EXPECT(foreign_ok);
        if (first_fail_errno != 0)
            EXPECT_INT_EQ(first_fail_errno, ENOMEM);
        for (size_t i = 0; i < BLOCKS; i++) {
            char *p = blocks[i];
            if (p != NULL && (p[0] != (char)i || p[size - 1] != (char)i))
                EXPECTF(0, "block %zu lost its contents", i);
        }
        EXPECT(1);
    }
    CHECK("all freed: the pool's reservation is back where it was, and maps again") {
        for (size_t i = 0; i < BLOCKS; i++) {
            kame_pool_free(blocks[i]);
            blocks[i] = NULL;
        }
        EXPECT_U_LE(kame_pool_reserved_bytes(), before + 2 * 32 * MiB);
        char *p = kame_pool_malloc(kp_opaque(size));
        if (EXPECT_NOT_NULL(p)) {
            p[size - 1] = 1;
            EXPECT_U_LE(kame_pool_reserved_bytes(), cap);
        }
        kame_pool_free(p);
    }
    kame_pool_set_max_bytes(0);
}

static void test_trim(void)
{
    CHECK("trim with live blocks in every tier keeps them intact") {
        kame_pool_trim();
        void *p[N_TIER];
        for (size_t t = 0; t < N_TIER; t++) {
            p[t] = kame_pool_malloc(kp_opaque(tier_sizes[t]));
            if (EXPECT_NOT_NULL(p[t]))
                kp_fill_pat(p[t], min_sz(tier_sizes[t], 1 * MiB), (unsigned)t);
        }
        /* Free memory around them so trim has something to give back. */
        enum { N = 2000 };
        static void *junk[N];
        for (size_t i = 0; i < N; i++)
            junk[i] = kame_pool_malloc(kp_opaque(24 + (i % 50) * 40));
        for (size_t i = 0; i < N; i++)
            kame_pool_free(junk[i]);
        void *d = kame_pool_malloc(kp_opaque(300 * KiB));
        kame_pool_free(d);
        void *l = kame_pool_malloc(kp_opaque(6 * MiB));
        kame_pool_free(l);
        kame_pool_trim();
        kame_pool_trim();
        for (size_t t = 0; t < N_TIER; t++)
            if (p[t] != NULL)
                EXPECT_PATTERN(p[t], min_sz(tier_sizes[t], 1 * MiB), (unsigned)t);
        /* The pool keeps working after a trim, and so do the old blocks. */
        for (size_t t = 0; t < N_TIER; t++) {
            if (p[t] == NULL)
                continue;
            void *r = kame_pool_realloc(p[t], kp_opaque(tier_sizes[t] + 4096));
            if (EXPECT_NOT_NULL(r)) {
                EXPECT_PATTERN(r, min_sz(tier_sizes[t], 1 * MiB), (unsigned)t);
                kame_pool_free(r);
            } else {
                kame_pool_free(p[t]);
            }
        }
        kame_pool_trim();
        for (size_t t = 0; t < N_TIER; t++) {
            unsigned char *q = kame_pool_malloc(kp_opaque(tier_sizes[t]));
            if (EXPECT_NOT_NULL(q)) {
                write_whole_and_check(q, tier_sizes[t], 9);
                kame_pool_free(q);
            }
        }
        unsigned char *z = kame_pool_calloc(kp_opaque(1), kp_opaque(300 * KiB));
        if (EXPECT_NOT_NULL(z)) {
            EXPECT_BYTES(z, 300 * KiB, 0);
            kame_pool_free(z);
        }
    }
}

/* ---- uniqueness ----------------------------------------------------------- */

static void test_uniqueness(void)
{
    CHECK("many live malloc(0) and malloc(1) are distinct and do not overlap") {
        enum { N = 10000 };
        static uintptr_t ptrs[2 * N];
        size_t got = 0;
        for (size_t i = 0; i < N; i++) {
            void *a = kame_pool_malloc(kp_opaque(0));
            unsigned char *b = kame_pool_malloc(kp_opaque(1));
            if (a)
                ptrs[got++] = (uintptr_t)a;
            if (b) {
                b[0] = (unsigned char)i;
                ptrs[got++] = (uintptr_t)b;
            }
        }
        EXPECT_U_EQ(got, 2 * N);
        qsort(ptrs, got, sizeof ptrs[0], cmp_ptr);
        size_t dup = 0, overlap = 0;
        for (size_t i = 1; i < got; i++) {
            if (ptrs[i] == ptrs[i - 1]) {
                if (dup++ == 0)
                    FAILF("pointer %#" PRIxPTR " handed out twice", ptrs[i]);
            } else {
                size_t u = kame_pool_malloc_usable_size((void *)ptrs[i - 1]);
                if (ptrs[i - 1] + max_sz(u, 1) > ptrs[i] && overlap++ == 0)
                    FAILF("%#" PRIxPTR " + usable %zu runs into %#" PRIxPTR, ptrs[i - 1], u, ptrs[i]);
            }
        }
        EXPECT_U_EQ(dup, 0);
        EXPECT_U_EQ(overlap, 0);
        for (size_t i = 0; i < got; i++)
            kame_pool_free((void *)ptrs[i]);
    }
}

int main(void)
{
    const char *q = getenv("KP_API_QUICK");
    quick = q != NULL && q[0] != '\0' && q[0] != '0';
    sys_alloc_init();

    test_malloc_edges();
    test_calloc_edges();
    test_realloc_edges();
    test_free_edges();
    test_aligned_edges();
    test_foreign();
    test_size_tables();
    test_aligned_tables();
    test_realloc_content();
    test_calloc_zero();
    test_uniqueness();
    test_max_bytes();
    test_address_space();
    test_trim();
    return kp_check_summary();
}
