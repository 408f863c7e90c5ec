/* The check level, the reports of misuse, and the validity walker.
 *
 * Level 1 (the default) catches, at no measurable cost: a double free of
 * any block (same thread or not), a free of a pointer into the pool's
 * memory that is not a live block, except an interior pointer of a bucket
 * slot freed by the thread that owns its chunk, and free lists that point
 * outside their chunk.  Each is reported on stderr, naming the pointer and
 * what is wrong, and the process aborts.  Level 2 also sends every free
 * of a bucket slot through the full classification (catching that last
 * case) and checks whole free lists before they are used.  Level 0 ignores
 * a bad pointer instead of aborting (the free does nothing).  Corruption
 * of the pool's own structures aborts at every level. */
#include "internal.h"

#include <string.h>

_Atomic int kp_check_level = KP_CHECK_ABORT;
static _Atomic size_t invalid_pointers;
size_t kp_stat_invalid_pointers(void) { return kp_load_relaxed(&invalid_pointers); }

static void say(const char *s) { kp_os_write_error(s, strlen(s)); }

static void say_pointer(const void *p) {
  char buf[2 + 2 * sizeof(uintptr_t) + 1];
  uintptr_t v = (uintptr_t)p;
  int i = (int)sizeof buf - 1;
  buf[i] = '\0';
  do {
    buf[--i] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0 && i > 2);
  buf[--i] = 'x';
  buf[--i] = '0';
  say(buf + i);
}

void kp_invalid_pointer(const char *op, const void *p, const char *problem) {
  kp_fetch_add_relaxed(&invalid_pointers, 1);
  if (kp_load_relaxed(&kp_check_level) == KP_CHECK_IGNORE) return;
  say("kamepoolalloc: ");
  say(op);
  say("(");
  say_pointer(p);
  say("): ");
  say(problem);
  say("\n");
  kp_os_abort();
}

void kp_corrupt(const char *what, const void *where) {
  say("kamepoolalloc: heap corruption: ");
  say(what);
  say(" at ");
  say_pointer(where);
  say("\n");
  kp_os_abort();
}

