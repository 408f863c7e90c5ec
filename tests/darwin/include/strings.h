/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md). */
#ifndef KP_DARWIN_STRINGS_H
#define KP_DARWIN_STRINGS_H
#include <kp_darwin_decls.h>
int strcasecmp(const char *s1, const char *s2);
int strncasecmp(const char *s1, const char *s2, size_t n);
#endif
