/* Free paths other than the owner's hit path (internal.h). */
#include "internal.h"

/* The owner freed the last live slot of a chunk that is not current. */
void kp_free_owned_slow(kp_heap *h, kp_chunk *c) {
  kp_heap_avail_remove(h, c);
  kp_remote_collect(c, false); /* nothing can arrive: no slot is live */
  kp_chunk_retire(h, c);
}

/* The owner's free at the full check level, where owned chunks carry a
 * token that sends every free here: the hit path's checks plus the slot
 * boundary. */
static void free_owned_checked(kp_heap *h, kp_chunk *c, kp_block *b) {
  b->tag = (uintptr_t)c;
  b->next = c->local_free;
  c->local_free = b;
  if (--c->used == 0) kp_free_owned_slow(h, c);
}

/* A pointer into a region that the hit path did not take: a slot of a
 * chunk another thread owns (or none does), a dedicated block, or not a
 * block at all.  `c` is the chunk the hit path found. */
void kp_free_in_region(void *p, kp_chunk *c) {
  kp_ptr_info info;
  kp_lookup_in_region(p, c, &info);
  if (info.kind == KP_PTR_SLOT) {
    kp_heap *h = kp_tls_heap;
    if (kp_load_relaxed(&c->owner) == h->token) free_owned_checked(h, c, p);
    else kp_remote_free(c, p);
  } else if (info.kind == KP_PTR_DEDICATED) {
    kp_free_dedicated(kp_heap_if_any(), c);
  } else {
    kp_invalid_pointer("free", p, info.problem);
  }
}

/* A pointer outside the pool's regions: a large or huge block, NULL, or
 * foreign. */
void kp_free_generic(void *p) {
  if (p == NULL) return;
  kp_ptr_info info;
  kp_lookup(p, &info);
  if (info.kind == KP_PTR_MAPPING) kp_free_mapping(p, info.entry);
  else if (info.kind == KP_PTR_FOREIGN) kp_sys_free(p);
  else kp_invalid_pointer("free", p, info.problem);
}
