/* Linux implementation of the OS primitives (os.h). */
#include "os.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

void *kp_os_map(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void *kp_os_map_aligned(size_t size, size_t align) {
  /* Map `align` more than needed and trim both ends: one mmap and at most
   * two munmaps, whatever the kernel's placement. */
  if (size + align < size) return NULL;
  char *raw = kp_os_map(size + align);
  if (raw == NULL) return NULL;
  char *aligned = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(aligned - raw);
  size_t tail = align - head;
  if (head) kp_os_unmap(raw, head);
  if (tail) kp_os_unmap(aligned + size, tail);
  return aligned;
}

void kp_os_unmap(void *addr, size_t size) {
  int saved = errno;
  munmap(addr, size);
  errno = saved;
}

void kp_os_purge(void *addr, size_t size) {
  int saved = errno;
  madvise(addr, size, MADV_DONTNEED);
  errno = saved;
}

size_t kp_os_page_size(void) {
  static size_t page;
  size_t p = __atomic_load_n(&page, __ATOMIC_RELAXED);
  if (p == 0) {
    p = (size_t)sysconf(_SC_PAGESIZE);
    __atomic_store_n(&page, p, __ATOMIC_RELAXED);
  }
  return p;
}

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
