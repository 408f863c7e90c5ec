/* Per-thread heaps: creation, the owned-chunk lists, thread exit.
 *
 * A thread starts on kp_empty_heap, whose classes all point at a chunk
 * with no free slot, so its first allocation falls into the slow path,
 * which gives it a heap of its own [HEAP-2].  Heaps live in slabs that
 * are never unmapped and are recycled through a per-slab bitmap, so a
 * stale pointer to a heap always points at a heap-shaped object [HEAP-1].
 *
 * A heap owns the chunks it allocates from: one current chunk per class
 * and a list of others with free slots.  A chunk that runs out of slots is
 * detached (remote.c): no heap owns it until a free gives it slots again.
 * When a thread exits, its empty chunks are retired and the others are
 * detached; other threads adopt them.  A thread that allocates after its
 * heap was torn down (a later thread-specific-data destructor) is served
 * by a heap made and torn down for that one request, so nothing is left
 * behind when no destructor round follows. */
#include "internal.h"

#include <string.h>

kp_chunk kp_empty_chunk;
/* Their tokens, resting or not, with or without the low bit, are no
 * chunk's owner (not 0, not KP_OWNER_NONE, no address a thread's id or a
 * heap could have) and their mapping mark no radix entry's (it lies
 * outside the mark's bits), so a thread without a heap owns nothing. */
#define KP_EMPTY_HEAP_INIT                                                                          \
  {                                                                                                 \
    .current = {[0 ... KP_NUM_CLASSES - 1] = &kp_empty_chunk}, .token = 64,                         \
    .dedicated_mismatch = KP_OWNER_NONE, .hot_slot = &kp_l1_no_slot, .hot_head_value = 1,          \
    .map_hint = 1, .head_mark = 1,                                                                  \
    .current_at = {[0 ... KP_DIRECT_MAX] = offsetof(kp_heap, current)}                              \
  }
kp_heap kp_empty_heap = KP_EMPTY_HEAP_INIT;
kp_heap kp_exited_heap = KP_EMPTY_HEAP_INIT;
KP_THREAD_LOCAL kp_heap *kp_tls_heap = &kp_empty_heap;

#define KP_HEAPS_PER_SLAB 64

typedef struct kp_heap_slab {
  _Atomic uint64_t in_use;
  struct kp_heap_slab *next;
  unsigned number;
  kp_heap heaps[KP_HEAPS_PER_SLAB];
} kp_heap_slab;

static _Atomic(kp_heap_slab *) slab_list;
static _Atomic unsigned slab_count;
static _Atomic unsigned live_heaps;
static _Atomic size_t heaps_made;

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
    kp_heap_slab *fresh;
    if (!kp_rt_may_map() || kp_os_map(NULL, sizeof(kp_heap_slab), (void **)&fresh) != 0) return NULL;
    fresh->number = kp_fetch_add_relaxed(&slab_count, 1);
    kp_heap_slab *head = kp_load_relaxed(&slab_list);
    do {
      fresh->next = head;
    } while (!kp_cas_weak_acq_rel(&slab_list, &head, fresh));
  }
}

static void heap_slot_release(kp_heap *h) {
  kp_fetch_and_acq_rel(&h->slab->in_use, ~((uint64_t)1 << h->slab_index));
}

unsigned kp_heap_id(const kp_heap *h) { return h->slab->number * KP_HEAPS_PER_SLAB + h->slab_index; }
unsigned kp_heaps_live(void) { return kp_load_relaxed(&live_heaps); }
size_t kp_heaps_made(void) { return kp_load_relaxed(&heaps_made); }

/* Applies fn to every heap in use (for the statistics: the heaps may be
 * changing under it; slabs are never unmapped, so each read is safe). */
void kp_heaps_for_each(void (*fn)(const kp_heap *h, void *arg), void *arg) {
  for (kp_heap_slab *s = kp_load_acquire(&slab_list); s != NULL; s = s->next) {
    uint64_t in_use = kp_load_relaxed(&s->in_use);
    for (unsigned i = 0; i < KP_HEAPS_PER_SLAB; i++)
      if (in_use & ((uint64_t)1 << i)) fn(&s->heaps[i], arg);
  }
}

