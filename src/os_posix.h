/* What the POSIX implementations of the OS interface (os_linux.c,
 * os_macos.c, os_posix.c) share. */
#ifndef KP_OS_POSIX_H
#define KP_OS_POSIX_H

#include "os.h"

#include <errno.h>

/* Runs a call that returns 0 or -1 with errno; returns 0 or the code,
 * leaving errno untouched. */
#define KP_OS_CALL(expr)                                                                            \
  do {                                                                                              \
    int saved_ = errno;                                                                             \
    int rc_ = (expr) == 0 ? 0 : errno;                                                              \
    errno = saved_;                                                                                 \
    return rc_;                                                                                     \
  } while (0)

#endif
