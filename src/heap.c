/* Per-thread heaps: creation, the chunk lists, thread exit and orphans.
 *
 * A thread starts on kp_empty_heap, whose lists are all empty, so its
 * first allocation falls into the slow path, which gives it a heap of its
 * own.  Heaps live in slabs that are never unmapped and are recycled
 * through a per-slab bitmap, so a stale pointer to a heap always points
 * at a heap-shaped object.
 *
 * When a thread exits, chunks with no live slot go back to their region;
 * the others become orphans: their owner is cleared and a bit is set in
 * their region's orphan bitmap.  Whoever clears that bit owns the chunk
 * (adoption), so no chunk can be adopted twice. */
#include "internal.h"

#include <string.h>

kp_chunk kp_empty_chunk;
kp_heap kp_empty_heap = {
    .current = {[0 ... KP_NUM_CLASSES - 1] = &kp_empty_chunk},
};
__thread kp_heap *kp_tls_heap __attribute__((tls_model("initial-exec"))) = &kp_empty_heap;

#define KP_HEAPS_PER_SLAB 64

typedef struct kp_heap_slab {
  _Atomic uint64_t in_use;
  struct kp_heap_slab *next;
  kp_heap heaps[KP_HEAPS_PER_SLAB];
} kp_heap_slab;

static _Atomic(kp_heap_slab *) slab_list;
static _Atomic size_t orphan_count;

/* ---- Heap slots -------------------------------------------------------- */

static kp_heap *heap_slot_claim(void) {
  for (;;) {
    for (kp_heap_slab *s = kp_load_acquire(&slab_list); s != NULL; s = s->next) {
      uint64_t cur = kp_load_relaxed(&s->in_use);
      while (~cur) {
        unsigned i = (unsigned)__builtin_ctzll(~cur);
        if (kp_cas_weak_acq_rel(&s->in_use, &cur, cur | ((uint64_t)1 << i))) {
          s->heaps[i].slab = s;
          s->heaps[i].slab_index = i;
          return &s->heaps[i];
        }
      }
    }
    kp_heap_slab *fresh = kp_os_map(sizeof(kp_heap_slab));
    if (fresh == NULL) return NULL;
    kp_heap_slab *head = kp_load_relaxed(&slab_list);
    do {
      fresh->next = head;
    } while (!kp_cas_weak_acq_rel(&slab_list, &head, fresh));
  }
}

static void heap_slot_release(kp_heap *h) {
  kp_fetch_and_acq_rel(&h->slab->in_use, ~((uint64_t)1 << h->slab_index));
}

/* ---- Chunk lists ------------------------------------------------------- */

void kp_heap_list_push(kp_heap *h, kp_chunk *c, uint8_t list) {
  kp_chunk **head = list == KP_LIST_FULL ? &h->full[c->cls] : &h->avail[c->cls];
  c->list = list;
  if (list == KP_LIST_FULL) c->used |= KP_USED_FULL;
  c->prev = NULL;
  c->next = *head;
  if (*head) (*head)->prev = c;
  *head = c;
}

void kp_heap_list_remove(kp_heap *h, kp_chunk *c) {
  if (c->list == KP_LIST_NONE) return;
  kp_chunk **head = c->list == KP_LIST_FULL ? &h->full[c->cls] : &h->avail[c->cls];
  if (c->prev) c->prev->next = c->next;
  else *head = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
  c->list = KP_LIST_NONE;
  c->used &= ~KP_USED_FULL;
}

/* ---- Orphans ----------------------------------------------------------- */

static bool chunk_has_room(kp_chunk *c) {
  return c->free != NULL || c->local_free != NULL || c->carved < c->capacity;
}

/* The heap takes an orphan it has just claimed. */
static void heap_take_chunk(kp_heap *h, kp_chunk *c) {
  atomic_store_explicit(&c->owner, h, memory_order_seq_cst);
  kp_remote_collect_now(c);
  c->next = c->prev = NULL;
  c->list = KP_LIST_NONE;
  if (c->used == 0) {
    kp_chunk_release(c);
    return;
  }
  kp_heap_list_push(h, c, chunk_has_room(c) ? KP_LIST_AVAIL : KP_LIST_FULL);
}

/* Adopts orphans until one of class `cls` with room is on h's avail list.
 * Returns whether it found one. */
bool kp_heap_adopt_orphan(kp_heap *h, unsigned cls) {
  if (kp_load_relaxed(&orphan_count) == 0) return false;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t bits = kp_load_relaxed(&r->orphans[w]);
      while (bits) {
        unsigned bit = (unsigned)__builtin_ctzll(bits);
        uint64_t m = (uint64_t)1 << bit;
        bits &= ~m;
        if (!(kp_fetch_and_acq_rel(&r->orphans[w], ~m) & m)) continue;
        kp_fetch_sub_relaxed(&orphan_count, 1);
        kp_chunk *c = &r->chunks[w * 64 + bit];
        heap_take_chunk(h, c);
        if (h->avail[cls] != NULL) return true;
      }
    }
  }
  return false;
}

