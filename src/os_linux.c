/* Linux implementation of the OS interface (os.h), for glibc and musl. */
#include "os_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

kp_os_config kp_os;

/* vm.overcommit_memory 2 backs every writable private page when it is
 * mapped.  Read without the C library's buffered I/O, which allocates. */
static bool overcommit_enabled(void) {
  int fd = open("/proc/sys/vm/overcommit_memory", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char c = 0;
  ssize_t n = read(fd, &c, 1);
  close(fd);
  return n != 1 || c != '2';
}

void kp_os_init(void) {
  if (__atomic_load_n(&kp_os.page_size, __ATOMIC_RELAXED) != 0) return;
  int saved = errno;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  kp_os.alloc_granularity = (size_t)page;
  kp_os.has_partial_unmap = true;
  kp_os.has_overcommit = overcommit_enabled();
  /* The kernel places mappings below 47 bits (x86-64) or 48 (aarch64)
   * unless asked for an address above; on 32-bit targets, anywhere. */
  kp_os.address_bits = sizeof(void *) == 8 ? 48 : 32;
  errno = saved;
  __atomic_store_n(&kp_os.page_size, (size_t)page, __ATOMIC_RELAXED);
}

int kp_os_reserve(void *hint, size_t size, bool commit, void **out) {
  int saved = errno;
  /* MAP_NORESERVE: the pool maps far more than it touches, and with
   * overcommit the kernel would otherwise count it all. */
  void *p = mmap(hint, size, commit ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  int rc = p == MAP_FAILED ? errno : 0;
  errno = saved;
  *out = rc ? NULL : p;
  return rc;
}

int kp_os_decommit(void *addr, size_t size) {
  int saved = errno;
  int rc = madvise(addr, size, MADV_DONTNEED) == 0 ? 0 : errno;
  if (rc == 0 && mprotect(addr, size, PROT_NONE) != 0) rc = errno;
  errno = saved;
  return rc;
}

int kp_os_purge(void *addr, size_t size) { KP_OS_CALL(madvise(addr, size, MADV_DONTNEED)); }

int kp_os_remap(void *addr, size_t old_size, size_t new_size, void *to) {
  int saved = errno;
  void *p = to == NULL ? mremap(addr, old_size, new_size, 0)
                       : mremap(addr, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  int rc = p == MAP_FAILED ? errno : 0;
  errno = saved;
  return rc;
}

bool kp_os_is_mapped(const void *addr) {
  int saved = errno;
  unsigned char vec;
  uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(kp_page_size() - 1);
  bool mapped = mincore((void *)page, 1, &vec) == 0 || errno != ENOMEM;
  errno = saved;
  return mapped;
}

/* Pinning goes to the kernel directly: the sanitizer runtimes replace the
 * C library's mlock and munlock with calls that do nothing. */
int kp_os_lock(void *addr, size_t size) { KP_OS_CALL(syscall(SYS_mlock, addr, size)); }

int kp_os_unlock(void *addr, size_t size) { KP_OS_CALL(syscall(SYS_munlock, addr, size)); }

int kp_os_advise_huge(void *addr, size_t size, bool huge) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  KP_OS_CALL(madvise(addr, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE));
#else
  (void)addr;
  (void)size;
  (void)huge;
  return ENOTSUP;
#endif
}

/* The coarse clock (the kernel's tick, 1-10 ms): the drain's times are in
 * milliseconds, and it is read on every request to the shared cache and
 * every so many frees.  Reading the precise clock took 25 ns on a
 * paravirtual clock source, the coarse one 7. */
uint64_t kp_os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

