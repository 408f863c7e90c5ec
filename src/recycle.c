/* The recycle cache: freed dedicated chunks, empty bucket chunks and
 * mappings up to the cache's top, kept warm for reuse.
 *
 * L1 is per thread, in the heap: for each cache index a few entries,
 * plain loads and stores, and beside them the heap's hot cell, one block
 * of one slot kept where the hit paths reach it at fixed addresses
 * [HOT-1].  Outside the hit paths, L1 is read or changed only after the
 * cell is settled: its block put among its slot's entries.
 *
 * L2 is global: KP_L2_WAYS rows of one atomic
 * slot per index, each row on its own cache lines, so threads that start
 * their scans on different rows do not share a line.  An L2 operation is
 * a bounded scan with one CAS per slot and no retry: a push that finds no
 * empty slot, or a pop that finds no block, gives up (the caller releases
 * or maps), so nothing can livelock [L2-1].  Whoever's CAS takes a slot's
 * value owns that block; its real size is read only after [L2-2].
 *
 * Indices: chunks by unit count (exact), mappings by a log-spaced length
 * (8 per octave above 4 MiB).  A mapping is pushed at its own index or the
 * one below (serving slightly smaller requests), and a pop looks at the
 * request's index and the two above, checking the block is big enough and
 * not more than a quarter too big.  What the caches hold is bounded by one
 * byte cap (release.c): half for L2, half shared among the threads' L1s. */
#include "internal.h"

#define KP_L2_WAYS 8
#define KP_STAMP_MASK ((uintptr_t)63)

typedef struct {
  _Alignas(KP_CACHE_LINE) _Atomic uintptr_t slot[KP_CACHE_INDEXES];
} kp_l2_row;

static kp_l2_row l2[KP_L2_WAYS];
static _Atomic size_t l2_bytes;

/* For each index, when L2 was last asked for a block of it, found or not
 * (the drain's clock in nanoseconds; 0: never).  The idle drain spares the
 * blocks of an index asked for lately [L2-3]: a producer that takes what
 * another thread frees may be slower between two requests than the
 * drain's idle time (a fresh block to fault in, a block to fill), and
 * giving its blocks back then makes every request a fresh mapping.  The
 * time is noted before the request looks at the drain clock, whose tick
 * must not give back what the request is about to take. */
static _Atomic uint64_t l2_asked_ns[KP_CACHE_INDEXES];

static void l2_note_asked(unsigned lo, unsigned hi) {
  if (kp_rt_keeps_pages()) return; /* no drain to spare from; a realtime thread reads no clock */
  uint64_t now = kp_os_now_ns();
  for (unsigned idx = lo; idx <= hi; idx++) kp_store_relaxed(&l2_asked_ns[idx], now);
}

/* L2 holds chunk headers and mapping starts. */
static size_t block_bytes(unsigned idx, void *block) {
  if (idx < KP_CACHE_CHUNK_INDEXES) return kp_chunk_bytes(block);
  return KP_MAP_LEN(kp_radix_get((uintptr_t)block));
}

static uint32_t l1_age(const kp_l1_slot *s) { return (s->held & KP_L1_POPPED) ? 0 : kp_l1_use_stamp() - s->stamp; }

/* ---- The hot cell ---------------------------------------------------------- */

kp_l1_slot kp_l1_no_slot;

/* The cell reserves no place: no request and no head is of its slot. */
void kp_l1_hot_clear(kp_heap *h) {
  h->hot_slot = &kp_l1_no_slot;
  h->hot_lo = 0;
  h->hot_span = 0;
  h->hot_head_value = 1;
}

/* The cell reserves a place of slot s, empty as yet: the hit paths' keys
 * of s (the heap's fields beside `hot`). */
