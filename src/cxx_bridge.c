/* The C side of operator new / delete: the pool's hit paths, inlined, for
 * new_delete.cpp (cxx_bridge.h).  Built with -fexceptions: kp_cxx_oom may
 * throw through these frames. */
#include "internal.h"

#include "cxx_bridge.h"

void *kp_cxx_new(size_t size) {
  void *p = kp_malloc_inline(size);
  if (likely(p != NULL)) return p;
  return kp_cxx_oom(size, 0);
}

void *kp_cxx_new_aligned(size_t size, size_t align) {
  void *p = kp_memalign(align, size);
  if (likely(p != NULL)) return p;
  return kp_cxx_oom(size, align);
}

void *kp_cxx_try_alloc(size_t size, size_t align) {
  return align ? kp_memalign(align, size) : kp_malloc_inline(size);
}

void kp_cxx_delete(void *p) { kp_free_inline(p); }
