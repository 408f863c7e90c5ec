/* Regions, units and chunks, and the address map.
 *
 * Regions are 32 MiB-aligned mappings that are never unmapped; they are
 * pushed onto a list that is never popped, so any thread may walk it.  A
 * chunk is a run of 1..16 units claimed by one CAS on the word of the
 * region's unit bitmap that holds it (chunks never straddle two words).
 * Freed units stay resident ("dirty") for quick reuse up to a byte cap;
 * past it, or on kame_pool_trim, their pages are returned to the OS. */
#include "internal.h"

#include <string.h>

_Atomic(kp_radix_leaf *) kp_radix_root[KP_RADIX_ROOT_ENTRIES];
_Atomic(uint64_t) kp_region_bitmap[KP_REGION_BITMAP_WORDS];

static _Atomic(kp_region *) region_list;
static _Atomic size_t reserved_bytes;
static _Atomic size_t max_bytes = SIZE_MAX;

/* Dirty free units are kept up to this many bytes in total. */
#define KP_DIRTY_CAP ((size_t)64 << 20)
static _Atomic size_t dirty_units;

/* ---- Address map ------------------------------------------------------- */

static _Atomic uintptr_t *radix_slot(uintptr_t addr, bool create) {
  uintptr_t top = addr >> (KP_REGION_SHIFT + KP_RADIX_LEAF_BITS);
  if (top >= KP_RADIX_ROOT_ENTRIES) return NULL;
  kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[top]);
  if (leaf == NULL) {
    if (!create) return NULL;
    kp_radix_leaf *fresh = kp_os_map(sizeof(kp_radix_leaf));
    if (fresh == NULL) return NULL;
    kp_radix_leaf *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&kp_radix_root[top], &expected, fresh,
                                                memory_order_acq_rel, memory_order_acquire)) {
      leaf = fresh;
    } else {
      kp_os_unmap(fresh, sizeof(kp_radix_leaf));
      leaf = expected;
    }
  }
  return &(*leaf)[(addr >> KP_REGION_SHIFT) & (KP_RADIX_LEAF_ENTRIES - 1)];
}

bool kp_radix_set(uintptr_t addr, uintptr_t entry) {
  _Atomic uintptr_t *slot = radix_slot(addr, true);
  if (slot == NULL) return false;
  kp_store_release(slot, entry);
  return true;
}

void kp_radix_clear(uintptr_t addr) {
  _Atomic uintptr_t *slot = radix_slot(addr, false);
  if (slot != NULL) kp_store_release(slot, 0);
}

/* ---- Byte accounting --------------------------------------------------- */

bool kp_reserve_bytes(size_t bytes) {
  size_t cur = kp_load_relaxed(&reserved_bytes);
  for (;;) {
    size_t cap = kp_load_relaxed(&max_bytes);
    if (bytes > cap || cur > cap - bytes) return false;
    if (kp_cas_weak_acq_rel(&reserved_bytes, &cur, cur + bytes)) return true;
  }
}

void kp_unreserve_bytes(size_t bytes) { kp_fetch_sub_relaxed(&reserved_bytes, bytes); }

void kame_pool_set_max_bytes(size_t bytes) __attribute__((visibility("default")));
size_t kame_pool_get_max_bytes(void) __attribute__((visibility("default")));
size_t kame_pool_reserved_bytes(void) __attribute__((visibility("default")));

void kame_pool_set_max_bytes(size_t bytes) { kp_store_relaxed(&max_bytes, bytes ? bytes : SIZE_MAX); }
size_t kame_pool_get_max_bytes(void) { return kp_load_relaxed(&max_bytes); }
size_t kame_pool_reserved_bytes(void) { return kp_load_relaxed(&reserved_bytes); }

/* ---- Regions ----------------------------------------------------------- */

kp_region *kp_regions_first(void) { return kp_load_acquire(&region_list); }

