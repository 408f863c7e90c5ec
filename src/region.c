/* Regions, units and byte accounting.
 *
 * Regions are 32 MiB-aligned mappings that are never unmapped [REG-1];
 * they are pushed onto a list that is never popped, so any thread may walk
 * it.  A chunk is a run of 1..16 units claimed by one CAS on the word of
 * the region's unit bitmap that holds it (chunks never straddle two
 * words) [CHUNK-1].  This file is mechanism only: whether freed units keep
 * their pages is decided by release.c. */
#include "internal.h"

#include <string.h>

static _Atomic(kp_region *) region_list;
static _Atomic size_t reserved_bytes;
static _Atomic size_t max_bytes = KP_DEFAULT_MAX_BYTES;
static _Atomic size_t reserved_peak;

/* ---- Byte accounting --------------------------------------------------- */

static bool reserve_once(size_t bytes) {
  size_t cur = kp_load_relaxed(&reserved_bytes);
  for (;;) {
    size_t cap = kp_load_relaxed(&max_bytes);
    if (bytes > cap || cur > cap - bytes) return false;
    if (kp_cas_weak_acq_rel(&reserved_bytes, &cur, cur + bytes)) break;
  }
  /* New mappings only (a slow path): the peak costs the hit paths nothing. */
  size_t peak = kp_load_relaxed(&reserved_peak);
  while (cur + bytes > peak && !kp_cas_weak_acq_rel(&reserved_peak, &peak, cur + bytes)) {
  }
  return true;
}

/* Accounts `bytes` of new mappings against the ceiling; when they do not
 * fit, the recycle cache gives back what it holds first. */
bool kp_reserve_bytes(size_t bytes) {
  if (reserve_once(bytes)) return true;
  return kp_release_make_room(bytes) && reserve_once(bytes);
}

void kp_unreserve_bytes(size_t bytes) { kp_fetch_sub_relaxed(&reserved_bytes, bytes); }
size_t kp_reserved_now(void) { return kp_load_relaxed(&reserved_bytes); }
size_t kp_reserved_peak(void) { return kp_load_relaxed(&reserved_peak); }

void kame_pool_set_max_bytes(size_t bytes) {
  kp_store_relaxed(&max_bytes, bytes ? bytes : KP_DEFAULT_MAX_BYTES);
}
size_t kame_pool_get_max_bytes(void) { return kp_load_relaxed(&max_bytes); }
size_t kame_pool_reserved_bytes(void) { return kp_load_relaxed(&reserved_bytes); }

/* ---- Regions ----------------------------------------------------------- */

kp_region *kp_regions_first(void) { return kp_load_acquire(&region_list); }

static kp_region *region_create(void) {
  if (!kp_rt_may_map() || !kp_reserve_bytes(KP_REGION_SIZE)) return NULL;
  kp_region *r = kp_map_aligned(KP_REGION_SIZE, KP_REGION_SIZE);
  if (r == NULL) {
    kp_unreserve_bytes(KP_REGION_SIZE);
    return NULL;
  }
  kp_rt_advise_new(r, KP_REGION_SIZE);
  /* Fresh pages are zero: every unit is free and clean.  The metadata
   * unit is claimed, and every unit maps to the header at its own index
   * (a free one, kind NONE) until a chunk covers it, so a wild pointer
   * finds "metadata" or "free", never a NULL. */
  kp_chunk *meta = &r->chunks[0];
  meta->units = 1;
  kp_store_relaxed(&meta->kind, KP_CHUNK_META);
  for (unsigned u = 0; u < KP_UNITS_PER_REGION; u++) kp_store_relaxed(&r->unit_chunk[u], &r->chunks[u]);
  kp_store_relaxed(&r->claimed[0], 1);
  kp_addr_map_set_region((uintptr_t)r);
  kp_region *head = kp_load_relaxed(&region_list);
  do {
    r->next = head;
  } while (!kp_cas_weak_acq_rel(&region_list, &head, r));
  return r;
}

/* Creates up to n regions now (for programs that want their address space
 * up front); returns how many it made. */
size_t kp_regions_reserve(unsigned n) {
  size_t made = 0;
  while (made < n && region_create() != NULL) made++;
  return made;
}

/* Lowest bit i such that bits i .. i+n-1 of `word` are all clear. */
static int find_clear_run(uint64_t word, unsigned n) {
  uint64_t run = ~word;
  for (unsigned have = 1; have < n && run;) {
    unsigned step = have < n - have ? have : n - have;
    run &= run >> step;
    have += step;
  }
  return run ? __builtin_ctzll(run) : -1;
}