static void hot_reserve(kp_heap *h, kp_l1_slot *s) {
  unsigned idx = (unsigned)(s - h->l1.slot);
  size_t lo, hi;
  if (idx < KP_CACHE_CHUNK_INDEXES) { /* the requests kp_malloc_dedicated maps to s */
    lo = (size_t)idx << KP_UNIT_SHIFT;
    hi = (size_t)(idx + 1) << KP_UNIT_SHIFT;
    h->hot_head_value = 1;
  } else { /* those of s's mapping class */
    unsigned m = idx - KP_CACHE_CHUNK_INDEXES;
    lo = m == 0 ? KP_DEDICATED_MAX : kp_cache_map_len(m - 1);
    hi = kp_cache_map_len(m);
    h->hot_head_value = (uint16_t)(h->head_mark | m << KP_ADDR_L1_SHIFT);
  }
  if (lo < KP_SMALL_MAX) lo = KP_SMALL_MAX;
  h->hot_lo = lo + 1;
  h->hot_span = hi - lo;
  h->hot_slot = s;
}

/* Ends the cell's reservation: its block, if any, goes into the place it
 * held among its slot's entries, and its takes count as a pop of the
 * slot [HOT-1]. */
void kp_l1_settle(kp_heap *h) {
  kp_l1_slot *s = h->hot_slot;
  if (s == &kp_l1_no_slot) return;
  if (h->hot_takes != 0) s->held |= KP_L1_POPPED;
  h->hot_takes = 0;
  void *block = h->hot;
  if (block != NULL) {
    kp_assert("HOT-1", kp_l1_count(s) < s->limit);
    if (s < &h->l1.slot[KP_CACHE_CHUNK_INDEXES]) { /* a dedicated block: cached by its header [L1-1] */
      *(uintptr_t *)block = 0;
      kp_chunk_set_cached(kp_chunk_at_start(block));
    }
    s->entry[kp_l1_count(s)] = block;
    s->held++;
    h->hot = NULL;
  }
  kp_l1_hot_clear(h);
}

/* The 256th take from the cell since the last look, of block p: look at
 * the drain clock (the look settles the cell, which counts the takes as a
 * pop).  Returns p. */
void *kp_l1_hot_look(kp_heap *h, void *p) {
  h->hot_takes = 1;
  kp_release_tick(h);
  return p;
}

/* Marks a block of slot s free as it enters the slot's entries. */
static bool l1_entered(kp_heap *h, kp_l1_slot *s, void *block) {
  if (s < &h->l1.slot[KP_CACHE_CHUNK_INDEXES]) kp_chunk_set_cached(kp_chunk_at_start(block));
  else *(uintptr_t *)block = kp_free_tag(block);
  return true;
}

/* The thread's own live block (a dedicated chunk's start or a mapping)
 * that its free hit path did not put into the hot cell: into the cell, or
 * into a place slot s grants, without asking the release layer, marked
 * free either way.  False: no place (the caller's release path decides). */
bool kp_l1_keep(kp_heap *h, kp_l1_slot *s, void *block) {
  /* The cell holds a block of s: that one goes into its place, the new
   * one (warmer) into the cell, if s grants one more place. */
  if (s == h->hot_slot) kp_l1_settle(h);
  if (h->hot_slot == &kp_l1_no_slot) {
    if (kp_l1_count(s) < s->limit) {
      hot_reserve(h, s);
      h->hot = block;
      *(uintptr_t *)block = kp_free_tag(block);
      return true;
    }
  } else if (kp_l1_push_granted(s, block)) { /* the cell is another slot's */
    return l1_entered(h, s, block);
  }
  /* No place granted, or the slot's pushes ran out: the drain clock may be due. */
  kp_l1_settle(h);
  kp_l1_tick_if_due(h, s);
  return kp_l1_push_granted(s, block) && l1_entered(h, s, block);
}

/* ---- L1 -------------------------------------------------------------------- */

/* The thread looks at the drain clock: its slots popped since the last
 * look are dated now. */
