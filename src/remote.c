/* Cross-thread free.
 *
 * A thread that frees a slot of a chunk it does not own pushes the slot
 * onto the chunk's remote list with one CAS; only the owner takes the
 * list, all of it at once with an exchange, so the list has no ABA.  When
 * the list goes from empty to non-empty the freer raises a per-class hint
 * in the owner's heap, so the owner looks at its full chunks again before
 * it claims a new one.  The hint may land on a heap that has since been
 * recycled; that only costs the new thread one scan. */
#include "internal.h"

void kp_remote_free(kp_chunk *c, kp_block *b) {
  unsigned cls = c->cls; /* before the push: after it the chunk may be reused */
  kp_block *head = kp_load_relaxed(&c->remote_free);
  do {
    b->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&c->remote_free, &head, b, memory_order_seq_cst,
                                                  memory_order_relaxed));
  if (head != NULL) return;
  /* The owner is read after the push: a thread that adopted the chunk
   * meanwhile either took this slot in its collect or is seen here (both
   * sides are sequentially consistent).  Headers are never unmapped, so a
   * stale owner costs a spurious hint at worst. */
  kp_heap *owner = atomic_load_explicit(&c->owner, memory_order_seq_cst);
  if (owner != NULL) atomic_store_explicit(&owner->remote_hint[cls], 1, memory_order_seq_cst);
}

/* Moves the remote list onto c->free; returns how many slots it held. */
uint32_t kp_remote_collect(kp_chunk *c) {
  if (kp_load_relaxed(&c->remote_free) == NULL) return 0;
  return kp_remote_collect_now(c);
}

/* The same without the cheap look first: after a change of owner the
 * exchange itself must follow the owner store (see kp_remote_free). */
uint32_t kp_remote_collect_now(kp_chunk *c) {
  kp_block *list = atomic_exchange_explicit(&c->remote_free, NULL, memory_order_seq_cst);
  if (list == NULL) return 0;
  uint32_t n = 1;
  kp_block *tail = list;
  while (tail->next != NULL) {
    tail = tail->next;
    n++;
  }
  tail->next = c->free;
  c->free = list;
  c->used -= (int32_t)n;
  return n;
}
