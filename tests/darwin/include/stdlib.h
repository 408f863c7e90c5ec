/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  The allocation functions of malloc(3);
 * aligned_alloc exists from macOS 10.15. */
#ifndef KP_DARWIN_STDLIB_H
#define KP_DARWIN_STDLIB_H
#include <kp_darwin_decls.h>
void *malloc(size_t size);
void *calloc(size_t count, size_t size);
void *realloc(void *ptr, size_t size);
void *reallocf(void *ptr, size_t size);
void *valloc(size_t size);
void *aligned_alloc(size_t alignment, size_t size);
int posix_memalign(void **memptr, size_t alignment, size_t size);
void free(void *ptr);
__attribute__((noreturn)) void abort(void);
char *getenv(const char *name);
int setenv(const char *name, const char *value, int overwrite);
unsigned long strtoul(const char *restrict str, char **restrict endptr, int base);
unsigned long long strtoull(const char *restrict str, char **restrict endptr, int base);
#endif
