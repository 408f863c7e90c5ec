/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  mmap(2), madvise(2), mincore(2), mlock(2)
 * with Darwin's values; note mincore's vector is char *, not unsigned
 * char * as on Linux. */
#ifndef KP_DARWIN_SYS_MMAN_H
#define KP_DARWIN_SYS_MMAN_H
#include <kp_darwin_decls.h>
#define PROT_NONE 0x00
#define PROT_READ 0x01
#define PROT_WRITE 0x02
#define PROT_EXEC 0x04
#define MAP_SHARED 0x0001
#define MAP_PRIVATE 0x0002
#define MAP_FIXED 0x0010
#define MAP_NORESERVE 0x0040
#define MAP_ANON 0x1000
#define MAP_ANONYMOUS MAP_ANON
#define MAP_FAILED ((void *)-1)
#define MADV_NORMAL 0
#define MADV_RANDOM 1
#define MADV_SEQUENTIAL 2
#define MADV_WILLNEED 3
#define MADV_DONTNEED 4
#define MADV_FREE 5
#define MADV_FREE_REUSABLE 7
#define MADV_FREE_REUSE 8
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset);
int munmap(void *addr, size_t len);
int mprotect(void *addr, size_t len, int prot);
int madvise(void *addr, size_t len, int advice);
int mincore(const void *addr, size_t len, char *vec);
int mlock(const void *addr, size_t len);
int munlock(const void *addr, size_t len);
#endif
