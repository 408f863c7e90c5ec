/* Conformance of the libc-named entry points the library defines when it
 * replaces the malloc family: malloc, calloc, realloc, reallocarray,
 * memalign, posix_memalign, aligned_alloc, valloc, pvalloc,
 * malloc_usable_size, cfree, free_sized, free_aligned_sized and the
 * __libc_* aliases.  Also checks that these really are the pool's (exact
 * power-of-two classes, mappings counted by kame_pool_reserved_bytes) and
 * that glibc's own blocks are still accepted by free / realloc /
 * malloc_usable_size.  Built only with the override. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kame_pool.h"
#include "check.h"

/* Not declared by the glibc headers this is built against (cfree left them
 * in 2.26, free_sized / free_aligned_sized are C23, the __libc_* names are
 * exported but undeclared). */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);
#ifdef __GLIBC__
#define GLIBC_NAMES 1
void cfree(void *ptr);
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);
#else
/* Against musl the pool defines none of glibc's own names
 * (tests/check_symbols.sh checks that they are not exported).  The tables
 * leave their rows out; the checks that pair a glibc name with a standard
 * one use the standard one in its place, and pvalloc's checks are left
 * out. */
#define GLIBC_NAMES 0
#define cfree free
#define __libc_malloc malloc
#define __libc_free free
#define __libc_calloc calloc
#define __libc_realloc realloc
#define __libc_memalign memalign
#define __libc_valloc valloc
#define pvalloc(n) (abort(), (void *)(n))
#define __libc_pvalloc pvalloc
#endif

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define BUCKET_MAX (32 * KiB)

static size_t page;

/* glibc's own allocator, looked up inside libc: plain malloc is the pool's. */
static void *(*sys_malloc)(size_t);
static void (*sys_free)(void *);

