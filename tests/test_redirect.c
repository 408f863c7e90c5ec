/* Windows: the process's malloc family routed to the pool by the DLL's
 * import redirection.  win_crt_dll.dll is an ordinary DLL of the C runtime
 * (it knows nothing of the pool); blocks cross between it, the program
 * and the pool in every direction.  Whose a block is, is read from the
 * pool's statistics (live blocks of the bucket tier, exact while one
 * thread runs), and the C runtime's heap is checked with its own
 * validation after foreign blocks went through the pool. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "kame_pool.h"
#include "check.h"

#include "redirect_common.h"

static void test_redirected(void)
{
    CHECK("every module was redirected at load: a second walk has nothing to do") {
        EXPECT_U_EQ(kame_pool_redirect(), 0);
    }
    CHECK("malloc and calloc of the program are the pool's") {
        unsigned long long before = live();
        void *p = malloc(40);
        void *q = calloc(3, 40);
        EXPECT_NOT_NULL(p);
        EXPECT_NOT_NULL(q);
        EXPECT_U_EQ(live(), before + 2);
        EXPECT_U_GE(kame_pool_malloc_usable_size(q), 120);
        free(p);
        free(q);
        EXPECT_U_EQ(live(), before);
    }
    CHECK("malloc and calloc of the DLL are the pool's") {
        unsigned long long before = live();
        void *p = crt_dll_malloc(40);
        unsigned char *q = crt_dll_calloc(5, 100);
        EXPECT_NOT_NULL(p);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(live(), before + 2);
        size_t nonzero = 0;
        for (size_t i = 0; i < 500; i++)
            nonzero += q[i] != 0;
        EXPECT_U_EQ(nonzero, 0);
        EXPECT_U_EQ(crt_dll_msize(q), kame_pool_malloc_usable_size(q));
        crt_dll_free(p);
        crt_dll_free(q);
        EXPECT_U_EQ(live(), before);
    }
}

static void test_other_names(void)
{
    CHECK("_msize and _expand of the program answer for pool blocks") {
        unsigned long long before = live();
        unsigned char *p = malloc(100);
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_U_EQ(live(), before + 1);
        size_t usable = kame_pool_malloc_usable_size(p);
        EXPECT_U_EQ(_msize(p), usable);
        EXPECT(_expand(p, usable) == p);           /* fits its slot */
        EXPECT(_expand(p, usable * 4 + 4096) == NULL); /* never moves */
        free(p);
        EXPECT_U_EQ(live(), before);
    }
    CHECK("_msize and _expand of the program pass runtime blocks to the runtime") {
        unsigned long long before = live();
        unsigned char *p = crt_malloc(100);
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_U_EQ(_msize(p), crt_msize(p));
        unsigned char *q = _expand(p, 50); /* shrinking in place */
        EXPECT(q == p);
        EXPECT_U_EQ(crt_msize(p), 50);
        EXPECT_U_EQ(live(), before);
        free(p);
        EXPECT(heaps_valid());
    }
}

