/* Windows, the static library: nothing is redirected until the program
 * calls kame_pool_redirect, which then rewrites the other modules' imports
 * (here win_crt_dll.dll's) but not the program's own module, which holds
 * the pool.  A block the DLL's runtime made before the call is freed
 * through the rewritten free afterwards and reaches the runtime. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "kame_pool.h"
#include "check.h"

#include "redirect_common.h"

static DWORD WINAPI worker(void *arg)
{
    void **out = arg;
    void *p = crt_dll_malloc(100);
    crt_dll_free(p);
    *out = crt_dll_malloc(100);
    return 0;
}

int main(void)
{
    if (!crt_init())
        return kp_check_summary();
    kame_pool_free(kame_pool_malloc(1)); /* the main thread's heap, made before any count */

    unsigned char *early = crt_dll_malloc(300);
    unsigned char *early_grown = crt_dll_malloc(100);
    CHECK("before kame_pool_redirect the DLL's malloc is its runtime's") {
        unsigned long long before = live();
        if (!EXPECT_NOT_NULL(early) || !EXPECT_NOT_NULL(early_grown))
            continue;
        EXPECT_U_EQ(live(), before);
        EXPECT_U_EQ(crt_dll_msize(early), crt_msize(early));
        kp_fill_pat(early_grown, 100, 7);
    }
    CHECK("kame_pool_redirect rewrites the DLL's imports, once") {
        EXPECT_U_GT(kame_pool_redirect(), 0);
        EXPECT_U_EQ(kame_pool_redirect(), 0);
    }
    CHECK("then the DLL's malloc and free are the pool's") {
        unsigned long long before = live();
        void *p = crt_dll_malloc(64);
        EXPECT_U_EQ(live(), before + 1);
        void *k = kame_pool_malloc(64);
        crt_dll_free(k);
        crt_dll_free(p);
        EXPECT_U_EQ(live(), before);
    }
    CHECK("blocks the DLL's runtime made before the redirection go back to it") {
        unsigned long long before = live();
        if (!EXPECT_NOT_NULL(early) || !EXPECT_NOT_NULL(early_grown))
            continue;
        EXPECT_U_EQ(crt_dll_msize(early), crt_msize(early));
        crt_dll_free(early);
        unsigned char *q = crt_dll_realloc(early_grown, 1000); /* moves to the pool */
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECT_U_EQ(kp_pat_mismatch(q, 100, 7), 100);
        EXPECT_U_EQ(live(), before + 1);
        crt_dll_free(q);
        EXPECT_U_EQ(live(), before);
        EXPECT_U_EQ(stats().invalid_pointers, 0);
        EXPECT(heaps_valid());
    }
    CHECK("a new thread's first allocation through the DLL reaches the pool (no recursion through TLS)") {
        kame_pool_stats_t s0 = stats();
        void *kept = NULL;
        HANDLE t = CreateThread(NULL, 0, worker, &kept, 0, NULL);
        if (!EXPECT_NOT_NULL(t))
            continue;
        WaitForSingleObject(t, INFINITE);
        CloseHandle(t);
        kame_pool_stats_t s1 = stats();
        if (!EXPECT_NOT_NULL(kept))
            continue;
        EXPECT_U_EQ(s1.threads_seen, s0.threads_seen + 1);
        EXPECT_U_EQ(s1.threads_live, s0.threads_live);
        EXPECT_U_EQ(s1.small_live_blocks, s0.small_live_blocks + 1);
        crt_dll_free(kept);
        EXPECT(heaps_valid());
    }
    CHECK("the program's own module, which holds the pool, keeps its runtime's names") {
        unsigned long long before = live();
        void *p = malloc(64);
        if (!EXPECT_NOT_NULL(p))
            continue;
        EXPECT_U_EQ(live(), before);
        EXPECT_U_EQ(_msize(p), crt_msize(p));
        free(p);
        EXPECT(heaps_valid());
    }
    return kp_check_summary();
}
