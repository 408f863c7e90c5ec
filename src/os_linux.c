/* Linux implementation of the OS primitives (os.h). */
#include "os.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

kp_os_config kp_os;

void kp_os_init(void) {
  if (__atomic_load_n(&kp_os.page_size, __ATOMIC_RELAXED) != 0) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  kp_os.map_granularity = page;
  kp_os.partial_unmap = true;
  __atomic_store_n(&kp_os.page_size, page, __ATOMIC_RELAXED);
}

int kp_os_map(void *hint, size_t size, void **out) {
  int saved = errno;
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  int rc = p == MAP_FAILED ? errno : 0;
  errno = saved;
  *out = rc ? NULL : p;
  return rc;
}

int kp_os_unmap(void *addr, size_t size) {
  int saved = errno;
  int rc = munmap(addr, size) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}

int kp_os_purge(void *addr, size_t size) {
  int saved = errno;
  int rc = madvise(addr, size, MADV_DONTNEED) == 0 ? 0 : errno;
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

uint64_t kp_os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kp_os_write_error(const char *text, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, text, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    text += n;
    len -= (size_t)n;
  }
  errno = saved;
}

void kp_os_abort(void) { abort(); }

void kp_os_atfork_child(void (*child)(void)) { pthread_atfork(NULL, NULL, child); }

const char *kp_os_getenv(const char *name) { return getenv(name); }

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void (*_Atomic exit_destructor)(void *);

static void exit_key_create(void) { pthread_key_create(&exit_key, atomic_load(&exit_destructor)); }

void kp_os_thread_exit_init(void (*destructor)(void *arg)) {
  void (*expected)(void *) = NULL;
  atomic_compare_exchange_strong(&exit_destructor, &expected, destructor);
  pthread_once(&exit_once, exit_key_create);
}

void kp_os_thread_exit_arm(void *arg) { pthread_setspecific(exit_key, arg); }

/* Pinning calls go to the kernel directly: the sanitizer runtimes replace
 * the C library's mlock and munlock with calls that do nothing. */
int kp_os_lock(void *addr, size_t size) {
  int saved = errno;
  int rc = syscall(SYS_mlock, addr, size) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}

int kp_os_unlock(void *addr, size_t size) {
  int saved = errno;
  int rc = syscall(SYS_munlock, addr, size) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}

int kp_os_advise_huge(void *addr, size_t size, bool huge) {
  int saved = errno;
  int rc = madvise(addr, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}
