/* Cross-thread free, and chunks that no heap owns.
 *
 * Every bucket chunk has one atomic word, `remote`: the head of a list of
 * slots freed by threads other than its owner, the number of slots on that
 * list, and a DETACHED flag.  Only three things change it:
 *
 *  - a push: a thread that frees slots of a chunk it does not own links
 *    them into a batch (per destination chunk, in its own heap) and
 *    publishes the whole batch with one CAS that adds it to the list and
 *    its length to the count [REM-1];
 *  - a take: the owner (or a thread taking the chunk over) swaps the word
 *    for an empty one and gets the whole list at once, with its length, so
 *    there is no ABA and no walk [REM-1];
 *  - a detach: the owner gives the chunk up, setting DETACHED, after
 *    recording how many of its slots are out (`detached_used`) [DET-1].
 *
 * A chunk is detached when its owner has no slot left in it (or exits).
 * From then on every free of its slots is a push, and the count only
 * grows, so the push that makes the count equal `detached_used` has freed
 * the last live slot: that thread takes the chunk (a take that clears
 * DETACHED, which only one thread can win) and releases it.  Memory comes
 * back without the owner's help [DET-2].  A push that gives a detached
 * chunk its first free slot marks it in its region's `reusable` bitmap of
 * its class, where threads that need a chunk of that class find and adopt
 * it (a take that clears DETACHED) [DET-3]; the thread that detached it
 * also takes it back when it frees one of its slots, if no other thread's
 * frees wait on its remote list.  Whoever wins the take owns the chunk;
 * the bits are only hints.
 *
 * A batch holds at most KP_BATCH_MAX slots of one chunk and a heap at most
 * KP_BATCH_SLOTS batches.  They are published when full, when another
 * chunk needs the batch's place, whenever the thread allocates on a slow
 * path, at trim and at thread exit.  A thread that stops allocating and
 * freeing keeps its batches until it exits or trims: at most
 * KP_BATCH_SLOTS chunks held back, KP_BATCH_MAX slots each.
 *
 * A slot of a detached chunk freed by a thread that allocates its class
 * skips all this: the thread keeps it on its current chunk's free list
 * for its own next allocation, about 256 KiB' worth per class
 * (kp_class_host_max), and sends
 * what is left of them back when that chunk stops being current
 * [HOST-1].  So does a slot of a live owner's chunk, freed by a thread
 * whose own blocks often die in other threads (kp_heap_shares_blocks). */
#include "internal.h"

static _Atomic uint32_t reusable_count[KP_NUM_CLASSES];

static kp_block *word_head(uint64_t w) { return KP_REMOTE_HEAD(w); }
static uint64_t make_word(kp_block *head, uint32_t count, uint64_t flags) {
  return flags | ((uint64_t)count << KP_REMOTE_PTR_BITS) | (uint64_t)(uintptr_t)head;
}

bool kp_chunk_has_room(const kp_chunk *c) {
  return c->free != NULL || c->local_free != NULL || c->carved < c->capacity;
}

/* `cls` is read by the caller while the chunk cannot change class. */
static void mark_reusable(kp_chunk *c, unsigned cls) {
  kp_region *r = kp_region_of(c);
  unsigned i = kp_chunk_index(r, c);
  uint64_t m = (uint64_t)1 << (i % 64);
  if (!(kp_fetch_or_acq_rel(&r->reusable[cls][i / 64], m) & m)) kp_fetch_add_relaxed(&reusable_count[cls], 1);
}

size_t kp_remote_reusable_count(void) {
  size_t n = 0;
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) n += kp_load_relaxed(&reusable_count[cls]);
  return n;
}

uint32_t kp_list_length(const kp_block *b) {
  uint32_t n = 0;
  for (; b != NULL; b = b->next) n++;
  return n;
}

/* Moves the slots of a taken remote word onto the chunk's own lists.
 * `current`: the chunk is its owner's current one, whose `used` counts
 * its free list [USED-1]. */
