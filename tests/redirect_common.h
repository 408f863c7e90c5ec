/* What the Windows redirection tests share: the functions of
 * win_crt_dll.dll, the C runtime's own functions past the redirection,
 * the pool's live-block count and the heaps' validation. */
#ifndef KP_REDIRECT_COMMON_H
#define KP_REDIRECT_COMMON_H

#include <malloc.h>
#include <windows.h>

#include "kame_pool.h"
#include "check.h"

__declspec(dllimport) void *crt_dll_malloc(size_t n);
__declspec(dllimport) void *crt_dll_calloc(size_t count, size_t n);
__declspec(dllimport) void *crt_dll_realloc(void *p, size_t n);
__declspec(dllimport) void crt_dll_free(void *p);
__declspec(dllimport) size_t crt_dll_msize(void *p);
__declspec(dllimport) void *crt_dll_aligned_malloc(size_t n, size_t align);
__declspec(dllimport) void *crt_dll_aligned_realloc(void *p, size_t n, size_t align);
__declspec(dllimport) void crt_dll_aligned_free(void *p);

/* The C runtime's own functions, past the redirection. */
static void *(*crt_malloc)(size_t);
static void (*crt_free)(void *);
static size_t (*crt_msize)(void *);
static void *(*crt_aligned_malloc)(size_t, size_t);
static int (*crt_heapchk)(void);

static int crt_find(void)
{
    HMODULE crt = GetModuleHandleA("msvcrt.dll");
    if (crt == NULL)
        return 0;
    crt_malloc = (void *(*)(size_t))(void *)GetProcAddress(crt, "malloc");
    crt_free = (void (*)(void *))(void *)GetProcAddress(crt, "free");
    crt_msize = (size_t (*)(void *))(void *)GetProcAddress(crt, "_msize");
    crt_aligned_malloc = (void *(*)(size_t, size_t))(void *)GetProcAddress(crt, "_aligned_malloc");
    crt_heapchk = (int (*)(void))(void *)GetProcAddress(crt, "_heapchk");
    return crt_malloc && crt_free && crt_msize && crt_aligned_malloc && crt_heapchk;
}

/* The tests' start: the checks and the runtime's own functions, found.
 * False (the caller returns kp_check_summary()) when they are not. */
static int crt_init(void)
{
    kp_check_init();
    CHECK("the runtime's own functions found") {
        EXPECT(crt_find());
    }
    return crt_malloc != NULL && crt_heapchk != NULL;
}

static kame_pool_stats_t stats(void)
{
    kame_pool_stats_t s = KAME_POOL_STATS_INIT;
    kame_pool_get_stats(&s);
    return s;
}

static unsigned long long live(void) { return stats().small_live_blocks; }

/* The runtime's heap and every heap of the process pass validation. */
static int heaps_valid(void)
{
    if (crt_heapchk() != _HEAPOK)
        return 0;
    HANDLE heaps[256];
    DWORD n = GetProcessHeaps(256, heaps);
    if (n == 0 || n > 256)
        return 0;
    for (DWORD i = 0; i < n; i++)
        if (!HeapValidate(heaps[i], 0, NULL))
            return 0;
    return 1;
}

#endif