static void test_pool_block_to_crt(void)
{
    CHECK("a block of kame_pool_malloc freed by the DLL's free goes back to the pool") {
        unsigned long long before = live();
        void *p = kame_pool_malloc(100);
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_U_EQ(live(), before + 1);
        memset(p, 0x5a, 100);
        crt_dll_free(p);
        EXPECT_U_EQ(live(), before);
        EXPECT_U_EQ(stats().invalid_pointers, 0);
        EXPECT(heaps_valid());
    }
    CHECK("the DLL's _aligned_malloc and _aligned_free are the pool's") {
        unsigned long long before = live();
        void *p = crt_dll_aligned_malloc(100, 256);
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_ALIGNED(p, 256);
        EXPECT_U_EQ(live(), before + 1);
        crt_dll_aligned_free(p);
        EXPECT_U_EQ(live(), before);
    }
    CHECK("the DLL's _aligned_realloc keeps pool blocks in the pool and runtime blocks in the runtime") {
        unsigned long long before = live();
        unsigned char *p = crt_dll_aligned_malloc(64, 128);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kp_fill_pat(p, 64, 8);
        unsigned char *q = crt_dll_aligned_realloc(p, 3000, 128);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_ALIGNED(q, 128);
        EXPECT_U_EQ(kp_pat_mismatch(q, 64, 8), 64);
        EXPECT_U_EQ(live(), before + 1);
        crt_dll_aligned_free(q);
        EXPECT_U_EQ(live(), before);
        unsigned char *c = crt_aligned_malloc(64, 64); /* the runtime's own */
        if (!EXPECT_NOT_NULL(c))
            continue;
        kp_fill_pat(c, 64, 9);
        unsigned char *d = crt_dll_aligned_realloc(c, 500, 64);
        if (!EXPECT_NOT_NULL(d))
            continue;
        EXPECT_ALIGNED(d, 64);
        EXPECT_U_EQ(kp_pat_mismatch(d, 64, 9), 64);
        EXPECT_U_EQ(live(), before);
        crt_dll_aligned_free(d);
        EXPECT(heaps_valid());
    }
}

static void test_crt_block_to_pool(void)
{
    CHECK("blocks of the runtime itself, freed through the pool, go back to the runtime") {
        unsigned long long before = live();
        char *a = crt_malloc(200), *b = crt_malloc(3000), *c = crt_malloc(70000);
        char *d = _strdup("made inside the runtime"); /* the runtime's internal malloc */
        void *e = crt_aligned_malloc(300, 64);
        if (!EXPECT_NOT_NULL(a) || !EXPECT_NOT_NULL(b) || !EXPECT_NOT_NULL(c) || !EXPECT_NOT_NULL(d) ||
            !EXPECT_NOT_NULL(e))
            continue;
        EXPECT_U_EQ(live(), before); /* none is the pool's */
        EXPECT_U_EQ(_msize(b), crt_msize(b));
        EXPECT_U_EQ(crt_dll_msize(c), crt_msize(c));
        kame_pool_free(a);  /* the pool's C API */
        free(b);            /* the program's redirected free */
        crt_dll_free(c);    /* the DLL's redirected free */
        free(d);
        _aligned_free(e);
        EXPECT_U_EQ(live(), before);
        EXPECT_U_EQ(stats().invalid_pointers, 0);
        EXPECT(heaps_valid());
    }
}

static void test_realloc_across(void)
{
    CHECK("a pool block grown by the DLL's realloc stays in the pool, contents kept") {
        unsigned long long before = live();
        unsigned char *p = kame_pool_malloc(64);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kp_fill_pat(p, 64, 3);
        unsigned char *q = crt_dll_realloc(p, 5000);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(kp_pat_mismatch(q, 64, 3), 64);
        EXPECT_U_EQ(live(), before + 1);
        EXPECT_U_GE(crt_dll_msize(q), 5000);
        EXPECT_U_EQ(crt_dll_msize(q), kame_pool_malloc_usable_size(q));
        q = kame_pool_realloc(q, 20);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(kp_pat_mismatch(q, 20, 3), 20);
        crt_dll_free(q);
        EXPECT_U_EQ(live(), before);
    }
    CHECK("a runtime block grown by the redirected realloc moves to the pool, contents kept") {
        unsigned long long before = live();
        unsigned char *p = crt_malloc(100);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kp_fill_pat(p, 100, 4);
        unsigned char *q = crt_dll_realloc(p, 300);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(kp_pat_mismatch(q, 100, 4), 100);
        EXPECT_U_EQ(live(), before + 1);
        free(q);
        EXPECT_U_EQ(live(), before);
        EXPECT(heaps_valid());
    }
    CHECK("a runtime block given to kame_pool_realloc stays the runtime's") {
        unsigned long long before = live();
        unsigned char *p = crt_malloc(100);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kp_fill_pat(p, 100, 5);
        unsigned char *q = kame_pool_realloc(p, 2000);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(kp_pat_mismatch(q, 100, 5), 100);
        EXPECT_U_EQ(live(), before);
        EXPECT_U_GE(crt_msize(q), 2000);
        crt_free(q);
        EXPECT(heaps_valid());
    }
}