static void sys_alloc_init(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (libc == NULL)
        return;
    sys_malloc = (void *(*)(size_t))dlsym(libc, "malloc");
    sys_free = (void (*)(void *))dlsym(libc, "free");
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

static size_t next_pow2(size_t n)
{
    size_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

static int touch_pages(void *p, size_t n)
{
    unsigned char *b = p;
    if (n == 0)
        return 1;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = (unsigned char)(i >> 12);
    b[n - 1] = 0x5c;
    for (size_t i = 0; i + 1 < n; i += 4096)
        if (b[i] != (unsigned char)(i >> 12))
            return 0;
    return b[n - 1] == 0x5c;
}

static void write_whole_and_check(unsigned char *p, size_t n, unsigned seed)
{
    if (n <= 2 * MiB) {
        kp_fill_pat(p, n, seed);
        EXPECT_PATTERN(p, n, seed);
    } else {
        EXPECTF(touch_pages(p, n), "block %p of %zu bytes not writable page by page", (void *)p, n);
    }
}

/* ---- the entry points are the pool's -------------------------------------- */

/* Allocators under test, behind one signature: each gets (size, alignment)
 * and ignores what it does not use. */
typedef void *(*alloc_fn)(size_t n, size_t align);
static void *a_malloc(size_t n, size_t al) { (void)al; return malloc(n); }
static void *a_calloc(size_t n, size_t al) { (void)al; return calloc(1, n); }
static void *a_realloc(size_t n, size_t al) { (void)al; return realloc(NULL, n); }
static void *a_reallocarray(size_t n, size_t al) { (void)al; return reallocarray(NULL, 1, n); }
static void *a_memalign(size_t n, size_t al) { return memalign(al, n); }
static void *a_aligned_alloc(size_t n, size_t al) { return aligned_alloc(al, n); }
static void *a_posix_memalign(size_t n, size_t al)
{
    void *p = NULL;
    return posix_memalign(&p, al, n) == 0 ? p : NULL;
}
static void *a_valloc(size_t n, size_t al) { (void)al; return valloc(n); }
#ifdef __GLIBC__
static void *a_pvalloc(size_t n, size_t al) { (void)al; return pvalloc(n); }
static void *a_libc_malloc(size_t n, size_t al) { (void)al; return __libc_malloc(n); }
static void *a_libc_calloc(size_t n, size_t al) { (void)al; return __libc_calloc(n, 1); }
static void *a_libc_realloc(size_t n, size_t al) { (void)al; return __libc_realloc(NULL, n); }
static void *a_libc_memalign(size_t n, size_t al) { return __libc_memalign(al, n); }
static void *a_libc_valloc(size_t n, size_t al) { (void)al; return __libc_valloc(n); }
static void *a_libc_pvalloc(size_t n, size_t al) { (void)al; return __libc_pvalloc(n); }
#endif

static const struct allocator {
    const char *name;
    alloc_fn fn;
} allocators[] = {
    { "malloc", a_malloc },
    { "calloc", a_calloc },
    { "realloc(NULL)", a_realloc },
    { "reallocarray(NULL)", a_reallocarray },
    { "memalign", a_memalign },
    { "aligned_alloc", a_aligned_alloc },
    { "posix_memalign", a_posix_memalign },
    { "valloc", a_valloc },
#ifdef __GLIBC__
    { "pvalloc", a_pvalloc },
    { "__libc_malloc", a_libc_malloc },
    { "__libc_calloc", a_libc_calloc },
    { "__libc_realloc(NULL)", a_libc_realloc },
    { "__libc_memalign", a_libc_memalign },
    { "__libc_valloc", a_libc_valloc },
    { "__libc_pvalloc", a_libc_pvalloc },
#endif
};
#define N_ALLOCATORS (sizeof allocators / sizeof allocators[0])

/* Deallocators under test, given the block's size and alignment. */
typedef void (*free_fn)(void *p, size_t n, size_t align);
static void f_free(void *p, size_t n, size_t al) { (void)n; (void)al; free(p); }
#ifdef __GLIBC__
static void f_cfree(void *p, size_t n, size_t al) { (void)n; (void)al; cfree(p); }
#endif
static void f_free_sized(void *p, size_t n, size_t al) { (void)al; free_sized(p, n); }
static void f_free_aligned_sized(void *p, size_t n, size_t al) { free_aligned_sized(p, al, n); }
#ifdef __GLIBC__
static void f_libc_free(void *p, size_t n, size_t al) { (void)n; (void)al; __libc_free(p); }
#endif
static void f_realloc0(void *p, size_t n, size_t al) { (void)n; (void)al; free(realloc(p, 0)); }

static const struct deallocator {
    const char *name;
    free_fn fn;
    int aligned; /* takes only aligned_alloc's blocks */
} deallocators[] = {
    { "free", f_free, 0 },
#ifdef __GLIBC__
    { "cfree", f_cfree, 0 },
#endif
    { "free_sized", f_free_sized, 0 },
    { "free_aligned_sized", f_free_aligned_sized, 1 },
#ifdef __GLIBC__
    { "__libc_free", f_libc_free, 0 },
#endif
    { "realloc(p, 0)", f_realloc0, 0 },
};
#define N_DEALLOCATORS (sizeof deallocators / sizeof deallocators[0])

static void test_entry_points_are_the_pool(void)
{
    for (size_t i = 0; i < N_ALLOCATORS; i++) {
        const struct allocator *a = &allocators[i];
        CHECK("%s(4096) comes from the pool: exact class, page aligned", a->name) {
            void *p = a->fn(kp_opaque(4096), 4096);
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_EQ(kame_pool_malloc_usable_size(p), 4096);
            EXPECT_U_EQ(malloc_usable_size(p), 4096);
            EXPECT_ALIGNED(p, 4096);
            memset(p, 0x42, 4096);
            free(p);
        }
        /* Above the recycle cache's top (64 MiB), so mapped anew and
         * unmapped at free. */
        CHECK("%s(100 MiB) is mapped by the pool", a->name) {
            size_t before = kame_pool_reserved_bytes();
            unsigned char *p = a->fn(kp_opaque(100 * MiB), 4096);
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_GE(kame_pool_reserved_bytes(), before + 100 * MiB);
            p[0] = 1;
            p[100 * MiB - 1] = 2;
            free(p);
            EXPECT_U_LE(kame_pool_reserved_bytes(), before);
        }
    }

    /* Memory that libc itself allocates on the program's behalf. */
    CHECK("libc-internal allocations (strdup, asprintf, getline) use the pool and free") {
        char src[4096];
        memset(src, 'k', sizeof src - 1);
        src[sizeof src - 1] = '\0';
        char *d = strdup(src);
        if (EXPECT_NOT_NULL(d)) {
            EXPECT(strcmp(d, src) == 0);
            EXPECT_U_EQ(kame_pool_malloc_usable_size(d), 4096);
            EXPECT_ALIGNED(d, 4096);
            free(d);
        }
        char *s = NULL;
        int len = asprintf(&s, "%s-%d", "kamepool", 42);
        if (EXPECT_INT_EQ(len, 11) && EXPECT_NOT_NULL(s)) {
            EXPECT(strcmp(s, "kamepool-42") == 0);
            free(s);
        }
        FILE *f = fmemopen(src, sizeof src - 1, "r");
        if (EXPECT_NOT_NULL(f)) {
            char *line = NULL;
            size_t cap = 0;
            ssize_t got = getline(&line, &cap, f);
            EXPECT_INT_EQ(got, (ssize_t)(sizeof src - 1));
            if (line != NULL) {
                EXPECT(memcmp(line, src, sizeof src - 1) == 0);
                EXPECT_U_GE(malloc_usable_size(line), cap);
            }
            free(line);
            fclose(f);
        }
    }
}

/* ---- malloc / calloc / realloc -------------------------------------------- */

static const struct named_size {
    const char *name;
    size_t n;
} impossible_sizes[] = {
    { "SIZE_MAX", SIZE_MAX },
    { "SIZE_MAX-15", SIZE_MAX - 15 },
    { "SIZE_MAX-4095", SIZE_MAX - 4095 },
    { "PTRDIFF_MAX+1", (size_t)PTRDIFF_MAX + 1 },
    /* Past any 64-bit address space; in a 32-bit one PTRDIFF_MAX may
     * well be had, so there the next size up stands in. */
    { "PTRDIFF_MAX (32-bit: +1)", (size_t)PTRDIFF_MAX + (sizeof(size_t) == 8 ? 0 : 1) },
};
#define N_IMPOSSIBLE (sizeof impossible_sizes / sizeof impossible_sizes[0])

static const size_t tier_sizes[] = { 1, 24, 3000, 32 * KiB, 40000, 3 * MiB, 5 * MiB, 40 * MiB };
#define N_TIER (sizeof tier_sizes / sizeof tier_sizes[0])

static void test_malloc_calloc_realloc(void)
{
    CHECK("malloc(0) non-NULL, unique, freeable") {
        void *a = malloc(kp_opaque(0)), *b = malloc(kp_opaque(0));
        EXPECT_NOT_NULL(a);
        EXPECT_NOT_NULL(b);
        EXPECT(a != b);
        free(a);
        free(b);
    }
    for (size_t i = 0; i < N_IMPOSSIBLE; i++) {
        CHECK("malloc(%s) -> NULL, ENOMEM", impossible_sizes[i].name) {
            errno = 0;
            void *p = malloc(kp_opaque(impossible_sizes[i].n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
        }
        CHECK("__libc_malloc(%s) -> NULL, ENOMEM", impossible_sizes[i].name) {
            errno = 0;
            void *p = __libc_malloc(kp_opaque(impossible_sizes[i].n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
        }
    }
    static const struct { const char *name; size_t n, m; } over[] = {
        { "(SIZE_MAX/2+1) x 2", SIZE_MAX / 2 + 1, 2 },
        { "SIZE_MAX x SIZE_MAX", SIZE_MAX, SIZE_MAX },
        { "2^32 x 2^32", KP_SIZE_BIT(KP_SIZE_BITS / 2), KP_SIZE_BIT(KP_SIZE_BITS / 2) },
        { "65537 x 2^48", 65537, KP_SIZE_BIT(KP_SIZE_BITS - 16) },
        { "2^62 x 2", KP_SIZE_BIT(KP_SIZE_BITS - 2), 2 },
    };
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        CHECK("calloc(%s) -> NULL, ENOMEM", over[i].name) {
            errno = 0;
            void *p = calloc(kp_opaque(over[i].n), kp_opaque(over[i].m));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
        }
        CHECK("__libc_calloc(%s) -> NULL, ENOMEM", over[i].name) {
            errno = 0;
            void *p = __libc_calloc(kp_opaque(over[i].n), kp_opaque(over[i].m));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
        }
    }

    CHECK("sizes 0..4096 and the power-of-two classes through malloc") {
        for (size_t n = 0; n <= 4096; n++) {
            unsigned char *p = malloc(kp_opaque(n));
            if (!EXPECTF(p != NULL, "malloc(%zu)", n))
                continue;
            size_t u = malloc_usable_size(p);
            EXPECTF(u >= n, "malloc(%zu): usable %zu", n, u);
            EXPECTF(u == kame_pool_malloc_usable_size(p), "malloc(%zu): malloc_usable_size %zu, pool says %zu",
                    n, u, kame_pool_malloc_usable_size(p));
            if (n >= 64)
                EXPECTF(u * 4 <= n * 5, "malloc(%zu): usable %zu is more than 25%% over", n, u);
            EXPECTF((uintptr_t)p % (n <= 8 ? 8 : 16) == 0, "malloc(%zu) = %p misaligned", n, (void *)p);
            memset(p, 0x5a, u);
            free(p);
        }
        for (size_t n = KiB; n <= BUCKET_MAX; n *= 2) {
            void *p = malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_EQ(malloc_usable_size(p), n);
            EXPECT_ALIGNED(p, n);
            free(p);
        }
    }

    for (size_t t = 0; t < N_TIER; t++) {
        size_t n = tier_sizes[t];
        CHECK("realloc(p[%zu], impossible) -> NULL, ENOMEM, p intact", n) {
            unsigned char *p = malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            kp_fill_pat(p, n, 3);
            int gone = 0;
            for (size_t i = 0; i < N_IMPOSSIBLE && !gone; i++) {
                errno = 0;
                void *q = realloc(p, kp_opaque(impossible_sizes[i].n));
                EXPECTF(q == NULL && errno == ENOMEM, "realloc(p, %s) = %p, errno %d",
                        impossible_sizes[i].name, q, errno);
                if (q != NULL) {
                    free(q);
                    gone = 1;
                }
            }
            if (gone)
                continue;
            EXPECT_PATTERN(p, n, 3);
            free(p);
        }
        CHECK("realloc(NULL, %zu) == malloc, realloc(p, 0) frees and returns NULL", n) {
            unsigned char *p = realloc(NULL, kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            EXPECT_U_GE(malloc_usable_size(p), n);
            write_whole_and_check(p, n, 4);
            EXPECT_NULL(realloc(p, kp_opaque(0)));
        }
    }

    CHECK("realloc keeps contents through every tier") {
        static const size_t seq[] = {
            1, 7, 64, 1000, 4096, 40000, 300000, 5 * MiB, 40 * MiB, 100 * MiB,
            40 * MiB, 5 * MiB, 300000, 40000, 4096, 1000, 64, 7, 1,
        };
        unsigned char *p = NULL;
        size_t cur = 0;
        for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            size_t n = seq[i];
            unsigned char *q = realloc(p, kp_opaque(n));
            if (!EXPECTF(q != NULL, "realloc(%zu -> %zu)", cur, n))
                break;
            size_t keep = min_sz(cur, n), bad = kp_pat_mismatch(q, keep, (unsigned)i);
            if (bad != keep)
                FAILF("realloc %zu -> %zu: byte %zu is 0x%02x, expected 0x%02x",
                      cur, n, bad, q[bad], kp_pat(bad, (unsigned)i));
            else
                kp_check_note(1);
            kp_fill_pat(q, n, (unsigned)i + 1);
            p = q;
            cur = n;
        }
        free(p);
    }

    static const size_t zsizes[] = { 1, 100, 4096, 32 * KiB, 40000, 300000, 5 * MiB, 40 * MiB };
    for (size_t i = 0; i < sizeof zsizes / sizeof zsizes[0]; i++) {
        size_t n = zsizes[i];
        CHECK("calloc / __libc_calloc (%zu) zeroed on recycled memory", n) {
            for (int round = 0; round < 4; round++) {
                unsigned char *d = malloc(kp_opaque(n));
                if (d != NULL) {
                    memset(d, 0xaa, malloc_usable_size(d));
                    free(d);
                }
                unsigned char *p = round & 1 ? __libc_calloc(kp_opaque(n), 1) : calloc(1, kp_opaque(n));
                if (!EXPECTF(p != NULL, "round %d", round))
                    break;
                EXPECT_BYTES(p, n, 0);
                free(p);
            }
        }
    }
}

/* ---- reallocarray ---------------------------------------------------------- */

static void test_reallocarray(void)
{
    CHECK("reallocarray(NULL, n, m) allocates n*m") {
        unsigned char *p = reallocarray(NULL, kp_opaque(10), kp_opaque(100));
        if (EXPECT_NOT_NULL(p)) {
            EXPECT_U_GE(malloc_usable_size(p), 1000);
            memset(p, 1, 1000);
            free(p);
        }
    }
    CHECK("reallocarray grows and shrinks with contents kept") {
        unsigned char *p = reallocarray(NULL, kp_opaque(100), kp_opaque(10));
        if (!EXPECT_NOT_NULL(p))
            continue;
        kp_fill_pat(p, 1000, 5);
        unsigned char *q = reallocarray(p, kp_opaque(1000), kp_opaque(1000));
        if (!EXPECT_NOT_NULL(q)) {
            free(p);
            continue;
        }
        EXPECT_PATTERN(q, 1000, 5);
        EXPECT_U_GE(malloc_usable_size(q), 1000 * 1000);
        unsigned char *r = reallocarray(q, kp_opaque(5), kp_opaque(20));
        if (!EXPECT_NOT_NULL(r)) {
            free(q);
            continue;
        }
        EXPECT_PATTERN(r, 100, 5);
        free(r);
    }
    static const struct { const char *name; size_t n, m; } over[] = {
        { "(SIZE_MAX/2+1) x 2", SIZE_MAX / 2 + 1, 2 },
        { "2^32 x 2^32 (wraps to 0)", KP_SIZE_BIT(KP_SIZE_BITS / 2), KP_SIZE_BIT(KP_SIZE_BITS / 2) },
        { "SIZE_MAX x SIZE_MAX", SIZE_MAX, SIZE_MAX },
        { "65537 x 2^48 (wraps to small)", 65537, KP_SIZE_BIT(KP_SIZE_BITS - 16) },
        { "2^62 x 2 (no wrap, too big)", KP_SIZE_BIT(KP_SIZE_BITS - 2), 2 },
    };
    for (size_t t = 0; t < N_TIER; t++) {
        size_t n = tier_sizes[t];
        CHECK("reallocarray(p[%zu], overflow) -> NULL, ENOMEM, p intact", n) {
            unsigned char *p = malloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p))
                continue;
            kp_fill_pat(p, n, 6);
            int gone = 0;
            for (size_t i = 0; i < sizeof over / sizeof over[0] && !gone; i++) {
                errno = 0;
                void *q = reallocarray(p, kp_opaque(over[i].n), kp_opaque(over[i].m));
                EXPECTF(q == NULL && errno == ENOMEM, "reallocarray(p, %s) = %p, errno %d",
                        over[i].name, q, errno);
                if (q != NULL) {
                    free(q);
                    gone = 1;
                }
            }
            if (gone)
                continue;
            EXPECT_PATTERN(p, n, 6);
            free(p);
        }
    }
    CHECK("reallocarray(NULL, overflow) -> NULL, ENOMEM") {
        errno = 0;
        void *p = reallocarray(NULL, kp_opaque(SIZE_MAX / 2 + 1), kp_opaque(2));
        EXPECT_NULL(p);
        EXPECT_ERRNO(ENOMEM);
        free(p);
    }
    CHECK("reallocarray(p, 0, m) frees p and returns NULL, as realloc(p, 0)") {
        void *p = malloc(kp_opaque(100));
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_NULL(reallocarray(p, kp_opaque(0), kp_opaque(16)));
    }
}

/* ---- aligned entry points -------------------------------------------------- */

static void check_aligned(const char *how, unsigned char *p, size_t align, size_t n)
{
    if (!EXPECTF(p != NULL, "%s(align %zu, size %zu) failed, errno %d", how, align, n, errno))
        return;
    EXPECTF((uintptr_t)p % align == 0, "%s(align %zu, size %zu) = %p misaligned", how, align, n, (void *)p);
    size_t u = malloc_usable_size(p);
    EXPECTF(u >= n, "%s(align %zu, size %zu): usable %zu", how, align, n, u);
    if (u > 0)
        p[u - 1] = 0x33;
    if (n > 1) {
        p[0] = 0x11;
        p[n - 1] = 0x22;
        EXPECTF(p[0] == 0x11 && p[n - 1] == 0x22, "%s(align %zu, size %zu): bytes did not stick", how, align, n);
    }
}

static void test_aligned(void)
{
    for (size_t align = 1; align <= 64 * MiB; align *= 2) {
        size_t sizes[] = { 1, align + 1, 3000, 40000, 5 * MiB };
        CHECK("memalign / posix_memalign / aligned_alloc / __libc_memalign, alignment %zu", align) {
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                size_t n = sizes[s];
                unsigned char *a = memalign(kp_opaque(align), kp_opaque(n));
                check_aligned("memalign", a, align, n);
                free(a);
                unsigned char *b = aligned_alloc(kp_opaque(align), kp_opaque(n));
                check_aligned("aligned_alloc", b, align, n);
                free(b);
                unsigned char *c = __libc_memalign(kp_opaque(align), kp_opaque(n));
                check_aligned("__libc_memalign", c, align, n);
                free(c);
                if (align >= sizeof(void *)) {
                    void *d = NULL;
                    int rc = posix_memalign(&d, kp_opaque(align), kp_opaque(n));
                    EXPECTF(rc == 0, "posix_memalign(align %zu, size %zu) returned %d", align, n, rc);
                    if (rc == 0)
                        check_aligned("posix_memalign", d, align, n);
                    free(d);
                }
            }
        }
    }

    /* glibc rounds a memalign alignment that is not a power of two up to the
     * next one. */
    static const size_t odd[] = { 3, 5, 12, 24, 48, 100, 1000, 3000, 5000, 40000, 3 * MiB, 40 * MiB + 1 };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        size_t al = odd[i], want = next_pow2(al);
        CHECK("memalign(%zu, n): aligned to %zu", al, want) {
            static const size_t sizes[] = { 1, 100, 5000 };
            for (size_t s = 0; s < 3; s++) {
                unsigned char *p = memalign(kp_opaque(al), kp_opaque(sizes[s]));
                check_aligned("memalign", p, want, sizes[s]);
                free(p);
            }
        }
    }
    CHECK("memalign(0, n) behaves as malloc(n)") {
        void *p = memalign(kp_opaque(0), kp_opaque(100));
        if (EXPECT_NOT_NULL(p)) {
            EXPECT_U_GE(malloc_usable_size(p), 100);
            EXPECT_ALIGNED(p, 16);
            free(p);
        }
    }
    static const size_t memalign_einval[] = { SIZE_MAX, SIZE_MAX / 2 + 2 };
    for (size_t i = 0; i < sizeof memalign_einval / sizeof memalign_einval[0]; i++) {
        CHECK("memalign(%#zx, 16) -> NULL, EINVAL (no power of two above it)", memalign_einval[i]) {
            errno = 0;
            void *p = memalign(kp_opaque(memalign_einval[i]), kp_opaque(16));
            EXPECT_NULL(p);
            EXPECT_ERRNO(EINVAL);
            free(p);
        }
    }
    static const struct { size_t align, n; } enomem[] = {
        { 16, SIZE_MAX },
        { 64, (size_t)PTRDIFF_MAX + 1 },
        { 4096, SIZE_MAX - 4000 },
        { 64 * MiB, SIZE_MAX - 64 * MiB },
        { KP_SIZE_BIT(KP_SIZE_BITS - 2), 16 },
        { KP_SIZE_BIT(KP_SIZE_BITS - 1), 16 },
    };
    for (size_t i = 0; i < sizeof enomem / sizeof enomem[0]; i++) {
        size_t al = enomem[i].align, n = enomem[i].n;
        CHECK("memalign / aligned_alloc / posix_memalign (%#zx, %#zx) -> ENOMEM", al, n) {
            errno = 0;
            void *p = memalign(kp_opaque(al), kp_opaque(n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
            errno = 0;
            p = aligned_alloc(kp_opaque(al), kp_opaque(n));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
            static int marker;
            void *out = &marker;
            int rc = posix_memalign(&out, kp_opaque(al), kp_opaque(n));
            EXPECT_INT_EQ(rc, ENOMEM);
            EXPECTF(out == &marker || out == NULL, "*out changed to %p", out);
            if (rc == 0)
                free(out);
        }
    }
    static const size_t pm_einval[] = { 0, 1, 2, 3, sizeof(void *) / 2, 12, 24, 48, SIZE_MAX };
    for (size_t i = 0; i < sizeof pm_einval / sizeof pm_einval[0]; i++) {
        CHECK("posix_memalign(align %zu) -> EINVAL", pm_einval[i]) {
            static int marker;
            void *out = &marker;
            int rc = posix_memalign(&out, kp_opaque(pm_einval[i]), kp_opaque(64));
            EXPECT_INT_EQ(rc, EINVAL);
            EXPECTF(out == &marker || out == NULL, "*out changed to %p", out);
            if (rc == 0)
                free(out);
        }
    }
    static const size_t aa_einval[] = { 0, 3, 24, 48, SIZE_MAX };
    for (size_t i = 0; i < sizeof aa_einval / sizeof aa_einval[0]; i++) {
        CHECK("aligned_alloc(align %zu) -> NULL, EINVAL", aa_einval[i]) {
            errno = 0;
            void *p = aligned_alloc(kp_opaque(aa_einval[i]), kp_opaque(64));
            EXPECT_NULL(p);
            EXPECT_ERRNO(EINVAL);
            free(p);
        }
    }
}

/* ---- valloc / pvalloc ------------------------------------------------------ */

static void test_valloc_pvalloc(void)
{
    static const size_t sizes[] = { 0, 1, 100, 4095, 4096, 4097, 40000, 300000, 5 * MiB, 40 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        CHECK("valloc / __libc_valloc (%zu): page aligned, usable >= size", n) {
            unsigned char *p = valloc(kp_opaque(n));
            unsigned char *q = __libc_valloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p) || !EXPECT_NOT_NULL(q)) {
                free(p);
                free(q);
                continue;
            }
            EXPECT(p != q);
            EXPECT_ALIGNED(p, page);
            EXPECT_ALIGNED(q, page);
            EXPECT_U_GE(malloc_usable_size(p), n);
            EXPECT_U_GE(malloc_usable_size(q), n);
            write_whole_and_check(p, n, 7);
            write_whole_and_check(q, n, 8);
            free(p);
            free(q);
        }
        if (GLIBC_NAMES) CHECK("pvalloc / __libc_pvalloc (%zu): page aligned, usable >= size rounded to a page", n) {
            unsigned char *p = pvalloc(kp_opaque(n));
            unsigned char *q = __libc_pvalloc(kp_opaque(n));
            if (!EXPECT_NOT_NULL(p) || !EXPECT_NOT_NULL(q)) {
                free(p);
                free(q);
                continue;
            }
            size_t want = round_up(n, page);
            EXPECT(p != q);
            EXPECT_ALIGNED(p, page);
            EXPECT_ALIGNED(q, page);
            EXPECT_U_GE(malloc_usable_size(p), want);
            EXPECT_U_GE(malloc_usable_size(q), want);
            /* The whole rounded size is the caller's. */
            write_whole_and_check(p, want, 9);
            write_whole_and_check(q, want, 10);
            free(p);
            free(q);
        }
    }
    const size_t bad[] = { SIZE_MAX, SIZE_MAX - page + 2, (size_t)PTRDIFF_MAX + 1 };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK("valloc / pvalloc (%#zx) -> NULL, ENOMEM", bad[i]) {
            errno = 0;
            void *p = valloc(kp_opaque(bad[i]));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
            if (!GLIBC_NAMES)
                continue;
            errno = 0;
            p = pvalloc(kp_opaque(bad[i]));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
            errno = 0;
            p = __libc_pvalloc(kp_opaque(bad[i]));
            EXPECT_NULL(p);
            EXPECT_ERRNO(ENOMEM);
            free(p);
        }
    }
}