void kp_l1_date_pops(kp_heap *h) {
  kp_l1_settle(h);
  uint32_t now = kp_l1_use_stamp();
  for (unsigned idx = 0; idx < KP_CACHE_INDEXES; idx++) {
    kp_l1_slot *s = &h->l1.slot[idx];
    if (s->held & KP_L1_POPPED) {
      s->held &= ~KP_L1_POPPED;
      s->stamp = now;
    }
  }
}

/* A request the thread's L1 slot could not serve: demand for the size,
 * which lets the slot keep the next block freed into it (kp_l1_push).
 * The drain clock is brought up to date first: after a quiet spell it
 * jumps, and a request counted on the stale clock would look old next to
 * one made a moment later. */
void kp_l1_note_miss(kp_heap *h, unsigned idx) {
  kp_release_tick(h);
  kp_l1_slot *s = &h->l1.slot[idx];
  uint32_t now = kp_drain_now();
  if (now - s->miss_tick > 1) s->misses = 0;
  s->miss_tick = now;
  if (s->misses < UINT32_MAX) s->misses++;
}
/* kp_l1_push when the drain clock is due: look at it first, since the
 * drain must not give back the block being pushed. */
bool kp_l1_push_ticked(kp_heap *h, unsigned idx, void *block) {
  kp_release_tick(h);
  return kp_l1_push(h, idx, block);
}

/* Takes back the places granted to slot idx down to `keep`. */
static void l1_revoke_slot(kp_heap *h, unsigned idx, uint32_t keep) {
  kp_l1_slot *s = &h->l1.slot[idx];
  h->l1.bytes -= (size_t)(s->limit - keep) * kp_l1_place_bytes(idx);
  s->limit = keep;
}

/* Whether the thread's L1 slot idx takes back a block of its own: a place
 * is granted, or the size is still asked for (otherwise the block goes
 * back to the OS at once, not to L2). */
static bool l1_takes(const kp_heap *h, unsigned idx) {
  const kp_l1_slot *s = &h->l1.slot[idx];
  return kp_l1_count(s) < s->limit || kp_l1_in_demand(h, idx);
}

/* Takes back the places granted to the slots not popped from lately
 * (`all`: to every slot) [L1-2]. */
void kp_l1_revoke(kp_heap *h, bool all) {
  kp_l1_settle(h);
  for (unsigned idx = 0; idx < KP_CACHE_INDEXES; idx++) {
    kp_l1_slot *s = &h->l1.slot[idx];
    if (s->limit != kp_l1_count(s) && (all || !kp_l1_popped_lately(s))) l1_revoke_slot(h, idx, kp_l1_count(s));
  }
}

static uint32_t l2_age(uintptr_t value) { return (kp_drain_now() - (uint32_t)value) & KP_STAMP_MASK; }

static unsigned start_way(const kp_heap *h) { return h ? kp_heap_id(h) % KP_L2_WAYS : 0; }

/* ---- L2 ------------------------------------------------------------------ */

static bool l2_push(unsigned lo, unsigned hi, void *block, size_t bytes, unsigned way0) {
  if (kp_load_relaxed(&l2_bytes) + bytes > kp_cache_cap() / 2) return false;
  /* Counted before the block is published: a take may follow the CAS at
   * once, and its subtraction must find the bytes counted (counted after,
   * the sum could wrap below zero for a moment, and a push or a lowered
   * cap that read it then would refuse or evict for nothing). */
  kp_fetch_add_relaxed(&l2_bytes, bytes);
  uintptr_t value = (uintptr_t)block | (kp_drain_now() & KP_STAMP_MASK);
  for (unsigned idx = hi + 1; idx-- > lo;) {
    for (unsigned k = 0; k < KP_L2_WAYS; k++) {
      _Atomic uintptr_t *s = &l2[(way0 + k) % KP_L2_WAYS].slot[idx];
      uintptr_t empty = 0;
      if (kp_load_relaxed(s) == 0 && kp_cas_strong_acq_rel(s, &empty, value)) return true;
    }
  }
  kp_fetch_sub_relaxed(&l2_bytes, bytes);
  return false;
}