static void heap_init(kp_heap *h) {
  for (size_t size = 0; size <= KP_DIRECT_MAX; size++)
    h->current_at[size] = (uint16_t)(offsetof(kp_heap, current) + kp_size_class(size) * sizeof(kp_chunk *));
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    h->current[cls] = &kp_empty_chunk;
    h->avail[cls] = h->avail_tail[cls] = NULL;
    h->full[cls] = NULL;
    h->full_count[cls] = 0;
    h->hosted[cls] = 0;
  }
  kp_assert("CUR-2", (kp_os_thread_id() & 7) == 0);
  h->token = kp_owner_token();
  h->dedicated_mismatch = kp_os_thread_id_xor(kp_dedicated_token(h));
  h->map_hint = (((uintptr_t)kp_heap_id(h) % (KP_MAP_HEAP_MASK >> KP_MAP_HEAP_SHIFT)) + 1) << KP_MAP_HEAP_SHIFT;
  h->head_mark = kp_addr_mark(h->map_hint);
  h->region_hint = NULL;
  h->exiting = false;
  h->collect_due = false;
  h->home_frees = h->away_frees = 0;
  h->foreign_frees = h->orphaned_frees = 0;
  h->batched = 0;
  memset(h->batch, 0, sizeof h->batch);
  memset(&h->l1, 0, sizeof h->l1);
  h->hot = NULL;
  kp_l1_hot_clear(h);
  h->hot_takes = 0;
  h->drain_seen = kp_drain_now();
  h->top_seen = kp_load_relaxed(&kp_cache_top_epoch); /* no place yet to give up */
  h->tick_countdown = KP_TICK_EVERY;
}

/* ---- Owned chunks ------------------------------------------------------ */

/* The avail list is taken from its oldest end: a chunk that has been on it
 * longest has gathered the most of its owner's frees, so it serves the
 * longest before the next change of current chunk. */
void kp_heap_avail_push(kp_heap *h, kp_chunk *c) {
  kp_chunk **head = &h->avail[c->cls];
  c->rest_tick = kp_drain_now(); /* resting since [TAIL-1] */
  c->tail_used = -1;            /* its tail not looked at yet */
  c->prev = NULL;
  c->next = *head;
  if (*head) (*head)->prev = c;
  else h->avail_tail[c->cls] = c;
  *head = c;
}

void kp_heap_avail_remove(kp_heap *h, kp_chunk *c) {
  if (c->prev) c->prev->next = c->next;
  else h->avail[c->cls] = c->next;
  if (c->next) c->next->prev = c->prev;
  else h->avail_tail[c->cls] = c->prev;
  c->next = c->prev = NULL;
}

/* ---- Parked chunks -----------------------------------------------------
 * A current chunk that runs out of slots while its owner keeps freeing
 * into it (one thread churning a working set larger than a chunk) is
 * parked: kept owned, on the heap's full list, with `used` set to 1 and
 * its real count in `parked_used`, so the owner's next free into it takes
 * the slow path (its `used` reaches 0), which moves it back to the avail
 * list.  Parking and unparking touch only the owner's fields: no atomic,
 * where detaching and adopting back cost a CAS each.  Other threads' frees
 * reach a parked chunk's remote list as for any owned chunk; the owner
 * looks at its parked chunks' remote words before taking a new chunk.  At
 * most KP_FULL_MAX chunks per class are parked; parking one more detaches
 * the oldest, so what an owner that goes idle holds back is bounded
 * [PARK-1]. */
#define KP_FULL_MAX 4

void kp_heap_park(kp_heap *h, kp_chunk *c) {
  unsigned cls = c->cls;
  if (h->full_count[cls] >= KP_FULL_MAX) {
    kp_chunk *old = h->full[cls];
    while (old->next != NULL) old = old->next;
    kp_heap_unpark(h, old);
    kp_chunk_detach(h, old);
  }
  c->parked_used = c->used;
  c->used = 1;
  c->flags |= KP_CHUNK_PARKED;
  kp_chunk **head = &h->full[cls];
  c->prev = NULL;
  c->next = *head;
  if (*head) (*head)->prev = c;
  *head = c;
  h->full_count[cls]++;
}

/* Takes c off the full list with its real `used` back; the caller puts it
 * on a list, makes it current, detaches or retires it. */
void kp_heap_unpark(kp_heap *h, kp_chunk *c) {
  if (c->prev) c->prev->next = c->next;
  else h->full[c->cls] = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
  h->full_count[c->cls]--;
  c->used = c->parked_used - (1 - c->used); /* owner frees since parking */
  c->flags &= (uint8_t)~KP_CHUNK_PARKED;
}

/* A parked chunk of class cls that other threads' frees gave slots to,
 * unparked with those slots taken; NULL if none has any. */
kp_chunk *kp_heap_take_parked(kp_heap *h, unsigned cls) {
  for (kp_chunk *c = h->full[cls]; c != NULL; c = c->next) {
    if (!kp_remote_pending(c)) continue;
    kp_heap_unpark(h, c);
    kp_heap_note_frees(h, 0, kp_remote_collect(c, false));
    return c;
  }
  return NULL;
}

