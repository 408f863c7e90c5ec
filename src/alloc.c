/* The bucket tier's allocation slow path: refill the current chunk, or
 * find, adopt or obtain another one. */
#include "internal.h"

/* Slots are threaded onto the free list a few at a time, so a chunk's
 * pages are touched only as they are used (carve_bytes). */
#define KP_CARVE_BYTES 4096u
#define KP_FILL_CARVE_BYTES 16384u
/* Local lists shorter than this are lengthened by a carve at refill. */
#define KP_REFILL_MIN 8u
/* Other threads' frees waiting on a current chunk that make it a stream
 * rather than a few stray frees: a full batch. */
#define KP_STREAM_MIN KP_BATCH_MAX

void kp_chunk_init_bucket(kp_chunk *c, kp_heap *h, unsigned cls) {
  c->cls = (uint8_t)cls;
  c->slot_size = kp_class_size[cls];
  c->capacity = (uint32_t)(kp_chunk_bytes(c) / c->slot_size);
  __atomic_store_n(&c->carved, 0, __ATOMIC_RELAXED);
  c->used = 0;
  c->free = c->local_free = NULL;
  c->free_count = 0;
  c->next = c->prev = NULL;
  kp_store_relaxed(&c->remote, 0);
  kp_store_relaxed(&c->last_owner, NULL);
  kp_store_relaxed(&c->trimmed, 0);
  kp_store_relaxed(&c->owner, kp_resting_token(h)); /* until it is made current */
  kp_store_release(&c->kind, KP_CHUNK_BUCKET);
}

/* A page of slots at a time for a chunk in steady use, so that at most a
 * page of each current chunk waits carved ahead of its use; four pages for
 * one being filled (its owner has not freed into it since it became
 * current: a structure being built, or a producer's chunk under the stream
 * rule), whose slots will all be used.  A chunk's first carve is a page
 * in any case: a thread that holds a few blocks stays small. */
static uint32_t carve_bytes(const kp_chunk *c) {
  return c->carved != 0 && c->owner_frees == KP_OWNER_FREES_NONE ? KP_FILL_CARVE_BYTES : KP_CARVE_BYTES;
}

static bool chunk_carve(kp_heap *h, kp_chunk *c) {
  uint32_t n = c->capacity - c->carved;
  if (n == 0) return false;
  uint32_t batch = carve_bytes(c) / c->slot_size;
  if (batch == 0) batch = 1;
  if (n > batch) n = batch;
  char *first = kp_chunk_start(c) + (size_t)c->carved * c->slot_size;
  char *p = first;
  for (uint32_t i = 1; i < n; i++, p += c->slot_size) {
    ((kp_block *)p)->next = (kp_block *)(p + c->slot_size);
    ((kp_block *)p)->tag = (uintptr_t)c;
  }
  ((kp_block *)p)->next = c->free;
  ((kp_block *)p)->tag = (uintptr_t)c;
  c->free = (kp_block *)first;
  __atomic_store_n(&c->carved, c->carved + n, __ATOMIC_RELAXED); /* read by other threads' frees [TAIL-1] */
  c->used += (int32_t)n; /* a current chunk counts its free list */
  /* Carved again past its trimmed tail: every slot it handed out carries
   * a free tag when free again, and h's frees take the hit path. */
  if (kp_load_relaxed(&c->trimmed) && c->carved >= c->trim_mark) kp_chunk_untrim(h, c);
  return true;
}

/* A resting chunk of h gives up the free slots at the end of its carved
 * part: the carved part ends after its last slot not on its lists (live,
 * or on the remote list), the slots after it leave the lists, and [*from,
 * *to) (chunk offsets, whole pages) is what held only them, for the
 * caller to purge.  False, changing nothing, when that is less than
 * KP_TAIL_MIN.  The chunk is then trimmed until carved that far again
 * (*was_trimmed: it already was): a second free of one of those slots
 * finds no free tag, so h's frees into it take the checked way
 * (kp_chunk_token), and other threads' are checked too [TAIL-1]. */