/* Claims `units` contiguous units of region r; returns the first unit's
 * index or -1.  Lock-free: a failed CAS means another claim or release
 * succeeded. */
static int region_claim_units(kp_region *r, unsigned units) {
  for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
    uint64_t cur = kp_load_relaxed(&r->claimed[w]);
    for (;;) {
      int bit = find_clear_run(cur, units);
      if (bit < 0) break;
      if (kp_cas_weak_acq_rel(&r->claimed[w], &cur, cur | kp_unit_mask(units, (unsigned)bit)))
        return (int)(w * 64 + (unsigned)bit);
    }
  }
  return -1;
}

/* Claims a run of units from any region (making a new one if all are
 * full).  *zeroed tells whether all its pages are known zero [DIRTY-1]. */
kp_chunk *kp_units_claim(kp_heap *heap, unsigned units, bool *zeroed) {
  kp_region *hint = heap ? heap->region_hint : NULL;
  kp_region *r = hint;
  int first = r ? region_claim_units(r, units) : -1;
  if (first < 0) {
    for (r = kp_regions_first(); r != NULL; r = r->next) {
      if (r == hint) continue;
      first = region_claim_units(r, units);
      if (first >= 0) break;
    }
  }
  if (first < 0) {
    r = region_create();
    if (r == NULL) return NULL;
    first = region_claim_units(r, units);
    if (first < 0) return NULL; /* another thread took the new region's units */
  }
  if (heap) heap->region_hint = r;

  unsigned w = (unsigned)first / 64, bit = (unsigned)first % 64;
  uint64_t mask = kp_unit_mask(units, bit);
  uint64_t was_dirty = kp_fetch_and_acq_rel(&r->dirty[w], ~mask) & mask;
  *zeroed = was_dirty == 0;

  kp_chunk *c = &r->chunks[first];
  __atomic_store_n(&c->units, (uint8_t)units, __ATOMIC_RELAXED); /* the walker reads it from any thread */
  c->flags = 0;
  /* Before any block of the chunk exists [CHUNK-2]. */
  for (unsigned i = 0; i < units; i++) kp_store_relaxed(&r->unit_chunk[first + i], c);
  return c;
}

/* Returns the chunk's units to its region.  `dirty`: their pages were not
 * purged.  The caller guarantees no block of the chunk is live. */
void kp_units_free(kp_chunk *c, bool dirty) {
  kp_region *r = kp_region_of(c);
  unsigned first = kp_chunk_index(r, c), units = c->units;
  unsigned w = first / 64, bit = first % 64;
  uint64_t mask = kp_unit_mask(units, bit);
  kp_assert("CHUNK-1", (kp_load_relaxed(&r->claimed[w]) & mask) == mask);

  kp_store_relaxed(&c->kind, KP_CHUNK_NONE);
  kp_store_relaxed(&c->owner, 0);
  c->free = c->local_free = NULL;
  /* Free units map to their own (free) headers again [CHUNK-2]. */
  for (unsigned i = 1; i < units; i++) kp_store_relaxed(&r->unit_chunk[first + i], &r->chunks[first + i]);
  if (dirty) kp_fetch_or_acq_rel(&r->dirty[w], mask);
  kp_fetch_and_acq_rel(&r->claimed[w], ~mask);
}

/* Hands every dirty free unit to `clean` (which returns its pages to the
 * OS); each unit is claimed meanwhile, so no chunk can be built on it
 * during the purge [DIRTY-2].  Returns the bytes cleaned. */
size_t kp_units_clean_dirty(void (*clean)(void *addr, size_t len)) {
  size_t purged = 0;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t dirty = kp_load_relaxed(&r->dirty[w]);
      while (dirty) {
        unsigned bit = (unsigned)__builtin_ctzll(dirty);
        uint64_t m = (uint64_t)1 << bit;
        dirty &= ~m;
        uint64_t cur = kp_load_relaxed(&r->claimed[w]);
        if (cur & m) continue;
        if (!kp_cas_strong_acq_rel(&r->claimed[w], &cur, cur | m)) continue;
        if (kp_fetch_and_acq_rel(&r->dirty[w], ~m) & m) {
          clean((char *)r + ((size_t)(w * 64 + bit) << KP_UNIT_SHIFT), KP_UNIT_SIZE);
          purged += KP_UNIT_SIZE;
        }
        kp_fetch_and_acq_rel(&r->claimed[w], ~m);
      }
    }
  }
  return purged;
}