void kp_assert_failed(const char *id, const char *cond, const char *file, int line) {
  char num[16];
  int i = (int)sizeof num - 1;
  num[i] = '\0';
  unsigned v = (unsigned)line;
  do {
    num[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0 && i > 0);
  say("kamepoolalloc: invariant ");
  say(id);
  say(" violated: ");
  say(cond);
  say(" (");
  say(file);
  say(":");
  say(num + i);
  say(")\n");
  kp_os_abort();
}

void kame_pool_set_check_level(int level) {
  if (level < KP_CHECK_IGNORE) level = KP_CHECK_IGNORE;
  if (level > KP_CHECK_FULL) level = KP_CHECK_FULL;
  kp_store_relaxed(&kp_check_level, level);
  kp_heap *h = kp_heap_if_any();
  if (h != NULL) kp_heap_retoken(h);
}

int kame_pool_get_check_level(void) { return kp_load_relaxed(&kp_check_level); }

/* ---- The validity walker ---------------------------------------------------- */

static KP_THREAD_LOCAL unsigned problems;

static void problem(const char *what, const void *where) {
  say("kamepoolalloc: validate: ");
  say(what);
  say(" at ");
  say_pointer(where);
  say("\n");
  problems++;
}

/* Counts a list of slots of c, checking each is a free slot of c.  With
 * `kept` (a current chunk's free list), slots of other chunks of its
 * class that the thread keeps [HOST-1] are checked as such and counted
 * there instead. */
static uint32_t walk_list(kp_chunk *c, kp_block *b, uint32_t limit, uint32_t *kept) {
  char *start = kp_chunk_start(c);
  uint32_t n = 0, steps = 0;
  if (kept != NULL) *kept = 0;
  for (; b != NULL; b = b->next) {
    size_t offset = (size_t)((char *)b - start);
    if (offset >= kp_chunk_bytes(c) || !kp_slot_boundary(c->cls, offset)) {
      kp_chunk *home = kept != NULL && kp_is_region(b) ? kp_chunk_of(b) : NULL;
      if (home == NULL || kp_load_relaxed(&home->kind) != KP_CHUNK_BUCKET || home->cls != c->cls ||
          !kp_is_slot_start(home, b) || b->tag != (uintptr_t)home) {
        problem("free list entry outside its chunk", b);
        return n;
      }
      ++*kept;
    } else {
      if (b->tag != (uintptr_t)c) problem("free slot without its free tag", b);
      if (kp_slot_index(c, b) >= c->carved) problem("free list entry past the carved part", b);
      n++;
    }
    if (++steps > limit + (kept != NULL ? KP_HOST_MAX : 0)) {
      problem("free list longer than its chunk", c);
      return n;
    }
  }
  if (n > limit) problem("free list longer than its chunk", c);
  return n;
}

static void check_owned_chunk(kp_heap *h, kp_chunk *c, bool current) {
  if (kp_load_relaxed(&c->kind) != KP_CHUNK_BUCKET) problem("owned chunk is not a bucket chunk", c);
  if (kp_load_relaxed(&c->owner) != kp_chunk_token(h, c, current))
    problem("owned chunk with another owner", c);
  uint64_t w = kp_load_relaxed(&c->remote);
  if (w & KP_REMOTE_DETACHED) problem("owned chunk marked detached", c);
  uint32_t kept = 0;
  uint32_t on_free = walk_list(c, c->free, c->capacity, current ? &kept : NULL);
  uint32_t on_local = walk_list(c, c->local_free, c->capacity, NULL);
  if (kept > h->hosted[c->cls]) problem("more slots of other chunks kept than counted", c);
  if (!current && on_free != c->free_count) problem("free list length not what the chunk records", c);
  /* Every carved slot is live, on a list, or on the remote list (which
   * `used` counts until taken); a current chunk's `used` also counts its
   * free list [USED-1]. */
  int64_t used = (c->flags & KP_CHUNK_PARKED) ? c->parked_used - (1 - c->used) : c->used;
  int64_t accounted = used + on_local + (current ? -KP_CURRENT_BIAS : (int64_t)on_free);
  if (accounted != (int64_t)c->carved || c->carved > c->capacity) problem("chunk slot counts do not add up", c);
}

static void check_regions(void) {
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    if (!kp_is_region(r)) problem("region not in the region map", r);
    if (kp_load_relaxed(&r->chunks[0].kind) != KP_CHUNK_META) problem("metadata unit not marked", r);
    for (unsigned u = 1; u < KP_UNITS_PER_REGION; u++) {
      kp_chunk *c = kp_load_relaxed(&r->unit_chunk[u]);
      if (c < r->chunks || c > &r->chunks[u]) {
        problem("unit maps to a chunk header outside its region", c);
        continue;
      }
      int kind = kp_load_relaxed(&c->kind);
      if (kind == KP_CHUNK_NONE || kind == KP_CHUNK_META) continue;
      unsigned first = kp_chunk_index(r, c), units = __atomic_load_n(&c->units, __ATOMIC_RELAXED);
      if (units == 0 || units > KP_MAX_CHUNK_UNITS || first + units <= u)
        problem("unit outside the chunk it maps to", c);
      /* A live dedicated block names a heap's L1, or none [L1-1].  Other
       * threads change chunks meanwhile, so only a token no transition
       * ever leaves is a finding: the token of a null heap. */
      if (kind == KP_CHUNK_DEDICATED && first == u && kp_load_relaxed(&c->owner) == kp_dedicated_token(NULL))
        problem("dedicated chunk with an owner token that names no heap", c);
    }
  }
}

/* A block heap h keeps in L1 slot idx (among its entries, or in its hot
 * cell: `cell`) is cached there [L1-1, MAP-4, HOT-1]. */
static void check_l1_block(kp_heap *h, unsigned idx, void *block, bool cell) {
  kp_l1_slot *s = &h->l1.slot[idx];
  if (idx >= KP_CACHE_CHUNK_INDEXES) {
    uintptr_t e = kp_radix_get((uintptr_t)block);
    if (KP_MAP_LEN(e) != kp_l1_place_bytes(idx)) problem("L1 mapping not cached for this slot", block);
    if (kp_addr_map_get(kp_addr_slot(block)) != (h->head_mark | (idx - KP_CACHE_CHUNK_INDEXES) << KP_ADDR_L1_SHIFT))
      problem("L1 mapping's address map bits disagree with its heap and slot", block);
    if (*(uintptr_t *)block != kp_free_tag(block)) problem("L1 mapping without its free tag", block);
    return;
  }
  if (((uintptr_t)block & (KP_UNIT_SIZE - 1)) != 0 || !kp_is_region(block)) {
    problem("L1 chunk entry not a chunk's start", block);
    return;
  }
  kp_chunk *c = kp_chunk_at_start(block);
  /* In the cell a dedicated block keeps its kind and carries the free tag. */
  bool marked = cell ? kp_load_relaxed(&c->kind) == KP_CHUNK_DEDICATED && *(uintptr_t *)block == kp_free_tag(block)
                     : kp_load_relaxed(&c->kind) == KP_CHUNK_CACHED;
  if (!marked || c->units != idx + 1 || kp_load_relaxed(&c->owner) != kp_dedicated_token(h) || c->home != s ||
      c->block != (char *)block + !cell)
    problem("L1 chunk not cached for this slot", c);
}