static void take_remote(kp_chunk *c, uint64_t w, bool current) {
  kp_block *list = word_head(w);
  uint32_t n = KP_REMOTE_COUNT(w);
  if (list == NULL) return;
  if (n > c->capacity) kp_corrupt("remote free list longer than its chunk (a double free?)", c);
  if (!kp_is_slot_start(c, list))
    kp_corrupt("remote free list entry outside its chunk", list);
  if (c->free == NULL) {
    c->free = list;
    if (!current) {
      c->used -= (int32_t)n;
      c->free_count = n;
    }
    return;
  }
  c->used -= (int32_t)n;
  if (c->local_free == NULL) {
    c->local_free = list;
  } else {
    kp_block *tail = list;
    for (uint32_t i = 1; i < n; i++) tail = tail->next;
    tail->next = c->local_free;
    c->local_free = list;
  }
}

/* The owner takes the remote list; returns how many slots it held. */
uint32_t kp_remote_collect(kp_chunk *c, bool current) {
  if (!kp_remote_pending(c)) return 0;
  uint64_t w = kp_exchange_acq_rel(&c->remote, 0);
  kp_assert("DET-1", !(w & KP_REMOTE_DETACHED));
  take_remote(c, w, current);
  return KP_REMOTE_COUNT(w);
}

/* Takes a detached chunk: one CAS that clears DETACHED and takes the
 * list.  Fails if another thread took it first. */
static bool take_detached(kp_chunk *c, uint64_t *taken) {
  uint64_t w = kp_load_acquire(&c->remote);
  do {
    if (!(w & KP_REMOTE_DETACHED)) return false;
  } while (!kp_cas_weak_acq_rel(&c->remote, &w, 0));
  *taken = w;
  return true;
}

/* h takes over a detached chunk.  Returns false if another thread took it
 * first; otherwise h owns it (as an avail chunk or, if it has no free slot
 * at all, detached again; if every slot was free, it is retired). */
bool kp_chunk_adopt(kp_heap *h, kp_chunk *c) {
  uint64_t w;
  if (!take_detached(c, &w)) return false;
  kp_store_relaxed(&c->owner, kp_chunk_token(h, c, false));
  take_remote(c, w & ~KP_REMOTE_DETACHED, false);
  return true;
}

/* The owner gives up a chunk it no longer allocates from (not current,
 * on no list).  Returns false if the chunk turned out to be free and was
 * retired instead. */
bool kp_chunk_detach(kp_heap *h, kp_chunk *c) {
  /* Read now: once DETACHED is set, another thread may take the chunk. */
  bool room = kp_chunk_has_room(c);
  unsigned cls = c->cls;
  kp_store_relaxed(&c->last_owner, h);
  /* Release: a pusher that reads this (acquire) and then the word sees
   * the take that came before this detach (push_list). */
  kp_store_release(&c->detached_used, c->used);
  kp_store_relaxed(&c->owner, 0);
  uint64_t w = kp_load_relaxed(&c->remote);
  for (;;) {
    if ((int32_t)KP_REMOTE_COUNT(w) == c->used) {
      /* Every slot out is on the remote list: nothing is live. */
      kp_store_relaxed(&c->owner, kp_chunk_token(h, c, false));
      kp_remote_collect(c, false);
      kp_chunk_retire(h, c);
      return false;
    }
    if (kp_cas_weak_acq_rel(&c->remote, &w, w | KP_REMOTE_DETACHED)) break;
  }
  if (room || KP_REMOTE_COUNT(w) != 0) mark_reusable(c, cls);
  return true;
}

/* Adopts a detached chunk of class `cls` with slots to give, if any
 * region has one, other than `skip` (the chunk h has just given up, left
 * to the threads freeing into it); others taken on the way are kept or
 * retired. */