static kp_region *region_create(void) {
  if (!kp_reserve_bytes(KP_REGION_SIZE)) return NULL;
  kp_region *r = kp_os_map_aligned(KP_REGION_SIZE, KP_REGION_SIZE);
  if (r == NULL) {
    kp_unreserve_bytes(KP_REGION_SIZE);
    return NULL;
  }
  /* Fresh pages are zero: only the metadata unit's own bit needs setting. */
  kp_store_relaxed(&r->claimed[0], 1);
  if (!kp_radix_set((uintptr_t)r, KP_RADIX_REGION)) {
    kp_os_unmap(r, KP_REGION_SIZE);
    kp_unreserve_bytes(KP_REGION_SIZE);
    return NULL;
  }
  uintptr_t slot = (uintptr_t)r >> KP_REGION_SHIFT;
  if ((uintptr_t)r >> KP_USER_ADDRESS_BITS == 0)
    kp_fetch_or_acq_rel(&kp_region_bitmap[slot >> 6], (uint64_t)1 << (slot & 63));
  kp_region *head = kp_load_relaxed(&region_list);
  do {
    r->next = head;
  } while (!kp_cas_weak_acq_rel(&region_list, &head, r));
  return r;
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
  uint64_t mask = units == 64 ? ~(uint64_t)0 : (((uint64_t)1 << units) - 1);
  for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
    uint64_t cur = kp_load_relaxed(&r->claimed[w]);
    for (;;) {
      int bit = find_clear_run(cur, units);
      if (bit < 0) break;
      if (kp_cas_weak_acq_rel(&r->claimed[w], &cur, cur | (mask << bit))) return (int)(w * 64 + bit);
    }
  }
  return -1;
}

kp_chunk *kp_chunk_claim(kp_heap *heap, unsigned units, bool *zeroed) {
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
    if (first < 0) return NULL; /* cannot happen: a new region has 127 free units */
  }
  if (heap) heap->region_hint = r;

  unsigned w = (unsigned)first / 64, bit = (unsigned)first % 64;
  uint64_t mask = (units == 64 ? ~(uint64_t)0 : (((uint64_t)1 << units) - 1)) << bit;
  uint64_t was_dirty = kp_fetch_and_acq_rel(&r->dirty[w], ~mask) & mask;
  if (was_dirty) kp_fetch_sub_relaxed(&dirty_units, (size_t)__builtin_popcountll(was_dirty));
  *zeroed = was_dirty == 0;

  kp_chunk *c = &r->chunks[first];
  for (unsigned i = 0; i < units; i++) r->unit_chunk[first + i] = c;
  c->units = (uint8_t)units;
  return c;
}

/* Returns the chunk's units to its region.  The caller guarantees no slot
 * of the chunk is live. */
void kp_chunk_release(kp_chunk *c) {
  kp_region *r = kp_region_of(c);
  unsigned first = kp_chunk_index(r, c), units = c->units;
  unsigned w = first / 64, bit = first % 64;
  uint64_t mask = (units == 64 ? ~(uint64_t)0 : (((uint64_t)1 << units) - 1)) << bit;

  c->kind = KP_CHUNK_NONE;
  kp_store_relaxed(&c->owner, NULL);
  c->free = c->local_free = NULL;
  if (kp_load_relaxed(&dirty_units) + units <= KP_DIRTY_CAP / KP_UNIT_SIZE) {
    kp_fetch_add_relaxed(&dirty_units, units);
    kp_fetch_or_acq_rel(&r->dirty[w], mask);
  } else {
    kp_os_purge(kp_chunk_start(r, c), (size_t)units << KP_UNIT_SHIFT);
  }
  kp_fetch_and_acq_rel(&r->claimed[w], ~mask);
}

/* Returns the pages of every dirty free unit to the OS.  Each unit is
 * claimed while its pages are purged, so no chunk can be built on it
 * meanwhile. */
size_t kp_purge_dirty_units(void) {
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
        if (!atomic_compare_exchange_strong_explicit(&r->claimed[w], &cur, cur | m, memory_order_acq_rel,
                                                     memory_order_relaxed))
          continue;
        if (kp_fetch_and_acq_rel(&r->dirty[w], ~m) & m) {
          kp_fetch_sub_relaxed(&dirty_units, 1);
          kp_os_purge((char *)r + ((size_t)(w * 64 + bit) << KP_UNIT_SHIFT), KP_UNIT_SIZE);
          purged += KP_UNIT_SIZE;
        }
        kp_fetch_and_acq_rel(&r->claimed[w], ~m);
      }
    }
  }
  return purged;
}
