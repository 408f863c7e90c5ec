/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md): not Apple's headers, and not for building
 * anything that runs.  Types shared by the stand-in headers. */
#ifndef KP_DARWIN_DECLS_H
#define KP_DARWIN_DECLS_H
#if !defined(__APPLE__) || !defined(__MACH__)
#error "tests/darwin/include stands in for the macOS SDK: compile with -target *-apple-macos*"
#endif
#include <stddef.h>
#include <stdint.h>
typedef long ssize_t;
typedef long long off_t;
typedef long time_t;
typedef int pid_t;
typedef unsigned int mode_t;
#endif