/* ---- the free family ------------------------------------------------------- */

static void test_free_family(void)
{
    CHECK("free(NULL), cfree(NULL), free_sized(NULL, 0), free_aligned_sized(NULL, 64, 0), __libc_free(NULL)") {
        errno = 3131;
        free(NULL);
        cfree(NULL);
        free_sized(NULL, 0);
        free_aligned_sized(NULL, 64, 0);
        __libc_free(NULL);
        EXPECT_INT_EQ(errno, 3131);
    }
    CHECK("malloc_usable_size(NULL) == 0") {
        EXPECT_U_EQ(malloc_usable_size(NULL), 0);
    }

    static const size_t aligns[] = { 16, 64, 4096, 64 * KiB, 1 * MiB, 8 * MiB };
    for (size_t d = 0; d < N_DEALLOCATORS; d++) {
        const struct deallocator *f = &deallocators[d];
        CHECK("%s preserves errno in every tier", f->name) {
            for (size_t t = 0; t < N_TIER; t++) {
                size_t n = tier_sizes[t], al = aligns[t % (sizeof aligns / sizeof aligns[0])];
                unsigned char *p = f->aligned ? aligned_alloc(kp_opaque(al), kp_opaque(n)) : malloc(kp_opaque(n));
                if (!EXPECTF(p != NULL, "size %zu", n))
                    continue;
                p[0] = 1;
                p[n - 1] = 2;
                errno = 2020 + (int)t;
                f->fn(p, n, al);
                EXPECTF(errno == 2020 + (int)t, "%s of a %zu-byte block changed errno to %d", f->name, n, errno);
            }
        }
        /* A block above the recycle cache's top is unmapped as soon as it
         * is freed, and a loop of smaller ones must not grow the pool: both
         * show it really freed. */
        CHECK("%s really releases blocks", f->name) {
            size_t before = kame_pool_reserved_bytes();
            unsigned char *h = f->aligned ? aligned_alloc(kp_opaque(64), kp_opaque(100 * MiB)) : malloc(kp_opaque(100 * MiB));
            if (!EXPECT_NOT_NULL(h))
                continue;
            h[0] = 1;
            size_t held = kame_pool_reserved_bytes();
            EXPECT_U_GE(held, before + 100 * MiB);
            f->fn(h, 100 * MiB, 64);
            EXPECT_U_LE(kame_pool_reserved_bytes(), held - 100 * MiB);

            static const struct { size_t n, rounds; } loop[] = { { 1000, 100000 }, { 100 * KiB, 600 }, { 5 * MiB, 40 } };
            for (size_t i = 0; i < 3; i++) {
                void *w = f->aligned ? aligned_alloc(64, kp_opaque(loop[i].n)) : malloc(kp_opaque(loop[i].n));
                f->fn(w, loop[i].n, 64);
                size_t base = kame_pool_reserved_bytes();
                for (size_t r = 0; r < loop[i].rounds; r++) {
                    unsigned char *p = f->aligned ? aligned_alloc(64, kp_opaque(loop[i].n))
                                                  : malloc(kp_opaque(loop[i].n));
                    if (p == NULL)
                        break;
                    p[0] = 1;
                    f->fn(p, loop[i].n, 64);
                }
                EXPECTF(kame_pool_reserved_bytes() <= base + 64 * MiB,
                        "%zu x %s(malloc(%zu)) grew the pool from %zu to %zu bytes", loop[i].rounds,
                        f->name, loop[i].n, base, kame_pool_reserved_bytes());
            }
        }
    }

    CHECK("free_sized on blocks from calloc and realloc") {
        for (size_t t = 0; t < N_TIER; t++) {
            size_t n = tier_sizes[t];
            void *c = calloc(1, kp_opaque(n));
            EXPECT_NOT_NULL(c);
            free_sized(c, n);
            void *r = malloc(kp_opaque(n / 2 + 1));
            void *r2 = realloc(r, kp_opaque(n));
            if (EXPECT_NOT_NULL(r2))
                free_sized(r2, n);
            else
                free(r);
        }
    }

    CHECK("blocks cross between families: malloc -> __libc_free, __libc_malloc -> free, valloc -> cfree") {
        void *a = malloc(kp_opaque(5000));
        void *b = __libc_malloc(kp_opaque(5000));
        void *c = valloc(kp_opaque(5000));
        void *d = __libc_memalign(kp_opaque(256), kp_opaque(5000));
        EXPECT(a && b && c && d);
        __libc_free(a);
        free(b);
        cfree(c);
        free_aligned_sized(d, 256, 5000);
        unsigned char *e = __libc_malloc(kp_opaque(300));
        if (EXPECT_NOT_NULL(e)) {
            kp_fill_pat(e, 300, 12);
            unsigned char *f2 = realloc(e, kp_opaque(70000));
            if (EXPECT_NOT_NULL(f2)) {
                EXPECT_PATTERN(f2, 300, 12);
                unsigned char *g = __libc_realloc(f2, kp_opaque(10));
                if (EXPECT_NOT_NULL(g)) {
                    EXPECT_PATTERN(g, 10, 12);
                    __libc_free(g);
                } else {
                    free(f2);
                }
            } else {
                free(e);
            }
        }
    }
}

