/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  errno is a per-thread location; the values
 * are Darwin's. */
#ifndef KP_DARWIN_ERRNO_H
#define KP_DARWIN_ERRNO_H
extern int *__error(void);
#define errno (*__error())
#define EPERM 1
#define ENOENT 2
#define EINTR 4
#define ENOMEM 12
#define EFAULT 14
#define EINVAL 22
#define ERANGE 34
#define EAGAIN 35
#define ENOTSUP 45
#endif