/* The L1 slot whose blocks serve a request of `size` bytes, or
 * KP_CACHE_INDEXES for none (the bucket tier's sizes, and those past the
 * cache's highest class). */
static unsigned slot_of_request(size_t size) {
  if (size <= KP_SMALL_MAX || size > KP_CACHE_MAP_MAX_LIMIT) return KP_CACHE_INDEXES;
  if (size <= KP_DEDICATED_MAX) return (unsigned)((size - 1) >> KP_UNIT_SHIFT);
  return KP_CACHE_CHUNK_INDEXES + kp_cache_map_index(size);
}

/* The hit paths' keys of the hot cell's slot idx (KP_CACHE_INDEXES for
 * none) [HOT-1]: malloc's range holds exactly the requests the slot
 * serves, and the free's value is the address map's at the slot's heads
 * (odd, no head's, for a chunk slot or none). */
static void check_hot_keys(kp_heap *h, unsigned idx) {
  size_t lo = h->hot_lo, span = h->hot_span;
  if (idx == KP_CACHE_INDEXES) {
    if (span != 0 || (h->hot_head_value & 1) == 0) problem("hot cell keys name a slot while it reserves none", h);
    return;
  }
  if (span == 0 || slot_of_request(lo) != idx || slot_of_request(lo + span - 1) != idx ||
      slot_of_request(lo - 1) == idx || slot_of_request(lo + span) == idx)
    problem("hot cell's request range is not its slot's", h);
  unsigned value = idx < KP_CACHE_CHUNK_INDEXES ? 1 : h->head_mark | (idx - KP_CACHE_CHUNK_INDEXES) << KP_ADDR_L1_SHIFT;
  if (h->hot_head_value != value) problem("hot cell's head value is not its slot's", h);
}

/* The thread's L1 [L1-1, L1-2]: every chunk it holds is cached, of its
 * slot's size, owned by the heap and sent home to that slot; places
 * granted stay within the slot, and the bytes add up. */
static void check_l1(kp_heap *h) {
  size_t bytes = 0;
  /* The hot cell holds a block of its slot in a place reserved there [HOT-1]. */
  unsigned hot_idx = KP_CACHE_INDEXES;
  if (h->hot_slot != &kp_l1_no_slot) {
    if (h->hot_slot < h->l1.slot || h->hot_slot >= h->l1.slot + KP_CACHE_INDEXES) {
      problem("hot cell of no L1 slot of its heap", h->hot_slot);
      return;
    }
    hot_idx = (unsigned)(h->hot_slot - h->l1.slot);
    if (h->hot != NULL) check_l1_block(h, hot_idx, h->hot, true);
  } else if (h->hot != NULL) {
    problem("hot cell holds a block but reserves no place", h->hot);
  }
  check_hot_keys(h, hot_idx);
  for (unsigned idx = 0; idx < KP_CACHE_INDEXES; idx++) {
    kp_l1_slot *s = &h->l1.slot[idx];
    uint32_t count = kp_l1_count(s), reserved = idx == hot_idx;
    if (count > KP_L1_DEPTH || s->limit < count + reserved || s->limit > KP_L1_DEPTH) {
      problem("L1 slot counts out of bounds", s);
      continue;
    }
    bytes += (size_t)s->limit * kp_l1_place_bytes(idx);
    for (uint32_t i = 0; i < count; i++) {
      check_l1_block(h, idx, s->entry[i], false);
      if (h->hot != NULL && s->entry[i] == h->hot) problem("L1 block both in the hot cell and in a slot", h->hot);
    }
  }
  if (bytes != h->l1.bytes) problem("L1 bytes do not add up", h);
}

/* The malloc hit path's table of mapping classes agrees with the
 * computed class of each granule's smallest and largest request [MAP-3]. */
