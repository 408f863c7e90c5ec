/* A DLL built with the ordinary C runtime and nothing of the pool's: each
 * function allocates or frees through the DLL's own imports of the
 * runtime, which the pool's redirection rewrites.  Built twice: linked
 * with test_redirect, and as a copy it loads later with LoadLibrary. */
#include <malloc.h>
#include <stdlib.h>

#define DLL_API __declspec(dllexport)

DLL_API void *crt_dll_malloc(size_t n) { return malloc(n); }
DLL_API void *crt_dll_calloc(size_t count, size_t n) { return calloc(count, n); }
DLL_API void *crt_dll_realloc(void *p, size_t n) { return realloc(p, n); }
DLL_API void crt_dll_free(void *p) { free(p); }
DLL_API size_t crt_dll_msize(void *p) { return _msize(p); }
DLL_API void *crt_dll_aligned_malloc(size_t n, size_t align) { return _aligned_malloc(n, align); }
DLL_API void *crt_dll_aligned_realloc(void *p, size_t n, size_t align) { return _aligned_realloc(p, n, align); }
DLL_API void crt_dll_aligned_free(void *p) { _aligned_free(p); }
