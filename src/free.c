/* Free paths other than the owner's hit path (internal.h). */
#include "internal.h"

/* The owner's free brought a chunk's `used` to 0: a parked chunk got a
 * free slot (back to the avail list), or the last live slot of a chunk
 * that is not current was freed.  Or it brought the current chunk's
 * `owner_frees` to 0, after 2^30 frees into it. */
void kp_free_owned_slow(kp_heap *h, kp_chunk *c) {
  if (h->current[c->cls] == c) {
    c->owner_frees = KP_OWNER_FREES_NONE - 1;
    return;
  }
  if (c->flags & KP_CHUNK_PARKED) {
    kp_heap_unpark(h, c);
    if (c->used != 0) {
      kp_heap_avail_push(h, c);
      return;
    }
  } else {
    kp_heap_avail_remove(h, c);
  }
  kp_remote_collect(c, false); /* nothing can arrive: no slot is live */
  kp_chunk_retire(h, c);
}

/* The owner's free at the full check level, where owned chunks carry a
 * token that sends every free here (after the lookup's checks, the slot
 * boundary among them): onto the local list, counted off `used`, even in
 * the current chunk, so that the list is checked whole before it is
 * handed out. */
static void free_owned_checked(kp_heap *h, kp_chunk *c, kp_block *b) {
  b->tag = (uintptr_t)c;
  b->next = c->local_free;
  c->local_free = b;
  if (h->current[c->cls] == c && --c->owner_frees == 0) kp_free_owned_slow(h, c); /* sets it back */
  if (--c->used == 0) kp_free_owned_slow(h, c);
}

/* A pointer into a region that the hit paths did not take. */
static KP_NOINLINE void free_in_region_slow(void *p, kp_chunk *c) {
  kp_ptr_info info;
  kp_lookup_in_region(p, c, &info);
  if (info.kind == KP_PTR_SLOT) {
    kp_heap *h = kp_tls_heap;
    uintptr_t owner = kp_load_relaxed(&c->owner);
    if (kp_heap_owns_token(h, owner)) free_owned_checked(h, c, p);
    else kp_remote_free(c, p);
  } else if (info.kind == KP_PTR_DEDICATED) {
    kp_free_dedicated(kp_heap_if_any(), c);
  } else {
    kp_invalid_pointer("free", p, info.problem);
  }
}

/* The thread's own live dedicated block that its hit path could not put
 * into the hot cell: into the cell or a place granted in its L1 slot,
 * marked free either way so that a second free of it is caught [L1-1,
 * HOT-1]; otherwise the release layer decides. */
void kp_free_dedicated_slow(kp_heap *h, kp_chunk *c) {
  /* The cell's block keeps its kind [HOT-1]: freed again, it comes here. */
  if (c->block == h->hot) {
    kp_invalid_pointer("free", c->block, "double free (the block is already free)");
    return;
  }
  if (!kp_l1_keep(h, c->home, c->block)) kp_free_dedicated(h, c);
}

/* A pointer into a region that the hit paths did not take: a slot of a
 * chunk another thread owns (or none does), one of the thread's chunks at
 * the full check level, another thread's dedicated block, or not a block
 * at all.  `c` is the chunk the hit path found and `mismatch` what it read
 * in its `owner` xor the thread's id. */
void kp_free_in_region(void *p, kp_chunk *c, uintptr_t mismatch) {
  /* One of the thread's trimmed chunks (its token with the low bit set):
   * past the carved part the slots may have no free tag, so a slot is
   * checked against `carved` and its boundary, then pushed as on the hit
   * path [TAIL-1].  (At the full check level every owned chunk
   * carries the bit, and goes the checked way below.) */
  if ((mismatch & ~(uintptr_t)(KP_OWNER_RESTING | 1)) == 0 && kp_load_relaxed(&c->kind) == KP_CHUNK_BUCKET &&
      kp_load_relaxed(&kp_check_level) < KP_CHECK_FULL) {
    kp_block *b = (kp_block *)p;
    if (likely(kp_is_slot_start(c, p) && b->tag != (uintptr_t)c && kp_slot_index(c, p) < c->carved)) {
      kp_owner_push(c, b, mismatch & KP_OWNER_RESTING);
      return;
    }
    free_in_region_slow(p, c); /* reports it */
    return;
  }
  kp_heap *h = kp_tls_heap;
  /* A slot of a chunk another thread owns, or none does: the cross-thread
   * free, with the checks kp_lookup_in_region makes for a slot.  (At the
   * full check level this thread's chunks carry its id with the low bit
   * set, and go the checked way.) */
  /* `trimmed` is read here, with the chunk's first line, not after the
   * slot's tag: read after a load that may miss, a line the owner writes
   * cost `bench_server -t 2` a tenth of its speed.  A trimmed chunk's
   * frees go to the checks of kp_lookup_in_region [TAIL-1]. */
  if (likely((mismatch & ~(KP_OWNER_RESTING | 1)) != 0 &&
             kp_load_relaxed(&c->kind) == KP_CHUNK_BUCKET && !kp_load_relaxed(&c->trimmed) &&
             h != &kp_empty_heap && h != &kp_exited_heap)) {
    kp_block *b = (kp_block *)p;
    if (likely(kp_is_slot_start(c, p) && b->tag != (uintptr_t)c)) {
      kp_remote_free_by(h, c, b);
      return;
    }
  }
  free_in_region_slow(p, c);
}

/* A pointer outside the pool's regions that the mapping hit path did not
 * take: a large or huge block, NULL, or foreign.  `s`: the L1 slot
 * kp_own_mapping_slot found for p (the thread's own mapping that the hot
 * cell did not take), or NULL. */
void kp_free_generic(void *p, kp_l1_slot *s) {
  if (s != NULL) {
    kp_heap *h = kp_tls_heap;
    if (kp_l1_keep(h, s, p)) return;
    if (kp_l1_push(h, (unsigned)(s - h->l1.slot), p)) {
      *(uintptr_t *)p = kp_free_tag(p); /* freed: a second free is caught */
      return;
    }
  }
  if (p == NULL) return;
  kp_ptr_info info;
  kp_lookup(p, &info);
  if (info.kind == KP_PTR_MAPPING) kp_free_mapping(p, info.entry);
  else if (info.kind == KP_PTR_FOREIGN) kp_sys_free(p);
  else kp_invalid_pointer("free", p, info.problem);
}
