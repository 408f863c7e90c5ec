/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md). */
#ifndef KP_DARWIN_STRING_H
#define KP_DARWIN_STRING_H
#include <kp_darwin_decls.h>
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memmove(void *dst, const void *src, size_t len);
void *memset(void *b, int c, size_t len);
int memcmp(const void *s1, const void *s2, size_t n);
size_t strlen(const char *s);
int strcmp(const char *s1, const char *s2);
int strncmp(const char *s1, const char *s2, size_t n);
char *strchr(const char *s, int c);
char *strstr(const char *haystack, const char *needle);
size_t strcspn(const char *s, const char *charset);
char *strcpy(char *restrict dst, const char *restrict src);
#endif
