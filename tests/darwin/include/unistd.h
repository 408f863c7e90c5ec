/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  _SC_PAGESIZE is Darwin's value. */
#ifndef KP_DARWIN_UNISTD_H
#define KP_DARWIN_UNISTD_H
#include <kp_darwin_decls.h>
#define STDIN_FILENO 0
#define STDOUT_FILENO 1
#define STDERR_FILENO 2
#define _SC_PAGESIZE 29
#define _SC_PAGE_SIZE _SC_PAGESIZE
long sysconf(int name);
ssize_t write(int fildes, const void *buf, size_t nbyte);
ssize_t read(int fildes, void *buf, size_t nbyte);
int close(int fildes);
#endif
