/* macOS implementation of the OS interface (os.h), on the documented
 * BSD and pthread calls only.  Compile-checked, never run (README.md,
 * Platforms).
 *
 * The page size is the kernel's: 16 KiB on Apple silicon, 4 KiB on Intel.
 * Everything above this file takes it from kp_os.page_size, and every
 * length the pool maps is a multiple of 64 KiB (KP_MAP_GRANULE), so both
 * sizes fit.
 *
 * Purging and decommitting map fresh anonymous pages over the range
 * (MAP_FIXED) instead of advising: the interface promises zero-filled
 * pages on the next touch, and Darwin documents no madvise value that
 * does (MADV_DONTNEED and MADV_FREE_REUSABLE let the kernel take the pages
 * but may leave their old contents).  A fresh mapping also drops the
 * pages from the process's footprint at once. */
#include "os_posix.h"

#include <errno.h>
#include <mach/vm_statistics.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

kp_os_config kp_os;

/* The pool's mappings carry an application tag, so vmmap shows them
 * apart from the system allocator's. */
#define KP_VM_TAG VM_MAKE_TAG(VM_MEMORY_APPLICATION_SPECIFIC_1)

void kp_os_init(void) {
  if (__atomic_load_n(&kp_os.page_size, __ATOMIC_RELAXED) != 0) return;
  int saved = errno;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 16384;
  kp_os.alloc_granularity = (size_t)page;
  kp_os.has_partial_unmap = true;
  /* Anonymous memory is backed when touched; nothing is charged at
   * mapping time. */
  kp_os.has_overcommit = true;
  /* User space ends below 2^47 on both x86-64 and arm64 macOS. */
  kp_os.address_bits = sizeof(void *) == 8 ? 47 : 32;
  errno = saved;
  __atomic_store_n(&kp_os.page_size, (size_t)page, __ATOMIC_RELAXED);
}

int kp_os_reserve(void *hint, size_t size, bool commit, void **out) {
  int saved = errno;
  /* Without MAP_FIXED the address is only a hint: Darwin places the
   * mapping elsewhere rather than over an existing one. */
  void *p = mmap(hint, size, commit ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANON, KP_VM_TAG, 0);
  int rc = p == MAP_FAILED ? errno : 0;
  errno = saved;
  *out = rc ? NULL : p;
  return rc;
}

/* Replaces the range with fresh zero-fill pages of the given protection
 * (see the top of the file). */
static int remap(void *addr, size_t size, int prot) {
  int saved = errno;
  void *p = mmap(addr, size, prot, MAP_PRIVATE | MAP_ANON | MAP_FIXED, KP_VM_TAG, 0);
  int rc = p == MAP_FAILED ? errno : p == addr ? 0 : EINVAL;
  errno = saved;
  return rc;
}

int kp_os_decommit(void *addr, size_t size) { return remap(addr, size, PROT_NONE); }

int kp_os_purge(void *addr, size_t size) { return remap(addr, size, PROT_READ | PROT_WRITE); }

int kp_os_remap(void *addr, size_t old_size, size_t new_size, void *to) {
  (void)addr, (void)old_size, (void)new_size, (void)to;
  return ENOTSUP; /* no mremap: realloc copies */
}

/* mincore(2) fails with ENOMEM for a page that is not mapped. */
bool kp_os_is_mapped(const void *addr) {
  int saved = errno;
  char vec;
  uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(kp_page_size() - 1);
  bool mapped = mincore((const void *)page, 1, &vec) == 0 || errno != ENOMEM;
  errno = saved;
  return mapped;
}

int kp_os_lock(void *addr, size_t size) { KP_OS_CALL(mlock(addr, size)); }

int kp_os_unlock(void *addr, size_t size) { KP_OS_CALL(munlock(addr, size)); }

/* Darwin has no transparent huge pages to advise for or against. */
int kp_os_advise_huge(void *addr, size_t size, bool huge) {
  (void)size;
  (void)huge;
  return ((uintptr_t)addr & (kp_page_size() - 1)) == 0 ? ENOTSUP : EINVAL;
}

/* The uptime clock stops while the machine sleeps, as Linux's
 * CLOCK_MONOTONIC does, so a sleep does not look like an idle spell.  Its
 * cheaper, coarser reading is enough for the drain's milliseconds. */
uint64_t kp_os_now_ns(void) { return clock_gettime_nsec_np(CLOCK_UPTIME_RAW_APPROX); }

