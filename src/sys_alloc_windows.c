/* The system allocator on Windows, for pointers the pool did not allocate
 * and for requests past the pool's byte ceiling: the C runtime's heap.
 *
 * The pool's own module is never redirected (override_windows.c), so the
 * runtime's functions called here are the runtime's own.  An aligned
 * block of the CRT must be freed with _aligned_free, not free, and a
 * foreign pointer does not say which it is; so aligned requests past the
 * ceiling get pages of their own from the OS instead (kp_map_aligned,
 * outside the pool's accounting).  Such a block starts a reservation,
 * which no block of the CRT's heap does (its blocks follow a header), and
 * that is how free, realloc and the usable size tell the two apart: one
 * VirtualQuery, on cold paths only. */
#include "internal.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

/* The bytes of a block of our own pages at p, or 0 if p is the CRT's. */
static size_t own_pages(void *p) {
  MEMORY_BASIC_INFORMATION mbi;
  if (VirtualQuery(p, &mbi, sizeof mbi) == 0 || mbi.AllocationBase != p || mbi.State != MEM_COMMIT) return 0;
  return mbi.RegionSize;
}

/* For the redirected free family: such a block is the pool's to free. */
KP_HIDDEN bool kp_sys_own_pages(const void *p);
bool kp_sys_own_pages(const void *p) { return own_pages((void *)p) != 0; }

void *kp_sys_malloc(size_t size) { return malloc(size); }
void *kp_sys_calloc(size_t count, size_t size) { return calloc(count, size); }

void *kp_sys_memalign(size_t align, size_t size) {
  size_t page = kp_page_size();
  if (size == 0) size = 1;
  if (size > SIZE_MAX - page) return NULL;
  return kp_map_aligned((size + page - 1) & ~(page - 1), align > page ? align : page);
}

void *kp_sys_realloc(void *p, size_t size) {
  size_t own = own_pages(p);
  if (own == 0) return realloc(p, size);
  void *q = malloc(size);
  if (q == NULL) return NULL;
  memcpy(q, p, size < own ? size : own);
  (void)kp_os_unmap(p, own);
  return q;
}

void kp_sys_free(void *p) {
  int saved = errno;
  size_t own = own_pages(p);
  if (own != 0) (void)kp_os_unmap(p, own);
  else free(p);
  errno = saved;
}

size_t kp_sys_usable_size(void *p) {
  size_t own = own_pages(p);
  return own ? own : _msize(p);
}