#define KP_TAIL_MIN ((size_t)16 << 10)
#define KP_MAX_CHUNK_SLOTS (KP_UNIT_SIZE / 16) /* 1-unit chunks of 16 B; bigger chunks hold bigger slots */
bool kp_chunk_uncarve_tail(kp_heap *h, kp_chunk *c, size_t *from, size_t *to, bool *was_trimmed) {
  if (c->capacity > KP_MAX_CHUNK_SLOTS) return false;
  uint64_t listed[KP_MAX_CHUNK_SLOTS / 64] = {0};
  char *start = kp_chunk_start(c);
  kp_block *lists[2] = {c->free, c->local_free};
  uint32_t seen = 0;
  for (int i = 0; i < 2; i++)
    for (kp_block *b = lists[i]; b != NULL; b = b->next) {
      /* Entries are checked before they index the bitmap: a block
       * written after its free would otherwise name any slot. */
      size_t offset = (size_t)((char *)b - start);
      if (offset >= (size_t)c->carved * c->slot_size || !kp_slot_boundary(c->cls, offset) ||
          b->tag != (uintptr_t)c || ++seen > c->carved)
        kp_corrupt("free list entry outside its chunk (a block written after free?)", b);
      uint32_t index = kp_slot_index(c, b);
      listed[index / 64] |= (uint64_t)1 << (index % 64);
    }
  /* The last carved slot not listed: there is one, since `used` > 0. */
  uint32_t end = c->carved;
  while (end > 0 && (listed[(end - 1) / 64] >> ((end - 1) % 64) & 1)) end--;
  size_t page = kp_page_size();
  size_t lo = ((size_t)end * c->slot_size + page - 1) & ~(page - 1);
  size_t hi = ((size_t)c->carved * c->slot_size + page - 1) & ~(page - 1);
  if (hi > kp_chunk_bytes(c)) hi = kp_chunk_bytes(c);
  if (hi <= lo || hi - lo < KP_TAIL_MIN) return false;
  for (int i = 0; i < 2; i++) {
    kp_block **link = i == 0 ? &c->free : &c->local_free;
    while (*link != NULL) {
      if (kp_slot_index(c, *link) >= end) *link = (*link)->next;
      else link = &(*link)->next;
    }
  }
  c->free_count = kp_list_length(c->free);
  *was_trimmed = kp_load_relaxed(&c->trimmed) != 0;
  if (!*was_trimmed) {
    c->trim_mark = c->carved;
    kp_store_release(&c->trimmed, 1); /* before the purge zeroes the tags */
    kp_store_relaxed(&c->owner, kp_chunk_token(h, c, false));
  }
  __atomic_store_n(&c->carved, end, __ATOMIC_RELAXED); /* `used` stays: the slots left the lists and the carved part alike [USED-1] */
  *from = lo;
  *to = hi;
  return true;
}

/* c, trimmed, has no live slot and is going back: the slots between its
 * cut and how far it had been carved get their free tags again, so that
 * a second free of one of them, once a chunk is built on this memory
 * again (from the recycle cache, or as dirty units), is still taken for
 * a double free [TAIL-1].  The pages come back with the writes: a chunk
 * that goes back warm is resident in any case. */
void kp_chunk_retag_tail(kp_chunk *c) {
  char *start = kp_chunk_start(c);
  for (uint32_t i = c->carved; i < c->trim_mark; i++)
    ((kp_block *)(start + (size_t)i * c->slot_size))->tag = (uintptr_t)c;
  kp_store_relaxed(&c->trimmed, 0);
}

/* c's slots past its cut have their free tags again (carved once more,
 * or the purge that made it trimmed failed): its frees can take the hit
 * path again. */
void kp_chunk_untrim(kp_heap *h, kp_chunk *c) {
  kp_store_relaxed(&c->trimmed, 0);
  kp_store_relaxed(&c->owner, kp_chunk_token(h, c, h->current[c->cls] == c));
}

/* A list about to be handed out must point into its chunk; at the full
 * check level every entry is checked. */
static void check_list(kp_chunk *c, kp_block *list) {
  char *start = kp_chunk_start(c);
  size_t bytes = kp_chunk_bytes(c);
  bool all = kp_load_relaxed(&kp_check_level) >= KP_CHECK_FULL;
  for (uint32_t n = 0; list != NULL; list = list->next) {
    size_t offset = (size_t)((char *)list - start);
    if (offset >= bytes || !kp_slot_boundary(c->cls, offset) || list->tag != (uintptr_t)c)
      kp_corrupt("free list entry outside its chunk (a block written after free?)", list);
    if (!all) return;
    if (++n > c->capacity) kp_corrupt("free list longer than its chunk (a double free?)", c);
  }
}

/* Whether the current chunk c should give way to another owned chunk of
 * its class before it carves more: the oldest on the avail list, if its
 * lists hold a quarter of a carve or more.  Slots freed lately are
 * still in the cache, where a carve touches fresh memory; and a working
 * set churned at random keeps the part of c not yet carved untouched. */
static bool reuse_before_carve(const kp_heap *h, const kp_chunk *c) {
  const kp_chunk *t = h->avail_tail[c->cls];
  if (t == NULL) return false;
  uint32_t local = t->carved - (uint32_t)t->used; /* [USED-1] */
  uint32_t want = KP_CARVE_BYTES / 4 / c->slot_size;
  return local >= (want != 0 ? want : 1);
}

/* Puts slots on the current chunk's empty free list, if it has any to
 * give; false also when another chunk's frees come first (the chunk then
 * has slots left to carve). */
