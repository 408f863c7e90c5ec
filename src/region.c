/* Regions, units and byte accounting.
 *
 * Regions are 32 MiB-aligned mappings that are never unmapped [REG-1];
 * they are pushed onto a list that is never popped, so any thread may walk
 * it.  A chunk is a run of 1..16 units claimed by one CAS on the word of
 * the region's unit bitmap that holds it (chunks never straddle two
 * words) [CHUNK-1].  Free units are clean (pages zero or never touched)
 * or dirty (pages may be resident); a claim takes dirty units first, so
 * warm pages are reused before fresh ones fault in.  This file is
 * mechanism only: whether freed units keep their pages, and for how long,
 * is decided by release.c. */
#include "internal.h"

#include <string.h>

static _Atomic(kp_region *) region_list;
static _Atomic size_t reserved_bytes;
static _Atomic size_t max_bytes = KP_DEFAULT_MAX_BYTES;
static _Atomic size_t reserved_peak;
static _Atomic size_t dirty_bytes; /* of free dirty units [DIRTY-3] */
/* Cleaners at work (they hold dirty units claimed while purging them),
 * and how many have finished: a claim that found nothing looks again
 * rather than map a region for good while units come back [DIRTY-2]. */
static _Atomic unsigned cleaning, cleaned;

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
  kp_rt_advise_region(r, KP_REGION_SIZE);
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

/* Claims `units` contiguous units of region r (`dirty_only`: units that
 * are all dirty); returns the first unit's index or -1.  Lock-free: a
 * failed CAS means another claim or release succeeded. */
static int region_claim_units(kp_region *r, unsigned units, bool dirty_only) {
  for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
    uint64_t cur = kp_load_relaxed(&r->claimed[w]);
    for (;;) {
      uint64_t busy = dirty_only ? cur | ~kp_load_relaxed(&r->dirty[w]) : cur;
      int bit = find_clear_run(busy, units);
      if (bit < 0) break;
      if (kp_cas_weak_acq_rel(&r->claimed[w], &cur, cur | kp_unit_mask(units, (unsigned)bit)))
        return (int)(w * 64 + (unsigned)bit);
    }
  }
  return -1;
}

/* The hint first, then every region. */
static int claim_anywhere(kp_region *hint, unsigned units, bool dirty_only, kp_region **where) {
  int first = hint ? region_claim_units(hint, units, dirty_only) : -1;
  if (first >= 0) {
    *where = hint;
    return first;
  }
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    if (r == hint) continue;
    first = region_claim_units(r, units, dirty_only);
    if (first >= 0) {
      *where = r;
      return first;
    }
  }
  return -1;
}

/* A claim that finds no run free while a cleaner holds units scans again
 * (the cleaner is about to let them go), yielding the CPU from the second
 * time on, at most this many times; then it makes a new region.  Waiting
 * for the cleaner without a bound made the claim depend on another
 * thread's progress: with the cleaner preempted, the claim spun for the
 * rest of its time slice (under valgrind, which runs one thread at a time,
 * a two-thread churn ran 500 times its usual instructions). */
#define KP_CLAIM_RESCANS 4

/* Claims a run of units from any region (making a new one if all are
 * full), dirty units first.  *zeroed tells whether all its pages are
 * known zero [DIRTY-1]. */
kp_chunk *kp_units_claim(kp_heap *heap, unsigned units, bool *zeroed) {
  kp_region *hint = heap ? heap->region_hint : NULL, *r = NULL;
  int first = -1;
  unsigned seen = kp_load_acquire(&cleaned);
  if (kp_load_relaxed(&dirty_bytes) != 0) first = claim_anywhere(hint, units, true, &r);
  if (first < 0) first = claim_anywhere(hint, units, false, &r);
  for (unsigned rescans = 0; first < 0 && rescans < KP_CLAIM_RESCANS; rescans++) {
    /* Pairs with the cleaner's release of its claim: a hold this scan saw
     * is one whose cleaner is still counted, or has finished since. */
    atomic_thread_fence(memory_order_acquire);
    /* `cleaning` first: a cleaner that finishes between the two loads has
     * counted itself in `cleaned` by then (models/chunk_claim.pml). */
    bool idle = kp_load_acquire(&cleaning) == 0;
    unsigned now = kp_load_acquire(&cleaned);
    if (idle && now == seen) break;
    seen = now;
    /* A realtime thread makes no system call it can avoid (docs/realtime.md). */
    if (rescans != 0 && !kp_rt_defers()) kp_os_yield();
    first = claim_anywhere(hint, units, false, &r);
  }
  if (first < 0) {
    r = region_create();
    if (r == NULL) return NULL;
    first = region_claim_units(r, units, false);
    if (first < 0) return NULL; /* another thread took the new region's units */
  }
  if (heap) heap->region_hint = r;

  unsigned w = (unsigned)first / 64, bit = (unsigned)first % 64;
  uint64_t mask = kp_unit_mask(units, bit);
  uint64_t was_dirty = kp_fetch_and_acq_rel(&r->dirty[w], ~mask) & mask;
  *zeroed = was_dirty == 0;
  if (was_dirty != 0) kp_fetch_sub_relaxed(&dirty_bytes, (size_t)__builtin_popcountll(was_dirty) << KP_UNIT_SHIFT);

  kp_chunk *c = &r->chunks[first];
  __atomic_store_n(&c->units, (uint8_t)units, __ATOMIC_RELAXED); /* the walker reads it from any thread */
  c->flags = 0;
  /* Before any block of the chunk exists [CHUNK-2]. */
  for (unsigned i = 0; i < units; i++) kp_store_relaxed(&r->unit_chunk[first + i], c);
  return c;
}