static void chunk_orphan(kp_chunk *c) {
  kp_region *r = kp_region_of(c);
  unsigned first = kp_chunk_index(r, c);
  c->next = c->prev = NULL;
  c->list = KP_LIST_NONE;
  kp_store_relaxed(&c->owner, NULL);
  kp_fetch_add_relaxed(&orphan_count, 1);
  kp_fetch_or_acq_rel(&r->orphans[first / 64], (uint64_t)1 << (first % 64));
}

/* Releases every orphan that remote frees have emptied (for trim). */
void kp_orphans_release_empty(void) {
  if (kp_load_relaxed(&orphan_count) == 0) return;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t bits = kp_load_relaxed(&r->orphans[w]);
      while (bits) {
        unsigned bit = (unsigned)__builtin_ctzll(bits);
        uint64_t m = (uint64_t)1 << bit;
        bits &= ~m;
        if (!(kp_fetch_and_acq_rel(&r->orphans[w], ~m) & m)) continue;
        kp_chunk *c = &r->chunks[w * 64 + bit];
        kp_remote_collect(c);
        if (c->used == 0) {
          kp_fetch_sub_relaxed(&orphan_count, 1);
          kp_chunk_release(c);
        } else {
          kp_fetch_or_acq_rel(&r->orphans[w], m); /* still holds live slots */
        }
      }
    }
  }
}

/* ---- Collection and teardown ------------------------------------------- */

/* Applies `fn` to every chunk the heap owns; `fn` may unlink the chunk. */
static void for_each_in_list(kp_heap *h, kp_chunk *c, void (*fn)(kp_heap *, kp_chunk *)) {
  for (kp_chunk *next; c != NULL; c = next) {
    next = c->next;
    fn(h, c);
  }
}

/* Applies `fn` to every chunk the heap owns; `fn` may unlink the chunk. */
static void heap_for_each_chunk(kp_heap *h, void (*fn)(kp_heap *, kp_chunk *)) {
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    if (h->current[cls] != &kp_empty_chunk) fn(h, h->current[cls]);
    for_each_in_list(h, h->avail[cls], fn);
    for_each_in_list(h, h->full[cls], fn);
  }
}

static void chunk_collect(kp_heap *h, kp_chunk *c) {
  kp_remote_collect(c);
  if (KP_USED_COUNT(c) != 0) {
    if (c->list == KP_LIST_FULL && chunk_has_room(c)) {
      kp_heap_list_remove(h, c);
      kp_heap_list_push(h, c, KP_LIST_AVAIL);
    }
    return;
  }
  if (h->current[c->cls] == c) h->current[c->cls] = &kp_empty_chunk;
  kp_heap_list_remove(h, c);
  kp_chunk_release(c);
}

/* Collects remote frees into every chunk of h and releases the empty ones. */
void kp_heap_collect(kp_heap *h) {
  if (h == &kp_empty_heap) return;
  heap_for_each_chunk(h, chunk_collect);
}

static void chunk_abandon(kp_heap *h, kp_chunk *c) {
  if (h->current[c->cls] == c) h->current[c->cls] = &kp_empty_chunk;
  kp_heap_list_remove(h, c);
  kp_remote_collect(c);
  if (c->used == 0) kp_chunk_release(c);
  else chunk_orphan(c);
}

static void heap_thread_exit(void *arg) {
  kp_heap *h = arg;
  if (kp_tls_heap == h) kp_tls_heap = &kp_empty_heap;
  heap_for_each_chunk(h, chunk_abandon);
  heap_slot_release(h);
}

/* Gives the calling thread a heap of its own (from the slow path). */
kp_heap *kp_heap_for_thread(void) {
  kp_heap *h = kp_tls_heap;
  if (h != &kp_empty_heap) return h;
  h = heap_slot_claim();
  if (h == NULL) return NULL;
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    h->current[cls] = &kp_empty_chunk;
    h->avail[cls] = h->full[cls] = NULL;
    /* Atomic: a remote free may still write a hint left for the heap's
     * previous thread. */
    kp_store_relaxed(&h->remote_hint[cls], 0);
  }
  h->region_hint = NULL;
  /* Published before arming the exit hook: arming may allocate. */
  kp_tls_heap = h;
  kp_os_thread_exit_init(heap_thread_exit);
  kp_os_thread_exit_arm(h);
  return h;
}
