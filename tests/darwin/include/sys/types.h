/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md). */
#ifndef KP_DARWIN_SYS_TYPES_H
#define KP_DARWIN_SYS_TYPES_H
#include <kp_darwin_decls.h>
#endif