/* Takes whatever block slot `s` holds; the caller owns it afterwards. */
static void *l2_take(_Atomic uintptr_t *s, unsigned idx) {
  uintptr_t v = kp_load_relaxed(s);
  if (v == 0 || !kp_cas_strong_acq_rel(s, &v, 0)) return NULL;
  void *block = (void *)(v & ~KP_STAMP_MASK);
  size_t bytes = block_bytes(idx, block);
  size_t before = kp_fetch_sub_relaxed(&l2_bytes, bytes);
  kp_assert("L2-4", before >= bytes);
  (void)before;
  return block;
}

static void *l2_pop_chunk(unsigned idx, unsigned way0) {
  for (unsigned k = 0; k < KP_L2_WAYS; k++) {
    void *c = l2_take(&l2[(way0 + k) % KP_L2_WAYS].slot[idx], idx);
    if (c != NULL) return c;
  }
  return NULL;
}

size_t kp_cache_l2_bytes(void) { return kp_load_relaxed(&l2_bytes); }

/* ---- Chunks -------------------------------------------------------------- */

kp_chunk *kp_cache_take_chunk(kp_heap *h, unsigned units) {
  unsigned idx = units - 1;
  if (h != NULL) {
    kp_l1_settle(h);
    kp_l1_slot *s = &h->l1.slot[idx];
    if (kp_l1_count(s) != 0) return kp_chunk_at_start(kp_l1_pop(s, s->held));
  }
  l2_note_asked(idx, idx);
  if (h != NULL) kp_l1_note_miss(h, idx);
  return l2_pop_chunk(idx, start_way(h));
}

bool kp_cache_put_chunk(kp_heap *h, kp_chunk *c, bool local) {
  unsigned idx = c->units - 1u;
  size_t bytes = kp_chunk_bytes(c);
  /* No heap owns a cached chunk: a stale free of one of its former slots
   * must not take the owner's hit path. */
  kp_store_relaxed(&c->owner, 0);
  kp_chunk_set_cached(c);
  if (local && h != NULL) {
    kp_l1_settle(h);
    if (!l1_takes(h, idx)) return false;
    if (kp_l1_push(h, idx, kp_chunk_start(c))) {
      /* L1 pops hand it out as a dedicated block of this heap's as it is;
       * until then its `block` names no live block [L1-1] */
      kp_chunk_set_home(c, h);
      kp_chunk_set_cached(c);
      return true;
    }
  }
  return l2_push(idx, idx, c, bytes, start_way(h));
}

/* ---- Mappings ------------------------------------------------------------ */

void *kp_cache_take_mapping(kp_heap *h, size_t len, bool *zeroed) {
  unsigned idx = KP_CACHE_CHUNK_INDEXES + kp_cache_map_index(len);
  unsigned hi = idx + 2 < KP_CACHE_INDEXES ? idx + 2 : KP_CACHE_INDEXES - 1;
  *zeroed = false;
  bool in_l1 = h != NULL && kp_map_is_class(len);
  if (in_l1) {
    kp_l1_settle(h);
    kp_l1_slot *s = &h->l1.slot[idx];
    /* every block of the slot is of len's class [MAP-3] */
    if (kp_l1_count(s) != 0) return kp_l1_pop(s, s->held);
  }
  l2_note_asked(idx, hi); /* the indexes the request can be served from */
  if (in_l1) kp_l1_note_miss(h, idx);
  /* Past the request's index and the two above (blocks at most a quarter
   * longer), a longer one cut to len, its tail unmapped, spares the page
   * faults of a fresh block: a working set of random big sizes otherwise
   * maps most of its blocks afresh. */
  unsigned way0 = start_way(h), last = kp_mapping_can_cut() ? KP_CACHE_INDEXES - 1 : hi;
  for (unsigned i = idx; i <= last; i++) {
    for (unsigned k = 0; k < KP_L2_WAYS; k++) {
      void *p = l2_take(&l2[(way0 + k) % KP_L2_WAYS].slot[i], i);
      if (p == NULL) continue;
      size_t have = KP_MAP_LEN(kp_radix_get((uintptr_t)p));
      if (i <= hi ? have >= len && have - len <= len / 4 : have > len) {
        if (i > hi) kp_mapping_cut(p, have, len);
        return p;
      }
      if (!kp_cache_put_mapping(NULL, p, have, false)) kp_mapping_release(p, have);
    }
  }
  return NULL;
}