/* Stamps the units of `mask` in word w of r with the drain tick: from now
 * on they count as idle [DIRTY-3]. */
static void stamp_dirty(kp_region *r, unsigned w, uint64_t mask) {
  uint32_t tick = kp_drain_now();
  for (; mask; mask &= mask - 1) {
    unsigned bit = (unsigned)__builtin_ctzll(mask);
    kp_store_relaxed(&r->chunks[w * 64 + bit].dirty_tick, tick);
  }
}

/* Returns the chunk's units to its region.  `dirty`: their pages were not
 * purged (each unit is stamped with the drain tick; `counted`: the caller
 * has added them to dirty_bytes).  The caller guarantees no block of the
 * chunk is live. */
static void units_free(kp_chunk *c, bool dirty, bool counted) {
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
  if (dirty) {
    stamp_dirty(r, w, mask);
    if (!counted) kp_fetch_add_relaxed(&dirty_bytes, (size_t)units << KP_UNIT_SHIFT);
    kp_fetch_or_acq_rel(&r->dirty[w], mask);
  }
  kp_fetch_and_acq_rel(&r->claimed[w], ~mask);
}

void kp_units_free(kp_chunk *c, bool dirty) { units_free(c, dirty, false); }

/* Frees the chunk's units dirty if the free dirty units stay within
 * `limit` bytes with them (reserved by CAS, so concurrent releases cannot
 * overshoot together); returns false, freeing nothing, otherwise. */
bool kp_units_free_dirty_within(kp_chunk *c, size_t limit) {
  size_t bytes = kp_chunk_bytes(c), cur = kp_load_relaxed(&dirty_bytes);
  do {
    if (cur > limit || bytes > limit - cur) return false;
  } while (!kp_cas_weak_acq_rel(&dirty_bytes, &cur, cur + bytes));
  units_free(c, true, true);
  return true;
}

size_t kp_units_dirty_bytes(void) { return kp_load_relaxed(&dirty_bytes); }

/* The free dirty units of word w of r that have been dirty for at least
 * `idle_ticks` drain ticks (a stamp read unclaimed may be stale by then:
 * a policy's imprecision, never a fault). */
static uint64_t idle_dirty(kp_region *r, unsigned w, uint64_t candidates, uint32_t idle_ticks) {
  if (idle_ticks == 0) return candidates;
  uint32_t now = kp_drain_now();
  uint64_t idle = 0;
  for (uint64_t left = candidates; left; left &= left - 1) {
    unsigned bit = (unsigned)__builtin_ctzll(left);
    if (now - kp_load_relaxed(&r->chunks[w * 64 + bit].dirty_tick) >= idle_ticks) idle |= (uint64_t)1 << bit;
  }
  return idle;
}

/* Hands the dirty free units idle for at least `idle_ticks` drain ticks
 * (0: all) to `clean`, which returns their pages to the OS, one call per
 * run of adjacent units.  The units of a word are claimed meanwhile (one
 * CAS), so no chunk can be built on them during the purge [DIRTY-2].
 * Returns the bytes cleaned. */
size_t kp_units_clean_dirty(bool (*clean)(void *addr, size_t len), uint32_t idle_ticks) {
  size_t purged = 0;
  kp_fetch_add_acq_rel(&cleaning, 1); /* before any claim of this pass */
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t cur = kp_load_relaxed(&r->claimed[w]), take;
      do {
        take = idle_dirty(r, w, kp_load_relaxed(&r->dirty[w]) & ~cur, idle_ticks);
      } while (take != 0 && !kp_cas_weak_acq_rel(&r->claimed[w], &cur, cur | take));
      if (take == 0) continue;
      uint64_t was = kp_fetch_and_acq_rel(&r->dirty[w], ~take) & take, got = was, kept = 0;
      while (got) {
        unsigned bit = (unsigned)__builtin_ctzll(got);
        uint64_t rest = ~got >> bit; /* the run ends at the first clear bit above */
        unsigned len = rest ? (unsigned)__builtin_ctzll(rest) : 64 - bit;
        uint64_t run = kp_unit_mask(len, bit);
        if (clean((char *)r + ((size_t)(w * 64 + bit) << KP_UNIT_SHIFT), (size_t)len << KP_UNIT_SHIFT))
          purged += (size_t)len << KP_UNIT_SHIFT;
        else
          kept |= run; /* refused (locked pages): still dirty [DIRTY-1] */
        got &= ~run;
      }
      kp_fetch_sub_relaxed(&dirty_bytes, (size_t)__builtin_popcountll(was & ~kept) << KP_UNIT_SHIFT);
      if (kept != 0) { /* tried again once idle again */
        stamp_dirty(r, w, kept);
        kp_fetch_or_acq_rel(&r->dirty[w], kept);
      }
      kp_fetch_and_acq_rel(&r->claimed[w], ~take);
    }
  }
  kp_fetch_add_acq_rel(&cleaned, 1);
  kp_fetch_sub_acq_rel(&cleaning, 1);
  return purged;
}