kp_chunk *kp_adopt_reusable(kp_heap *h, unsigned cls, const kp_chunk *skip) {
  if (kp_load_relaxed(&reusable_count[cls]) == 0) return NULL;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t bits = kp_load_relaxed(&r->reusable[cls][w]);
      while (bits) {
        unsigned bit = (unsigned)__builtin_ctzll(bits);
        uint64_t m = (uint64_t)1 << bit;
        bits &= ~m;
        kp_chunk *c = &r->chunks[w * 64 + bit];
        if (c == skip) continue; /* its mark stays */
        if (!(kp_fetch_and_acq_rel(&r->reusable[cls][w], ~m) & m)) continue;
        kp_fetch_sub_relaxed(&reusable_count[cls], 1);
        if (kp_load_relaxed(&c->kind) != KP_CHUNK_BUCKET || !kp_chunk_adopt(h, c)) continue;
        if (c->used == 0) {
          kp_chunk_retire(h, c);
        } else if (!kp_chunk_has_room(c)) {
          kp_chunk_detach(h, c); /* a stale mark: nothing to give yet */
        } else if (c->cls == cls) {
          return c;
        } else {
          kp_heap_avail_push(h, c); /* the bitmap was of an earlier life */
        }
      }
    }
  }
  return NULL;
}

/* ---- Pushing freed slots ------------------------------------------------ */

/* The last live slot of a detached chunk was just freed by this push: take
 * the chunk and release it. */
static void release_emptied(kp_chunk *c, uint64_t w) {
  if (!kp_cas_strong_acq_rel(&c->remote, &w, 0)) return; /* someone adopted it */
  c->used -= (int32_t)KP_REMOTE_COUNT(w);
  kp_assert("DET-2", c->used == 0);
  c->free = c->local_free = NULL;
  c->free_count = 0;
  kp_chunk_retire(NULL, c);
}

/* Publishes the list head..tail of n slots of chunk c. */
static void push_list(kp_chunk *c, kp_block *head, kp_block *tail, uint32_t n) {
  unsigned cls = c->cls; /* before the push: after it the chunk may be reused */
  uint32_t capacity = c->capacity;
  uint64_t w = kp_load_relaxed(&c->remote), next;
  for (;;) {
    uint32_t count = KP_REMOTE_COUNT(w) + n;
    if (count > capacity) kp_corrupt("more slots freed than a chunk holds (a double free?)", head);
    tail->next = word_head(w);
    next = make_word(head, count, w & KP_REMOTE_DETACHED);
    if (kp_cas_weak_acq_rel(&c->remote, &w, next)) break;
  }
  if (!(w & KP_REMOTE_DETACHED)) return;
  int32_t out = kp_load_acquire(&c->detached_used);
  int32_t count = (int32_t)KP_REMOTE_COUNT(next);
  if (count == out) {
    release_emptied(c, next);
  } else if (count > out && kp_load_relaxed(&c->remote) == next) {
    /* The word is still this push's, so `out` is of the detach it saw. */
    kp_corrupt("more slots freed than were live (a double free?)", head);
  } else if (KP_REMOTE_COUNT(w) == 0) {
    /* Still has live slots, of the same class.  (With count > out the
     * chunk was adopted and detached again since the push: `out` is that
     * later detach's, and the taker decides.) */
    mark_reusable(c, cls);
  }
}

static void batch_flush(kp_heap *h, kp_batch *bt) {
  kp_chunk *c = bt->chunk;
  bt->chunk = NULL;
  h->batched--;
  push_list(c, bt->head, bt->tail, bt->count);
}

void kp_remote_flush_all(kp_heap *h) {
  for (unsigned i = 0; i < KP_BATCH_SLOTS && h->batched; i++)
    if (h->batch[i].chunk != NULL) batch_flush(h, &h->batch[i]);
}

/* Frees slot b of bucket chunk c, which the calling thread does not own.
 * The caller has checked that b is a slot start not already free. */
void kp_remote_free(kp_chunk *c, kp_block *b) {
  kp_heap *h = kp_heap_for_thread();
  if (unlikely(h == NULL)) { /* no heap (torn down): publish at once */
    b->tag = (uintptr_t)c;
    push_list(c, b, b, 1);
    return;
  }
  kp_remote_free_by(h, c, b);
}