static void test_late_dll(void)
{
    HMODULE late = LoadLibraryA("win_late_dll.dll");
    CHECK("a DLL loaded later is redirected as it loads") {
        if (!EXPECT_NOT_NULL(late))
            continue;
        void *(*late_malloc)(size_t) = (void *(*)(size_t))(void *)GetProcAddress(late, "crt_dll_malloc");
        void (*late_free)(void *) = (void (*)(void *))(void *)GetProcAddress(late, "crt_dll_free");
        void *(*late_realloc)(void *, size_t) =
            (void *(*)(void *, size_t))(void *)GetProcAddress(late, "crt_dll_realloc");
        if (!EXPECT_NOT_NULL(late_malloc) || !EXPECT_NOT_NULL(late_free) || !EXPECT_NOT_NULL(late_realloc))
            continue;
        /* The loader's notification did it: nothing is left for a walk. */
        EXPECT_U_EQ(kame_pool_redirect(), 0);
        unsigned long long before = live();
        void *p = late_malloc(48);
        EXPECT_U_EQ(live(), before + 1);
        void *k = kame_pool_malloc(48);
        late_free(k);
        EXPECT_U_EQ(live(), before + 1);
        void *c = crt_malloc(80);
        void *c2 = late_realloc(c, 160); /* moves to the pool */
        EXPECT_U_EQ(live(), before + 2);
        late_free(p);
        late_free(c2);
        EXPECT_U_EQ(live(), before);
        EXPECT(heaps_valid());
    }
}

#define THREADS 8
static void *kept[THREADS];

static DWORD WINAPI worker(void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;
    void *mine[64];
    for (int k = 0; k < 64; k++)
        mine[k] = (k & 1) ? malloc(16 + (size_t)k * 8) : crt_dll_malloc(16 + (size_t)k * 8);
    for (int k = 0; k < 64; k++) {
        if (k & 1)
            crt_dll_free(mine[k]);
        else
            free(mine[k]);
    }
    kept[i] = crt_dll_malloc(200); /* freed by the main thread after this one exits */
    return 0;
}

static void test_thread_exit(void)
{
    CHECK("threads that allocate through the runtime's names return their heaps at exit") {
        kame_pool_stats_t s0 = stats();
        unsigned long long before = s0.small_live_blocks;
        HANDLE t[THREADS];
        for (size_t i = 0; i < THREADS; i++)
            t[i] = CreateThread(NULL, 0, worker, (void *)(uintptr_t)i, 0, NULL);
        size_t made = 0;
        for (size_t i = 0; i < THREADS; i++)
            if (t[i] != NULL) {
                made++;
                WaitForSingleObject(t[i], INFINITE);
                CloseHandle(t[i]);
            }
        if (!EXPECT_U_EQ(made, THREADS))
            continue;
        kame_pool_stats_t s1 = stats();
        EXPECT_U_EQ(s1.threads_seen, s0.threads_seen + THREADS);
        EXPECT_U_EQ(s1.threads_live, s0.threads_live);
        EXPECT_U_EQ(s1.small_live_blocks, before + THREADS);
        /* Freed into the exited threads' chunks (a remote free each): the
         * pool takes them, not the runtime. */
        for (size_t i = 0; i < THREADS; i++)
            free(kept[i]);
        EXPECT_U_EQ(stats().invalid_pointers, s0.invalid_pointers);
        EXPECT(heaps_valid());
    }
}

int main(void)
{
    if (!crt_init())
        return kp_check_summary();
    free(malloc(1)); /* the main thread's heap, made before any count */
    test_redirected();
    test_other_names();
    test_pool_block_to_crt();
    test_crt_block_to_pool();
    test_realloc_across();
    test_late_dll();
    test_thread_exit();
    return kp_check_summary();
}
