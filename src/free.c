/* Free paths other than the owner's hit path (internal.h). */
#include "internal.h"

/* The owner's free brought a chunk's `used` to 0: a parked chunk got a
 * free slot (back to the avail list), or the last live slot of a chunk
 * that is not current was freed. */
void kp_free_owned_slow(kp_heap *h, kp_chunk *c) {
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

/* The owner's free into a chunk that is not its current one: onto the
 * local list, counted off `used`. */
static void free_resting(kp_heap *h, kp_chunk *c, kp_block *b) {
  b->tag = (uintptr_t)c;
  b->next = c->local_free;
  c->local_free = b;
  if (--c->used == 0) kp_free_owned_slow(h, c);
}

/* The owner's free at the full check level, where owned chunks carry a
 * token that sends every free here (after the lookup's checks, the slot
 * boundary among them): onto the local list even in the current chunk,
 * so that the list is checked whole before it is handed out. */
static void free_owned_checked(kp_heap *h, kp_chunk *c, kp_block *b) {
  free_resting(h, c, b);
  if (h->current[c->cls] == c) c->flags |= KP_CHUNK_OWNER_FREED;
}

/* A pointer into a region that the hit path did not take, past the
 * dedicated hit path below (`tick_due`: that path ran the drain count
 * out). */
static KP_NOINLINE void free_in_region_slow(void *p, kp_chunk *c, bool tick_due) {
  if (tick_due) kp_release_tick(kp_tls_heap);
  kp_ptr_info info;
  kp_lookup_in_region(p, c, &info);
  if (info.kind == KP_PTR_SLOT) {
    kp_heap *h = kp_tls_heap;
    uintptr_t owner = kp_load_relaxed(&c->owner);
    if (owner == h->token || owner == kp_resting_token(h)) free_owned_checked(h, c, p);
    else kp_remote_free(c, p);
  } else if (info.kind == KP_PTR_DEDICATED) {
    kp_free_dedicated(kp_heap_if_any(), c);
  } else {
    kp_invalid_pointer("free", p, info.problem);
  }
}

/* A pointer into a region that the bucket hit path did not take: a slot
 * of one of the thread's other chunks, of a chunk another thread owns (or
 * none does), a dedicated block, or not a block at all.  `c` is the chunk
 * the hit path found.  Two hit paths here: the thread's own dedicated
 * block, back to its L1 as it is when its slot has a place granted [L1-2]
 * and the drain clock is not due (otherwise the release layer decides,
 * through the slow path); and a slot of one of its resting chunks [CUR-2]. */
void kp_free_in_region(void *p, kp_chunk *c) {
  kp_heap *h = kp_tls_heap;
  uintptr_t owner = kp_load_relaxed(&c->owner);
  if (likely(owner == h->dedicated_token && c->block == (char *)p &&
             kp_load_relaxed(&c->kind) == KP_CHUNK_DEDICATED)) {
    if (likely(kp_l1_push_granted(h, c->home, c))) {
      kp_store_relaxed(&c->kind, KP_CHUNK_CACHED);
      return;
    }
    free_in_region_slow(p, c, kp_l1_tick_due(h, c->home));
    return;
  }
  if (likely(owner == (kp_os_thread_id() | KP_OWNER_RESTING))) {
    /* One of the thread's other bucket chunks (at the full check level
     * their token differs, and the slow path checks everything). */
    kp_block *b = (kp_block *)p;
    if (unlikely(b->tag == (uintptr_t)c)) {
      kp_invalid_pointer("free", p, "double free");
      return;
    }
    free_resting(h, c, b);
    return;
  }
  /* A slot of a chunk another thread owns, or none does: the cross-thread
   * free, with the checks kp_lookup_in_region makes for a slot.  (At the
   * full check level this thread's chunks carry its id with low bits set,
   * and go the checked way.) */
  if (likely((owner & ~(uintptr_t)7) != kp_os_thread_id() && kp_load_relaxed(&c->kind) == KP_CHUNK_BUCKET &&
             h != &kp_empty_heap && h != &kp_exited_heap)) {
    kp_block *b = (kp_block *)p;
    if (likely(kp_is_slot_start(c, p) && b->tag != (uintptr_t)c)) {
      kp_remote_free_by(h, c, b);
      return;
    }
  }
  free_in_region_slow(p, c, false);
}

/* The L1 slot of heap h that takes back p, if p is the head of one of
 * h's mappings that the cache may keep and not already freed; NULL
 * otherwise.  `e`: p's radix entry, which names the slot.  Only heads
 * carry a heap's mark, never continuation, released or foreign entries
 * (whose mark bits are 0, which no heap has), and the heaps without a
 * thread have a mark no entry carries: a matching mark is a live head's,
 * and p's first word may be read. */
KP_INLINE kp_l1_slot *own_mapping_slot(kp_heap *h, void *p, uintptr_t e) {
  if ((e & KP_MAP_HEAP_MASK) != h->map_hint || ((uintptr_t)p & KP_REGION_MASK) != 0 ||
      KP_MAP_LEN(e) > kp_cache_top() || *(uintptr_t *)p == kp_mapping_tag(p))
    return NULL;
  _Static_assert(sizeof(kp_l1_slot) == 64, "the radix entry's L1 bits scale to a slot offset by a shift");
  char *slots = (char *)&h->l1.slot[KP_CACHE_CHUNK_INDEXES];
  return (kp_l1_slot *)(slots + ((e & KP_MAP_L1_MASK) >> (KP_MAP_L1_SHIFT - 6)));
}

/* kp_free_generic past its hit path.  `s`: what own_mapping_slot found
 * for p. */
static KP_NOINLINE void free_generic_slow(void *p, kp_l1_slot *s) {
  if (s != NULL) {
    kp_heap *h = kp_tls_heap;
    if (kp_l1_tick_due(h, s)) kp_release_tick(h);
    if (kp_l1_push(h, (unsigned)(s - h->l1.slot), p)) {
      *(uintptr_t *)p = kp_mapping_tag(p); /* freed: a second free is caught */
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

/* A pointer outside the pool's regions: a large or huge block, NULL, or
 * foreign.  The hit path: the thread's own mapping, back to the L1 slot
 * its radix entry names, into a place granted [L1-2], when the drain
 * clock is not due; otherwise the release layer decides. */
void kp_free_generic(void *p) {
  kp_heap *h = kp_tls_heap;
  kp_l1_slot *s = own_mapping_slot(h, p, kp_radix_get((uintptr_t)p));
  if (likely(s != NULL && kp_l1_push_granted(h, s, p))) {
    *(uintptr_t *)p = kp_mapping_tag(p); /* freed: a second free is caught */
    return;
  }
  free_generic_slow(p, s);
}