static void batch_add(kp_heap *h, kp_chunk *c, kp_block *b);

/* The same, by the thread of heap h (its own, made). */
void kp_remote_free_by(kp_heap *h, kp_chunk *c, kp_block *b) {
  b->tag = (uintptr_t)c;
  /* The thread that detached the chunk takes it back on its first free,
   * unless other threads' frees wait on its remote list: a structure torn
   * down by the thread that built it then costs one CAS per chunk, while a
   * chunk that others are emptying stays open to adoption by any thread
   * that needs its class, rather than resting unused on this thread's
   * avail list. */
  if (kp_load_relaxed(&c->last_owner) == h &&
      kp_load_relaxed(&c->remote) == KP_REMOTE_DETACHED && /* detached, the list empty */
      kp_chunk_adopt(h, c)) {
    b->next = c->local_free;
    c->local_free = b;
    if (--c->used == 0) kp_chunk_retire(h, c);
    else kp_heap_avail_push(h, c);
    return;
  }
  /* STRICT: nothing waits in a batch, so no later free pays for publishing
   * many (a bounded tail, at the cost of one CAS per free). */
  if (unlikely(kp_rt_level() == KAME_RT_STRICT)) {
    if (h->batched) kp_remote_flush_all(h);
    push_list(c, b, b, 1);
    return;
  }
  /* A slot of a detached chunk: a thread that allocates this class keeps
   * it on its current chunk's free list, and its next malloc of the class
   * hands it out again, still in this thread's cache, with no atomic
   * operation.  c still counts it out, so c cannot go away meanwhile.  A
   * slot of a chunk with a live owner is kept only by a thread whose own
   * blocks often die in other threads: where blocks travel both ways,
   * each thread keeps what reaches it.  Where most die at home, the few
   * that travel go back: kept, they would make their owner carve new
   * slots.  Where owners are short-lived (some of the slots it frees are
   * of chunks whose owner has gone), owners' slots are kept whatever their
   * owner: the owner seldom lives to reuse them [HOST-1]. */
  unsigned cls = c->cls;
  kp_chunk *cur = h->current[cls];
  if (cur != &kp_empty_chunk && !h->exiting && kp_load_relaxed(&kp_check_level) < KP_CHECK_FULL) {
    bool orphaned = kp_load_relaxed(&c->owner) == 0;
    if (++h->foreign_frees > (1u << 12)) {
      h->foreign_frees >>= 1;
      h->orphaned_frees >>= 1;
    }
    h->orphaned_frees += orphaned;
    if (h->hosted[cls] < kp_class_host_max[cls] && (orphaned || kp_heap_shares_blocks(h))) {
      b->next = cur->free;
      cur->free = b;
      h->hosted[cls]++;
      return;
    }
  }
  batch_add(h, c, b);
}

/* Adds slot b of chunk c to the heap's batch for c. */
static void batch_add(kp_heap *h, kp_chunk *c, kp_block *b) {
  kp_batch *bt = &h->batch[((uintptr_t)c >> 7) % KP_BATCH_SLOTS];
  if (bt->chunk == c) {
    b->next = bt->head;
    bt->head = b;
    if (++bt->count >= KP_BATCH_MAX) batch_flush(h, bt);
    return;
  }
  if (bt->chunk != NULL) batch_flush(h, bt);
  b->next = NULL;
  bt->chunk = c;
  bt->head = bt->tail = b;
  bt->count = 1;
  h->batched++;
}

/* Sends the slots of other chunks on c's free list (c is h's current
 * chunk, about to stop being so) back to their chunks [HOST-1]. */
void kp_remote_unhost(kp_heap *h, kp_chunk *c) {
  kp_block **link = &c->free;
  while (*link != NULL) {
    kp_block *b = *link;
    if (b->tag == (uintptr_t)c) {
      link = &b->next;
      continue;
    }
    *link = b->next;
    batch_add(h, (kp_chunk *)b->tag, b);
  }
  kp_remote_flush_all(h);
}
