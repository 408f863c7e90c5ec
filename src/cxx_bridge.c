/* The C side of operator new / delete: the pool's hit paths, inlined, for
 * new_delete.cpp (cxx_bridge.h).  Built with -fexceptions: kp_cxx_oom may
 * throw through these frames. */
#include "internal.h"

#include "cxx_bridge.h"

/* Every new that the hit path below does not serve. */
static KP_NOINLINE void *cxx_new_other(size_t size) {
  void *p = kp_malloc_inline(size);
  if (likely(p != NULL)) return p;
  return kp_cxx_oom(size, 0);
}

/* The hit path of malloc up to 1 KiB, whose misses (and larger sizes) go
 * to a call of their own: written as malloc's hit path followed by the
 * test for NULL, the whole function kept `size` in a saved register for
 * kp_cxx_oom, a push and a pop on every new. */
void *kp_cxx_new(size_t size) {
  if (likely(size <= KP_DIRECT_MAX)) {
    kp_chunk *c = kp_direct_current(kp_tls_heap, size);
    kp_block *b = c->free;
    if (likely(b != NULL)) return kp_take_slot(c, b);
  }
  return cxx_new_other(size);
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