void kp_heap_set_current(kp_heap *h, unsigned cls, kp_chunk *c) {
  kp_assert("CUR-1", h->current[cls] == &kp_empty_chunk && c->cls == cls);
  kp_assert("PARK-1", !(c->flags & KP_CHUNK_PARKED));
  kp_assert("HOST-1", h->hosted[cls] == 0); /* unset (or never set) cleared it */
  c->owner_frees = KP_OWNER_FREES_NONE;
  /* The count, not a walk: a list taken from other threads' frees may be
   * long, and its slots are in their caches. */
  c->used += KP_CURRENT_BIAS + (int32_t)c->free_count;
  kp_store_relaxed(&c->owner, kp_chunk_token(h, c, true));
  h->current[cls] = c;
}

void kp_heap_unset_current(kp_heap *h, unsigned cls) {
  kp_chunk *c = h->current[cls];
  kp_assert("CUR-2", c->owner_frees > 0 && c->owner_frees <= KP_OWNER_FREES_NONE);
  /* Slots of other chunks go back to them: `used` counts this chunk's own. */
  if (h->hosted[cls] != 0) {
    h->hosted[cls] = 0;
    if (c->free != NULL) kp_remote_unhost(h, c);
  }
  /* Mostly empty: a chunk gives way when its lists ran out. */
  c->free_count = kp_list_length(c->free);
  c->used -= KP_CURRENT_BIAS + (int32_t)c->free_count;
  kp_store_relaxed(&c->owner, kp_chunk_token(h, c, false));
  h->current[cls] = &kp_empty_chunk;
}

/* Applies `fn` to every chunk the heap owns; `fn` may unlink the chunk. */
static void heap_for_each_chunk(kp_heap *h, void (*fn)(kp_heap *, kp_chunk *)) {
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    if (h->current[cls] != &kp_empty_chunk) fn(h, h->current[cls]);
    for (kp_chunk *next, *c = h->avail[cls]; c != NULL; c = next) {
      next = c->next;
      fn(h, c);
    }
    for (kp_chunk *next, *c = h->full[cls]; c != NULL; c = next) {
      next = c->next;
      fn(h, c);
    }
  }
}

/* Takes the chunk out of the heap's hands (current, avail or full list). */
static void heap_unlink(kp_heap *h, kp_chunk *c) {
  if (h->current[c->cls] == c) kp_heap_unset_current(h, c->cls);
  else if (c->flags & KP_CHUNK_PARKED) kp_heap_unpark(h, c);
  else kp_heap_avail_remove(h, c);
}

/* Retires the chunk if no slot of it is live (the current one too). */
static void chunk_collect(kp_heap *h, kp_chunk *c) {
  if (c->flags & KP_CHUNK_PARKED) {
    kp_heap_unpark(h, c);
    kp_remote_collect(c, false);
    if (c->used == 0) kp_chunk_retire(h, c);
    else if (kp_chunk_has_room(c)) kp_heap_avail_push(h, c);
    else kp_heap_park(h, c);
    return;
  }
  bool current = h->current[c->cls] == c;
  kp_remote_collect(c, current);
  if (current) kp_heap_unset_current(h, c->cls);
  if (c->used == 0) {
    if (!current) kp_heap_avail_remove(h, c);
    kp_chunk_retire(h, c);
  } else if (current) {
    kp_heap_set_current(h, c->cls, c);
  }
}

/* Collects remote frees into every chunk of h and retires the empty ones
 * (the current ones included). */
void kp_heap_collect(kp_heap *h) {
  if (h == &kp_empty_heap || h == &kp_exited_heap) return;
  kp_remote_flush_all(h);
  heap_for_each_chunk(h, chunk_collect);
}

/* The resting chunks (avail and parked) that other threads freed slots
 * into: their remote lists are taken, and those with no live slot left are
 * retired.  Without this a chunk whose last slots another thread freed
 * stays whole with its owner until it is made current again, which may be
 * never: the owner counts those slots as out until it takes them [REST-1]. */
static void collect_pending(kp_heap *h, kp_chunk *list) {
  for (kp_chunk *next, *c = list; c != NULL; c = next) {
    next = c->next;
    if (kp_remote_pending(c)) chunk_collect(h, c);
  }
}

void kp_heap_collect_resting(kp_heap *h) {
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    collect_pending(h, h->avail[cls]);
    /* A parked chunk given slots moves to the avail list (or is retired). */
    collect_pending(h, h->full[cls]);
  }
}