/* ---- glibc's own blocks ---------------------------------------------------- */

static void test_foreign(void)
{
#ifdef KP_TEST_STATIC_LIBC
    /* Linked statically against a C library whose malloc the pool replaced:
     * the C library's allocator is not in the program at all. */
    CHECK("static link: no other allocator to find") {
        EXPECT(sys_malloc == NULL);
    }
    return;
#endif
    CHECK("glibc's own malloc found and distinct from the pool's") {
        EXPECT(sys_malloc != NULL && sys_free != NULL);
        EXPECT((void *)sys_malloc != (void *)malloc);
        EXPECT((void *)sys_malloc != (void *)__libc_malloc);
    }
    if (sys_malloc == NULL || sys_free == NULL)
        return;

    static const size_t sizes[] = { 1, 100, 4096, 5000, 200 * KiB, 5 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        CHECK("glibc block [%zu]: malloc_usable_size >= size, free keeps errno", n) {
            unsigned char *q = sys_malloc(n);
            if (!EXPECT_NOT_NULL(q))
                continue;
            kp_fill_pat(q, n, 30);
            EXPECT_U_GE(malloc_usable_size(q), n);
            EXPECT_U_GE(kame_pool_malloc_usable_size(q), n);
            EXPECT_PATTERN(q, n, 30);
            errno = 6161;
            free(q);
            EXPECT_INT_EQ(errno, 6161);
        }
        static const size_t targets[] = { 1, 64, 4096, 40000, 300 * KiB, 6 * MiB, 40 * MiB };
        for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
            size_t m = targets[t];
            CHECK("glibc block [%zu]: realloc to %zu keeps contents", n, m) {
                unsigned char *q = sys_malloc(n);
                if (!EXPECT_NOT_NULL(q))
                    continue;
                kp_fill_pat(q, n, 31);
                unsigned char *r = realloc(q, kp_opaque(m));
                if (!EXPECT_NOT_NULL(r)) {
                    sys_free(q);
                    continue;
                }
                EXPECT_PATTERN(r, min_sz(n, m), 31);
                EXPECT_U_GE(malloc_usable_size(r), m);
                write_whole_and_check(r, m, 32);
                free(r);
            }
        }
        CHECK("glibc block [%zu]: realloc(q, SIZE_MAX) -> NULL, ENOMEM, q intact; realloc(q, 0) frees", n) {
            unsigned char *q = sys_malloc(n);
            if (!EXPECT_NOT_NULL(q))
                continue;
            kp_fill_pat(q, n, 33);
            errno = 0;
            void *r = realloc(q, kp_opaque(SIZE_MAX));
            EXPECT_NULL(r);
            EXPECT_ERRNO(ENOMEM);
            if (r != NULL) {
                free(r);
                continue;
            }
            EXPECT_PATTERN(q, n, 33);
            EXPECT_NULL(realloc(q, kp_opaque(0)));
        }
        CHECK("glibc block [%zu]: cfree, free_sized, __libc_free, __libc_realloc accept it", n) {
            void *a = sys_malloc(n), *b = sys_malloc(n), *c = sys_malloc(n);
            unsigned char *d = sys_malloc(n);
            EXPECT(a && b && c && d);
            errno = 7171;
            cfree(a);
            free_sized(b, n);
            __libc_free(c);
            EXPECT_INT_EQ(errno, 7171);
            if (d != NULL) {
                kp_fill_pat(d, n, 34);
                unsigned char *e = __libc_realloc(d, kp_opaque(n * 2));
                if (EXPECT_NOT_NULL(e)) {
                    EXPECT_PATTERN(e, n, 34);
                    free(e);
                } else {
                    sys_free(d);
                }
            }
        }
    }
}

