/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md). */
#ifndef KP_DARWIN_STDIO_H
#define KP_DARWIN_STDIO_H
#include <kp_darwin_decls.h>
#include <stdarg.h>
typedef struct __sFILE FILE;
extern FILE *__stdoutp;
extern FILE *__stderrp;
#define stdout __stdoutp
#define stderr __stderrp
int fprintf(FILE *restrict stream, const char *restrict format, ...) __attribute__((format(printf, 2, 3)));
int printf(const char *restrict format, ...) __attribute__((format(printf, 1, 2)));
int snprintf(char *restrict s, size_t n, const char *restrict format, ...) __attribute__((format(printf, 3, 4)));
int vsnprintf(char *restrict s, size_t n, const char *restrict format, va_list ap)
    __attribute__((format(printf, 3, 0)));
int vfprintf(FILE *restrict stream, const char *restrict format, va_list ap) __attribute__((format(printf, 2, 0)));
int fputs(const char *restrict s, FILE *restrict stream);
int fflush(FILE *stream);
#endif