bool kp_cache_put_mapping(kp_heap *h, void *p, size_t len, bool local) {
  unsigned idx = KP_CACHE_CHUNK_INDEXES + kp_cache_map_index(len);
  /* L1 slots hold their class only [MAP-3]; a block of a size the thread
   * no longer asks for goes to L2, where a request of its size or, cut,
   * a smaller one takes it, or the drain gives it back. */
  if (local && h != NULL && kp_map_is_class(len)) {
    kp_l1_settle(h);
    if (l1_takes(h, idx) && kp_l1_push(h, idx, p)) return true;
  }
  unsigned lo = idx > KP_CACHE_CHUNK_INDEXES ? idx - 1 : idx;
  return l2_push(lo, idx, p, len, start_way(h));
}

/* ---- Draining ------------------------------------------------------------ */

static void release_block(unsigned idx, void *block, size_t bytes) {
  if (idx < KP_CACHE_CHUNK_INDEXES) kp_chunk_release(block);
  else kp_mapping_release(block, bytes);
}

/* Empties L1 slot idx and takes back its places; returns the bytes its
 * blocks held. */
static size_t l1_empty_slot(kp_heap *h, unsigned idx, bool to_l2) {
  kp_l1_slot *s = &h->l1.slot[idx];
  size_t held = 0;
  while (kp_l1_count(s) != 0) {
    void *block = s->entry[kp_l1_count(s) - 1];
    if (idx < KP_CACHE_CHUNK_INDEXES) block = kp_chunk_at_start(block);
    s->held--;
    size_t bytes = block_bytes(idx, block);
    held += bytes;
    bool kept = to_l2 && (idx < KP_CACHE_CHUNK_INDEXES ? kp_cache_put_chunk(NULL, block, false)
                                                      : kp_cache_put_mapping(NULL, block, bytes, false));
    if (!kept) release_block(idx, block, bytes);
  }
  l1_revoke_slot(h, idx, 0);
  return held;
}

/* Empties the thread's L1 slots not popped from for `older_than` drain ticks
 * (0: all of them), and takes back their granted places, into L2 when
 * `to_l2` and there is room, else back to the OS.  Returns the bytes the slots
 * held. */
size_t kp_cache_flush_l1(kp_heap *h, bool to_l2, uint32_t older_than) {
  kp_l1_settle(h);
  size_t held = 0;
  for (unsigned idx = 0; idx < KP_CACHE_INDEXES && h->l1.bytes != 0; idx++) {
    kp_l1_slot *s = &h->l1.slot[idx];
    if (s->limit == 0 || l1_age(s) < older_than) continue;
    held += l1_empty_slot(h, idx, to_l2);
  }
  return held;
}

/* Gives back the blocks of the mapping slots above the cache's top and
 * their places [L1-3]: the free hit path does not look at the top. */
void kp_l1_drop_above(kp_heap *h, size_t top) {
  kp_l1_settle(h);
  for (unsigned idx = KP_CACHE_CHUNK_INDEXES; idx < KP_CACHE_INDEXES; idx++)
    if (h->l1.slot[idx].limit != 0 && kp_l1_place_bytes(idx) > top) l1_empty_slot(h, idx, false);
}

