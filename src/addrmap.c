/* The address map, and what any pointer is.
 *
 * Two structures classify an address:
 *  - kp_addr_map, 16 bits per 32 MiB slot: a bit set when the slot
 *    becomes a pool region and never cleared [REG-2], or at a mapping's
 *    head the heap mark and L1 index of its radix entry [MAP-4]: the free
 *    hit path's one load;
 *  - a two-level radix tree over the same slots whose entry describes a
 *    large or huge mapping of ours: at its head slot its length and kind,
 *    in every further slot it covers a continuation mark with the bytes of
 *    that slot it covers [MAP-1].
 * kp_lookup answers, for any pointer, one of: foreign, a live slot, a live
 * dedicated block, a live mapping, or a pointer into the pool's memory
 * that is not a live block (with what is wrong with it).  free, realloc
 * and malloc_usable_size all go through it. */
#include "internal.h"

uint16_t kp_addr_map[KP_SLOTS];

_Atomic(kp_radix_leaf *) kp_radix_root[KP_RADIX_ROOT_ENTRIES];

void kp_addr_map_set_region(uintptr_t addr) {
  __atomic_store_n(&kp_addr_map[addr >> KP_REGION_SHIFT], KP_ADDR_REGION, __ATOMIC_RELEASE);
}

/* The address map's value for a mapping slot whose radix entry is e: at
 * a head that carries a heap's mark, the mark and the L1 index of its
 * length, a class length [MAP-3, MAP-4]; anything else 0. */
static uint16_t addr_map_bits(uintptr_t e) {
  uintptr_t kind = e & KP_MAP_KIND_MASK, mark = e & KP_MAP_HEAP_MASK;
  if ((kind != KP_MAP_LARGE && kind != KP_MAP_HUGE) || mark == 0) return 0;
  return (uint16_t)(kp_addr_mark(mark) | kp_cache_map_index(KP_MAP_LEN(e)) << KP_ADDR_L1_SHIFT);
}

static _Atomic uintptr_t *radix_slot(uintptr_t addr, bool create) {
  uintptr_t slot = addr >> KP_REGION_SHIFT;
  if (slot >= KP_SLOTS) return NULL;
  uintptr_t top = slot >> KP_RADIX_LEAF_BITS;
  kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[top]);
  if (leaf == NULL) {
    if (!create) return NULL;
    kp_rt_note_map();
    kp_radix_leaf *fresh;
    if (kp_os_map(NULL, sizeof(kp_radix_leaf), (void **)&fresh) != 0) return NULL;
    kp_radix_leaf *expected = NULL;
    if (kp_cas_strong_acq_rel(&kp_radix_root[top], &expected, fresh)) {
      leaf = fresh;
    } else {
      kp_unmap(fresh, sizeof(kp_radix_leaf), false);
      leaf = expected;
    }
  }
  return &(*leaf)[slot & (KP_RADIX_LEAF_ENTRIES - 1)];
}

bool kp_radix_set(uintptr_t addr, uintptr_t entry) {
  _Atomic uintptr_t *slot = radix_slot(addr, true);
  if (slot == NULL) return false;
  kp_store_release(slot, entry);
  /* A region's slot holds no mapping, and the bits go with the entry. */
  kp_assert("REG-2", !kp_is_region((void *)addr));
  __atomic_store_n(&kp_addr_map[addr >> KP_REGION_SHIFT], addr_map_bits(entry), __ATOMIC_RELEASE);
  return true;
}

/* Registers a mapping of len bytes at p (slot-aligned): its head entry
 * last, so the block is never seen half registered. */
bool kp_radix_set_mapping(uintptr_t p, size_t len, uintptr_t kind_bits) {
  for (size_t off = KP_REGION_SIZE; off < len; off += KP_REGION_SIZE) {
    size_t covered = len - off < KP_REGION_SIZE ? len - off : KP_REGION_SIZE;
    if (!kp_radix_set(p + off, covered | KP_MAP_CONT)) {
      kp_radix_clear_mapping(p, off);
      return false;
    }
  }
  /* Only a class length carries a heap's mark, which sends it to L1. */
  kp_assert("MAP-3", (kind_bits & KP_MAP_HEAP_MASK) == 0 || kp_map_is_class(len));
  return kp_radix_set(p, len | kind_bits);
}

/* Marks the mapping's head as released (a later free of it is a double
 * free, not a foreign pointer) and clears its other slots, before the
 * range is unmapped: once unmapped it may be mapped by anyone [MAP-1]. */
void kp_radix_clear_mapping(uintptr_t p, size_t len) {
  kp_radix_set(p, KP_MAP_RELEASED);
  for (size_t off = KP_REGION_SIZE; off < len; off += KP_REGION_SIZE) kp_radix_set(p + off, 0);
}