static void chunk_retoken(kp_heap *h, kp_chunk *c) {
  kp_store_relaxed(&c->owner, kp_chunk_token(h, c, h->current[c->cls] == c));
}

/* Makes the heap's chunks carry its current token (after a change of
 * check level). */
void kp_heap_retoken(kp_heap *h) {
  if (h == &kp_empty_heap || h == &kp_exited_heap) return;
  h->token = kp_owner_token();
  h->dedicated_mismatch = kp_os_thread_id_xor(kp_dedicated_token(h));
  heap_for_each_chunk(h, chunk_retoken);
}

/* ---- fork ---------------------------------------------------------------- */

/* In a forked child only the forking thread lives on, and a thread made
 * later may reuse another parent thread's thread id.  Chunks owned by
 * those parent threads get an owner token no thread has, so a free of one
 * of their slots goes the remote way and never touches lists nobody
 * keeps.  (Their memory stays with them: nobody can know what the dead
 * threads' lists hold.) */
static void heaps_after_fork(void) {
  kp_heap *h = kp_heap_if_any();
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned i = 1; i < KP_UNITS_PER_REGION; i++) {
      kp_chunk *c = &r->chunks[i];
      uintptr_t owner = kp_load_relaxed(&c->owner);
      if (owner != 0 && (h == NULL || !kp_heap_owns_token(h, owner)) &&
          kp_load_relaxed(&c->kind) == KP_CHUNK_BUCKET)
        kp_store_relaxed(&c->owner, KP_OWNER_NONE);
    }
  }
}

/* ---- Thread exit ------------------------------------------------------- */

static void chunk_abandon(kp_heap *h, kp_chunk *c) {
  heap_unlink(h, c);
  kp_remote_collect(c, false);
  if (c->used == 0) kp_chunk_retire(h, c);
  else kp_chunk_detach(h, c);
}

static void heap_teardown(kp_heap *h) {
  h->exiting = true;
  kp_remote_flush_all(h);
  heap_for_each_chunk(h, chunk_abandon);
  kp_cache_flush_l1(h, !kp_thread_exit_reclaim(), 0);
  if (KP_DEBUG) kp_debug_validate();
  kp_fetch_sub_relaxed(&live_heaps, 1);
  heap_slot_release(h);
}

static void heap_thread_exit(void *arg) {
  kp_heap *h = arg;
  if (kp_tls_heap != h) return; /* not this thread's (a forked child's copy) */
  heap_teardown(h);
  kp_tls_heap = &kp_exited_heap;
}

static kp_heap *heap_create(void) {
  kp_heap *h = heap_slot_claim();
  if (h == NULL) return NULL;
  heap_init(h);
  kp_fetch_add_relaxed(&live_heaps, 1);
  kp_fetch_add_relaxed(&heaps_made, 1);
  kp_cache_update_share(h);
  return h;
}

/* Gives the calling thread a heap of its own (from a slow path).  NULL
 * when the thread's heap is already torn down or none can be made. */
kp_heap *kp_heap_for_thread(void) {
  kp_heap *h = kp_tls_heap;
  if (h != &kp_empty_heap) return h == &kp_exited_heap ? NULL : h;
  h = heap_create();
  if (h == NULL) return NULL;
  /* Published before arming the exit hook: arming may allocate [INIT-2]. */
  kp_tls_heap = h;
  static _Atomic int fork_hook;
  if (kp_load_relaxed(&fork_hook) == 0 && atomic_exchange(&fork_hook, 1) == 0) kp_os_atfork_child(heaps_after_fork);
  kp_os_thread_exit_init(heap_thread_exit);
  kp_os_thread_exit_arm(h);
  return h;
}

/* The calling thread's heap, or NULL if it has none (never made one, or
 * torn down). */
kp_heap *kp_heap_if_any(void) {
  kp_heap *h = kp_tls_heap;
  return h == &kp_empty_heap || h == &kp_exited_heap ? NULL : h;
}

/* An allocation after the thread's heap was torn down: a heap made for
 * this one request and torn down again, so the block's chunk is left
 * detached for other threads, as at thread exit. */
void *kp_malloc_late(size_t size, size_t align, bool zero) {
  kp_heap *h = heap_create();
  if (h == NULL) return kp_fallback_alloc(size, align, zero);
  kp_tls_heap = h;
  void *p = align ? kp_memalign(align, size) : zero ? kp_calloc(1, size) : kp_malloc(size);
  kp_tls_heap = &kp_exited_heap;
  heap_teardown(h);
  return p;
}
