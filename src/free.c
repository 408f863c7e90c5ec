/* Free paths other than the owner's hit path (internal.h). */
#include "internal.h"

/* The owner freed a slot into a chunk that is now empty or was full. */
void kp_free_owned_slow(kp_heap *h, kp_chunk *c) {
  if (c->list == KP_LIST_FULL) {
    kp_heap_list_remove(h, c);
    kp_heap_list_push(h, c, KP_LIST_AVAIL);
  }
  /* The current chunk stays even when empty, so a loop that frees its
   * last slot does not release and re-claim a chunk every time. */
  if (c->used == 0 && h->current[c->cls] != c) {
    kp_heap_list_remove(h, c);
    kp_chunk_release(c);
  }
}

void kp_free_generic(void *p) {
  uintptr_t entry = kp_radix_get((uintptr_t)p);
  if (entry == KP_RADIX_REGION) {
    kp_chunk *c = kp_chunk_of(kp_region_of(p), p);
    if (c->kind == KP_CHUNK_BUCKET) kp_remote_free(c, (kp_block *)p);
    else if (c->kind == KP_CHUNK_DEDICATED) kp_free_dedicated(c, p);
    /* Anything else is not a live block of ours: ignore it. */
    return;
  }
  if (p == NULL) return;
  bool ours;
  size_t usable = kp_usable_size_of(p, entry, &ours);
  if (!ours) kp_sys_free(p);
  else if (usable != 0) kp_free_mapping(p, entry);
  /* else: inside one of our mappings but not a block start: ignore it. */
}