/* A mapping of len bytes at p that keeps only its first new_len: the head
 * takes the new length and marks, and the slots past it are cleared,
 * before the tail is unmapped [MAP-1].  The slots it keeps exist already,
 * so this cannot fail. */
void kp_radix_shrink_mapping(uintptr_t p, size_t len, size_t new_len, uintptr_t kind_bits) {
  (void)kp_radix_set_mapping(p, new_len, kind_bits);
  size_t first_gone = (new_len + KP_REGION_SIZE - 1) & ~KP_REGION_MASK;
  for (size_t off = first_gone; off < len; off += KP_REGION_SIZE) kp_radix_set(p + off, 0);
}

/* ---- Classification ------------------------------------------------------ */

static void invalid(kp_ptr_info *out, const char *problem) {
  out->kind = KP_PTR_INVALID;
  out->problem = problem;
}

void kp_lookup_in_region(const void *p, kp_chunk *c, kp_ptr_info *out) {
  out->chunk = c;
  switch (kp_load_relaxed(&c->kind)) {
  case KP_CHUNK_BUCKET: {
    if (!kp_is_slot_start(c, p)) {
      invalid(out, "not the start of a block (an interior or misaligned pointer)");
    } else if (((const kp_block *)p)->tag == (uintptr_t)c) {
      invalid(out, "double free (the block is already free)");
    } else if (kp_slot_index(c, p) >= __atomic_load_n(&c->carved, __ATOMIC_RELAXED)) {
      /* Past the carved part: never handed out, or free when a trim gave
       * its page back, its free tag with it.  The owner may change
       * `carved` meanwhile, but no live slot is ever past a value it
       * held [TAIL-1]. */
      invalid(out, "double free (the block is already free, or was never handed out)");
    } else {
      out->kind = KP_PTR_SLOT;
      out->usable = kp_class_size[c->cls];
    }
    return;
  }
  case KP_CHUNK_DEDICATED:
    if (p != kp_chunk_start(c)) {
      invalid(out, "not the start of a block (an interior pointer)");
    } else if (*(const uintptr_t *)p == kp_free_tag(p)) { /* in its thread's hot cell [HOT-1] */
      invalid(out, "double free (the block is already free)");
    } else {
      out->kind = KP_PTR_DEDICATED;
      out->usable = kp_chunk_bytes(c);
    }
    return;
  case KP_CHUNK_CACHED:
    invalid(out, p == kp_chunk_start(c) ? "double free (the block is already free)"
                                        : "pointer into a freed block");
    return;
  case KP_CHUNK_META:
    invalid(out, "pointer into the pool's metadata");
    return;
  default:
    invalid(out, "pointer into free pool memory (a block already freed?)");
    return;
  }
}

void kp_lookup(const void *p, kp_ptr_info *out) {
  if (kp_is_region(p)) {
    kp_lookup_in_region(p, kp_chunk_of(p), out);
    return;
  }
  uintptr_t e = kp_radix_get((uintptr_t)p);
  uintptr_t head = (uintptr_t)p & ~(uintptr_t)KP_REGION_MASK;
  size_t offset = (size_t)((uintptr_t)p - head);
  out->entry = e;
  switch (e & KP_MAP_KIND_MASK) {
  case KP_MAP_LARGE:
  case KP_MAP_HUGE:
    if (offset >= KP_MAP_LEN(e)) break; /* past the block: someone else's */
    if (offset != 0) {
      invalid(out, "not the start of a block (an interior pointer)");
    } else if (*(const uintptr_t *)p == kp_free_tag(p)) {
      invalid(out, "double free (the block is already free)");
    } else {
      out->kind = KP_PTR_MAPPING;
      out->usable = KP_MAP_LEN(e);
    }
    return;
  case KP_MAP_CONT:
    if (offset < KP_MAP_LEN(e)) {
      invalid(out, "not the start of a block (an interior pointer)");
      return;
    }
    break;
  case KP_MAP_RELEASED:
    if (offset != 0) break;
    /* A realtime thread cannot ask the OS: the pointer is taken as
     * foreign (docs/realtime.md, exclusions). */
    if (kp_rt_defers()) break;
    /* Once unmapped, the range is anyone's: the system allocator (our
     * fallback) or the program may have mapped it since, and then p is
     * theirs.  Unmapped still, p can only be a block of ours freed twice. */
    if (!kp_os_is_mapped(p)) {
      invalid(out, "double free (the block was already freed and unmapped)");
      return;
    }
    _Atomic uintptr_t *slot = radix_slot((uintptr_t)p, false);
    if (slot != NULL) kp_cas_strong_acq_rel(slot, &e, 0); /* the mark is stale */
    break;
  }
  out->kind = KP_PTR_FOREIGN;
}
