/* Telling memcheck about the pool's blocks (built with KP_VALGRIND=1, the
 * KAME_POOL_VALGRIND option): each block handed out is announced as a
 * malloc-like block, each block freed as freed, so a program run under
 * valgrind gets its leak and use-after-free reports for pool blocks.
 *
 * The pool keeps two words in every free block (the free-list link and
 * the free tag, docs/design.md) and reads them when it frees and hands
 * out blocks, so the first 16 bytes of a block stay defined, live or
 * freed: they are never reported as uninitialised or as used after free.
 * Memory the pool takes back for itself (a chunk obtained, a cached
 * mapping reused) is made defined again before it touches it. */
#include "internal.h"

#if KP_VALGRIND
#include <valgrind/memcheck.h>

#define KP_LINK_BYTES (2 * sizeof(void *))

void kp_track_alloc(void *p, bool zeroed) {
  size_t usable = kp_usable_size(p);
  VALGRIND_MALLOCLIKE_BLOCK(p, usable, 0, zeroed);
  VALGRIND_MAKE_MEM_DEFINED(p, KP_LINK_BYTES);
}

void kp_track_free(void *p) {
  if (p == NULL) return;
  kp_ptr_info info;
  kp_lookup(p, &info);
  /* Foreign blocks are the system allocator's (memcheck knows them);
   * bad pointers are the pool's to report. */
  if (info.kind != KP_PTR_SLOT && info.kind != KP_PTR_DEDICATED && info.kind != KP_PTR_MAPPING) return;
  VALGRIND_FREELIKE_BLOCK(p, 0);
  VALGRIND_MAKE_MEM_DEFINED(p, KP_LINK_BYTES);
}

void kp_track_reuse(void *p, size_t len) { VALGRIND_MAKE_MEM_DEFINED(p, len); }
#endif