static void check_map_classes(void) {
  for (size_t g = 0; g < KP_MAP_TABLE_MAX >> KP_MAP_TABLE_SHIFT; g++) {
    size_t top = (g + 1) << KP_MAP_TABLE_SHIFT;
    unsigned m = kp_map_slot_offset_of_granule[g] / sizeof(kp_l1_slot);
    if (m != kp_cache_map_index(top) || m != kp_cache_map_index(top - (1u << KP_MAP_TABLE_SHIFT) + 1))
      problem("mapping class table disagrees with the class of its sizes", &kp_map_slot_offset_of_granule[g]);
  }
}

/* Every live mapping head's later slots carry continuation marks of the
 * bytes they cover, and every continuation mark lies in a live head's
 * range [MAP-1].  Another thread mapping or unmapping a block passes
 * through states that break this (marks set before the head, cleared
 * after it), so the check runs only while the calling thread is the only
 * one with a heap. */
static void check_mappings(void) {
  for (size_t top = 0; top < KP_RADIX_ROOT_ENTRIES; top++) {
    kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[top]);
    if (leaf == NULL) continue;
    for (size_t i = 0; i < KP_RADIX_LEAF_ENTRIES; i++) {
      uintptr_t e = kp_load_relaxed(&(*leaf)[i]), kind = e & KP_MAP_KIND_MASK;
      uintptr_t addr = ((top << KP_RADIX_LEAF_BITS) | i) << KP_REGION_SHIFT;
      if (kind == KP_MAP_LARGE || kind == KP_MAP_HUGE) {
        size_t len = KP_MAP_LEN(e);
        for (size_t off = KP_REGION_SIZE; off < len; off += KP_REGION_SIZE) {
          size_t covered = len - off < KP_REGION_SIZE ? len - off : KP_REGION_SIZE;
          if (kp_radix_get(addr + off) != (covered | KP_MAP_CONT))
            problem("mapping slot without the continuation mark of its bytes", (void *)(addr + off));
        }
      } else if (kind == KP_MAP_CONT) {
        uintptr_t head = addr, h;
        do {
          head -= KP_REGION_SIZE;
          h = kp_radix_get(head);
        } while ((h & KP_MAP_KIND_MASK) == KP_MAP_CONT && head != 0);
        uintptr_t hk = h & KP_MAP_KIND_MASK;
        if ((hk != KP_MAP_LARGE && hk != KP_MAP_HUGE) || head + KP_MAP_LEN(h) <= addr)
          problem("continuation mark outside any live mapping", (void *)addr);
      }
    }
  }
}

/* Walks every region and the calling thread's heap; reports each problem
 * on stderr and returns how many were found (0: consistent).  Meant for
 * tests and debugging; other threads may change what it reads, so it
 * checks only what they cannot. */
int kame_pool_validate(void) {
  problems = 0;
  check_regions();
  check_map_classes();
  if (kp_heaps_live() <= 1) check_mappings();
  kp_heap *h = kp_heap_if_any();
  if (h != NULL) {
    for (size_t size = 0; size <= KP_DIRECT_MAX; size++)
      if (kp_direct_current(h, size) != h->current[kp_size_class(size)]) problem("direct table entry is not current", h); /* [CUR-3] */
    for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
      if (h->current[cls] != &kp_empty_chunk) check_owned_chunk(h, h->current[cls], true);
      for (kp_chunk *c = h->avail[cls]; c != NULL; c = c->next) {
        if (c->flags & KP_CHUNK_PARKED) problem("parked chunk on the avail list", c);
        check_owned_chunk(h, c, false);
      }
      unsigned parked = 0;
      for (kp_chunk *c = h->full[cls]; c != NULL; c = c->next, parked++) {
        if (!(c->flags & KP_CHUNK_PARKED)) problem("unparked chunk on the full list", c);
        check_owned_chunk(h, c, false);
      }
      if (parked != h->full_count[cls]) problem("full list count does not match", h);
    }
    check_l1(h);
    for (unsigned i = 0; i < KP_BATCH_SLOTS; i++) {
      kp_batch *bt = &h->batch[i];
      if (bt->chunk != NULL && walk_list(bt->chunk, bt->head, bt->chunk->capacity, NULL) != bt->count)
        problem("remote batch count does not match its list", bt->chunk);
    }
  }
  return (int)problems;
}

void kp_debug_validate(void) {
  if (kame_pool_validate() != 0) kp_corrupt("the validity walker found problems", NULL);
}