/* Gives back up to max_blocks L2 blocks pushed at least `older_than` drain
 * ticks ago (0: any), of indexes not asked for since `spare_since_ns`
 * (0: whenever); returns the bytes given back. */
size_t kp_cache_evict_l2(unsigned max_blocks, uint32_t older_than, uint64_t spare_since_ns) {
  size_t freed = 0;
  for (unsigned way = 0; way < KP_L2_WAYS; way++) {
    for (unsigned idx = 0; idx < KP_CACHE_INDEXES; idx++) {
      _Atomic uintptr_t *s = &l2[way].slot[idx];
      uintptr_t v = kp_load_relaxed(s);
      if (v == 0 || l2_age(v) < older_than ||
          (spare_since_ns != 0 && kp_load_relaxed(&l2_asked_ns[idx]) >= spare_since_ns))
        continue;
      void *block = l2_take(s, idx);
      if (block == NULL) continue;
      size_t bytes = block_bytes(idx, block);
      release_block(idx, block, bytes);
      freed += bytes;
      if (--max_blocks == 0) return freed;
    }
  }
  return freed;
}

/* The thread's share of the cache cap for its L1: half the cap, split
 * among the live threads. */
void kp_cache_update_share(kp_heap *h) {
  unsigned threads = kp_heaps_live();
  h->l1.cap = kp_cache_cap() / 2 / (threads ? threads : 1);
  /* Granted places are promises within the share: a smaller share takes them back
   * before any block goes. */
  if (h->l1.bytes > h->l1.cap) kp_l1_revoke(h, true);
}

/* ---- Census (statistics) --------------------------------------------------- */

static void census_l1(const kp_heap *h, void *arg) {
  kp_cache_census *out = arg;
  const kp_l1_slot *hs = __atomic_load_n(&h->hot_slot, __ATOMIC_RELAXED);
  void *hot = __atomic_load_n(&h->hot, __ATOMIC_RELAXED);
  if (hot != NULL && hs >= h->l1.slot && hs < &h->l1.slot[KP_CACHE_CHUNK_INDEXES]) {
    out->cell_chunks++; /* counted as dedicated by the walk of the regions [HOT-1] */
    out->cell_chunk_bytes += kp_l1_place_bytes((unsigned)(hs - h->l1.slot));
  } else if (hot != NULL && hs >= h->l1.slot && hs < &h->l1.slot[KP_CACHE_INDEXES]) {
    out->maps++;
    out->map_bytes += KP_MAP_LEN(kp_radix_get((uintptr_t)hot));
  }
  for (unsigned idx = KP_CACHE_CHUNK_INDEXES; idx < KP_CACHE_INDEXES; idx++) {
    const kp_l1_slot *s = &h->l1.slot[idx];
    uint32_t n = __atomic_load_n(&s->held, __ATOMIC_RELAXED) & KP_L1_COUNT_MASK;
    for (uint32_t i = 0; i < n && i < KP_L1_DEPTH; i++) {
      void *p = __atomic_load_n(&s->entry[i], __ATOMIC_RELAXED);
      out->maps++;
      out->map_bytes += KP_MAP_LEN(kp_radix_get((uintptr_t)p));
    }
  }
}

/* Mappings the cache holds: read slot by slot while other threads may
 * push and pop, so a near value unless they are quiet. */
void kp_cache_census_take(kp_cache_census *out) {
  out->maps = out->map_bytes = out->cell_chunks = out->cell_chunk_bytes = 0;
  for (unsigned way = 0; way < KP_L2_WAYS; way++) {
    for (unsigned idx = KP_CACHE_CHUNK_INDEXES; idx < KP_CACHE_INDEXES; idx++) {
      uintptr_t v = kp_load_relaxed(&l2[way].slot[idx]);
      if (v == 0) continue;
      out->maps++;
      out->map_bytes += KP_MAP_LEN(kp_radix_get(v & ~KP_STAMP_MASK));
    }
  }
  kp_heaps_for_each(census_l1, out);
}