/* ---- uniqueness ------------------------------------------------------------ */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_uniqueness(void)
{
    CHECK("live blocks from every allocator are distinct and do not overlap") {
        enum { PER = 300 };
        static uintptr_t ptrs[N_ALLOCATORS * PER * 2];
        size_t got = 0, want = 0;
        for (size_t i = 0; i < N_ALLOCATORS; i++) {
            for (size_t k = 0; k < PER; k++) {
                size_t n = k % 3 == 0 ? 0 : k % 3 == 1 ? 1 : 24;
                void *p = allocators[i].fn(kp_opaque(n), 64);
                want++;
                if (p)
                    ptrs[got++] = (uintptr_t)p;
            }
        }
        EXPECT_U_EQ(got, want);
        qsort(ptrs, got, sizeof ptrs[0], cmp_ptr);
        size_t bad = 0;
        for (size_t i = 1; i < got; i++) {
            size_t u = malloc_usable_size((void *)ptrs[i - 1]);
            if (ptrs[i - 1] + (u ? u : 1) > ptrs[i] && bad++ == 0)
                FAILF("%#" PRIxPTR " (usable %zu) meets %#" PRIxPTR, ptrs[i - 1], u, ptrs[i]);
        }
        EXPECT_U_EQ(bad, 0);
        for (size_t i = 0; i < got; i++)
            free((void *)ptrs[i]);
    }
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
    sys_alloc_init();

    test_entry_points_are_the_pool();
    test_malloc_calloc_realloc();
    test_reallocarray();
    test_aligned();
    test_valloc_pvalloc();
    test_free_family();
    test_foreign();
    test_uniqueness();
    return kp_check_summary();
}