static bool chunk_refill(kp_heap *h, kp_chunk *c) {
  /* The owner's frees into c since the last look: counted, and the count
   * restarted (still marking that the owner frees into c). */
  if (c->owner_frees < KP_OWNER_FREES_NONE - 1) {
    kp_heap_note_frees(h, (uint32_t)(KP_OWNER_FREES_NONE - 1 - c->owner_frees), 0);
    c->owner_frees = KP_OWNER_FREES_NONE - 1;
  }
  if (c->local_free != NULL) {
    /* The local list holds every carved slot not counted in `used`. */
    uint32_t taken = c->carved - (uint32_t)(c->used - KP_CURRENT_BIAS);
    kp_heap_note_frees(h, taken, 0);
    c->free = c->local_free;
    c->local_free = NULL;
    /* The owner has freed into it: it is parked if it runs out [PARK-1]. */
    if (c->owner_frees == KP_OWNER_FREES_NONE) c->owner_frees--;
    /* Every slot is now live, on `free` or on the remote list [USED-1]. */
    c->used = (int32_t)c->carved + KP_CURRENT_BIAS;
    check_list(c, c->free);
    /* A short list (a block freed and allocated in turn) would bring the
     * next malloc straight back here: lengthen it while slots are left. */
    if (taken < KP_REFILL_MIN) chunk_carve(h, c);
    return true;
  }
  /* A chunk its owner has not freed into since it became current, with a
   * stream of other threads' frees waiting (a producer's, whose blocks a
   * consumer frees), carves; carved to its end, it is given up rather than
   * reused, and the frees bring it back whole, to be carved again.  Carved
   * slots are lines written in address order, while each pop of a freed
   * slot would wait for its link, written by the freeing thread, to cross
   * between cores (docs/design.md, the stream rule). */
  if (c->owner_frees == KP_OWNER_FREES_NONE &&
      KP_REMOTE_COUNT(kp_load_relaxed(&c->remote)) >= KP_STREAM_MIN)
    return chunk_carve(h, c);
  uint32_t away = kp_remote_collect(c, true);
  if (away != 0) {
    kp_heap_note_frees(h, 0, away);
    return true;
  }
  if (c->carved < c->capacity && reuse_before_carve(h, c)) return false;
  return chunk_carve(h, c);
}

/* The current chunk has no slot on its lists.  If it has slots left to
 * carve, another chunk's frees come first: it goes on the avail list's
 * newest end, taken again once the older ones are used.  If its owner has
 * been freeing into it, it is parked (the owner will free into it again);
 * otherwise it is detached until frees give it slots (or released, if
 * they already have): a producer whose blocks other threads free gets its
 * memory back without looking at the chunk again [PARK-1]. */
static void retire_current(kp_heap *h, unsigned cls) {
  kp_chunk *c = h->current[cls];
  bool owner_frees = c->owner_frees != KP_OWNER_FREES_NONE;
  kp_heap_unset_current(h, cls);
  if (c->carved < c->capacity) kp_heap_avail_push(h, c);
  else if (owner_frees) kp_heap_park(h, c);
  else kp_chunk_detach(h, c);
}

void *kp_malloc_small_slow(size_t size, kp_heap *h) {
  unsigned cls = kp_size_class(size);
  if (unlikely(h == &kp_empty_heap || h == &kp_exited_heap)) {
    h = kp_heap_for_thread();
    if (h == NULL) return kp_malloc_late(size, 0, false);
  }
  if (h->batched) kp_remote_flush_all(h);
  if (--h->tick_countdown == 0) kp_release_tick(h);
  if (unlikely(h->collect_due)) {
    h->collect_due = false;
    kp_heap_collect_resting(h);
    kp_release_idle_tails(h, false);
  }
  kp_chunk *given_up = NULL;
  for (;;) {
    kp_chunk *c = h->current[cls];
    if (c != &kp_empty_chunk) {
      if (c->free == NULL) h->hosted[cls] = 0; /* every slot it kept went out [HOST-1] */
      if (c->free != NULL || chunk_refill(h, c)) return kp_take_slot(c, c->free);
      retire_current(h, cls);
      given_up = c;
    }
    c = h->avail_tail[cls];
    if (c != NULL) kp_heap_avail_remove(h, c);
    else if ((c = kp_heap_take_parked(h, cls)) == NULL) c = kp_adopt_reusable(h, cls, given_up);
    if (c == NULL) {
      bool zeroed;
      c = kp_chunk_obtain(h, kp_class_units[cls], &zeroed);
      if (c == NULL) return kp_fallback_alloc(size, 0, false);
      kp_chunk_init_bucket(c, h, cls);
    }
    kp_heap_set_current(h, cls, c);
  }
}
