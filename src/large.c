/* The dedicated, large and huge tiers.
 *
 * dedicated (32 KiB .. 4 MiB): one chunk of whole units, 256 KiB-aligned.
 * large (4 .. 32 MiB): one 32 MiB-aligned mapping, one radix slot.
 * huge (> 32 MiB): one mapping over several slots, registered at its head
 *   slot (the block's only valid pointer lies there) and marked in the
 *   others, so a pointer into it is known for ours.
 * Freed dedicated chunks and mappings up to the cache's top go to the
 * recycle cache (release.c decides); a thread that frees what it allocated
 * keeps it in its own L1, reached here without atomics. */
#include "internal.h"

#include <string.h>

/* ---- Dedicated chunks --------------------------------------------------- */

static void *dedicated_from(kp_heap *h, kp_chunk *c) {
  kp_chunk_set_home(c, h);
  kp_store_relaxed(&c->kind, KP_CHUNK_DEDICATED);
  return c->block;
}

static void *alloc_dedicated(size_t size, bool zero) {
  kp_heap *h = kp_heap_for_thread();
  unsigned units = (unsigned)((size + KP_UNIT_SIZE - 1) >> KP_UNIT_SHIFT);
  bool zeroed;
  kp_chunk *c = kp_chunk_obtain(h, units, &zeroed);
  if (c == NULL) return NULL;
  void *p = dedicated_from(h, c);
  if (zero && !zeroed) kp_zero_block(p, size, kp_chunk_bytes(c));
  return p;
}

void kp_free_dedicated(kp_heap *h, kp_chunk *c) {
  kp_chunk_retire(h != NULL && kp_load_relaxed(&c->owner) == kp_dedicated_token(h) ? h : NULL, c);
}

/* ---- Mappings ------------------------------------------------------------ */

/* The heap mark a mapping of len bytes carries: h's when L1 may take it
 * back [MAP-3], otherwise none. */
static uintptr_t heap_hint(const kp_heap *h, size_t len) {
  return h == NULL || !kp_map_is_class(len) ? 0 : h->map_hint;
}

/* Records that heap h now holds the mapping (for the cache's choice of
 * L1 at free). */
static void *mapping_from(kp_heap *h, void *p) {
  uintptr_t e = kp_radix_get((uintptr_t)p);
  uintptr_t mark = heap_hint(h, KP_MAP_LEN(e));
  if ((e & KP_MAP_HEAP_MASK) != mark) kp_radix_set((uintptr_t)p, (e & ~KP_MAP_HEAP_MASK) | mark);
  *(uintptr_t *)p = 0; /* the cache's tag */
  return p;
}

/* A new mapping of len bytes, registered in the address map. */
static void *map_block(kp_heap *h, size_t len, size_t align) {
  if (!kp_rt_may_map() || !kp_reserve_bytes(len)) return NULL;
  void *p = kp_map_aligned(len, align);
  if (p == NULL) {
    kp_unreserve_bytes(len);
    return NULL;
  }
  kp_rt_advise_block(p, len);
  uintptr_t kind = len <= KP_LARGE_MAX ? KP_MAP_LARGE : KP_MAP_HUGE;
  if (!kp_radix_set_mapping((uintptr_t)p, len, kind | heap_hint(h, len))) {
    kp_unmap(p, len, true);
    return NULL;
  }
  return p;
}

static void *alloc_mapping(size_t size, size_t align, bool zero) {
  kp_heap *h = kp_heap_for_thread();
  size_t len = kp_map_length(size);
  if (align <= KP_REGION_SIZE && len <= kp_cache_top()) {
    bool zeroed;
    void *p = kp_cache_take_mapping(h, len, &zeroed);
    if (p != NULL) {
      kp_track_reuse(p, KP_MAP_LEN(kp_radix_get((uintptr_t)p)));
      mapping_from(h, p);
      if (zero && !zeroed) kp_zero_block(p, size, KP_MAP_LEN(kp_radix_get((uintptr_t)p)));
      return p;
    }
  }
  /* Fresh mappings are zero-filled: `zero` needs no work. */
  return map_block(h, len, align > KP_REGION_SIZE ? align : KP_REGION_SIZE);
}

void kp_free_mapping(void *p, uintptr_t entry) {
  kp_heap *h = kp_heap_if_any();
  bool mine = h != NULL && (entry & KP_MAP_HEAP_MASK) == h->map_hint;
  kp_mapping_retire(mine ? h : NULL, p, KP_MAP_LEN(entry));
}

/* realloc of mapping p (its address-map entry `entry`) to `size` bytes,
 * past its length: the pages move to the longer mapping, none is copied
 * or faulted in again (a buffer grown step by step would otherwise fault
 * in every page at every step).  In place where the address space after
 * the block is free, else onto a fresh aligned range.  Returns the block,
 * or NULL with nothing changed for the caller to copy. */
void *kp_mapping_grow(void *p, uintptr_t entry, size_t size) {
  size_t len = KP_MAP_LEN(entry), new_len = kp_map_length(size);
  uintptr_t old_bits = entry & (KP_MAP_KIND_MASK | KP_MAP_HEAP_MASK); /* to put back */
  if (new_len <= len || !kp_rt_may_map() || !kp_reserve_bytes(new_len - len)) return NULL;
  kp_heap *h = kp_heap_if_any();
  uintptr_t bits = (new_len <= KP_LARGE_MAX ? KP_MAP_LARGE : KP_MAP_HUGE) | heap_hint(h, new_len);
  int rc = kp_os_remap(p, len, new_len, NULL);
  if (rc == 0) {
    if (kp_radix_set_mapping((uintptr_t)p, new_len, bits)) return p;
    /* No room for the address map's entries: back to what it was. */
    (void)kp_os_remap(p, new_len, len, NULL);
    (void)kp_radix_set_mapping((uintptr_t)p, len, old_bits);
    kp_unreserve_bytes(new_len - len);
    return NULL;
  }
  void *q = rc == ENOTSUP ? NULL : kp_map_aligned(new_len, KP_REGION_SIZE);
  if (q != NULL && !kp_radix_set_mapping((uintptr_t)q, new_len, bits)) {
    (void)kp_unmap(q, new_len, false);
    q = NULL;
  }
  if (q != NULL) {
    /* p's range is unmapped by the move: its entries go first [MAP-1]. */
    kp_radix_clear_mapping((uintptr_t)p, len);
    if (kp_os_remap(p, len, new_len, q) == 0) return q; /* with p's advice */
    (void)kp_radix_set_mapping((uintptr_t)p, len, old_bits);
    kp_radix_clear_mapping((uintptr_t)q, new_len);
    (void)kp_unmap(q, new_len, false);
  }
  kp_unreserve_bytes(new_len - len);
  return NULL;
}

/* Whether a mapping may be cut shorter: the OS unmaps part of a mapping,
 * and the thread may make the system call. */
bool kp_mapping_can_cut(void) { return kp_os.has_partial_unmap && !kp_rt_defers(); }

/* Mapping p of len bytes keeps its first new_len, with the heap mark
 * `mark`, and gives back its tail (a refused unmap is retried later
 * [MAP-2]). */
static void mapping_cut(void *p, size_t len, size_t new_len, uintptr_t mark) {
  uintptr_t kind = new_len <= KP_LARGE_MAX ? KP_MAP_LARGE : KP_MAP_HUGE;
  kp_radix_shrink_mapping((uintptr_t)p, len, new_len, kind | mark);
  (void)kp_unmap((char *)p + new_len, len - new_len, true);
}

/* realloc of mapping p (its address-map entry `entry`) to `size` bytes,
 * under half its length but still above the dedicated tier: the block
 * keeps its start and contents and gives back its tail, nothing copied
 * (a refused unmap is retried later [MAP-2]).  False with nothing changed
 * where the OS cannot unmap part of a mapping, and in a realtime thread,
 * whose frees make no system call: the caller copies. */
bool kp_mapping_shrink(void *p, uintptr_t entry, size_t size) {
  size_t len = KP_MAP_LEN(entry), new_len = kp_map_length(size);
  if (size <= KP_DEDICATED_MAX || new_len >= len || !kp_mapping_can_cut()) return false;
  mapping_cut(p, len, new_len, heap_hint(kp_heap_if_any(), new_len));
  return true;
}

void kp_mapping_cut(void *p, size_t have, size_t len) { mapping_cut(p, have, len, 0); }

/* ---- Entry points -------------------------------------------------------- */

/* Serves size > 32 KiB, or an alignment the buckets cannot give.  Returns
 * NULL when the pool cannot (the caller falls back). */
void *kp_alloc_big(size_t size, size_t align, bool zero) {
  if (size == 0) size = 1;
  void *p = size <= KP_DEDICATED_MAX && align <= KP_DEDICATED_ALIGN_MAX ? alloc_dedicated(size, zero)
                                                                        : alloc_mapping(size, align, zero);
  if (p != NULL) kp_track_alloc(p, zero);
  return p;
}

void *kp_malloc_big_slow(size_t size) {
  if (unlikely(size > KP_MAX_REQUEST)) {
    errno = ENOMEM;
    return NULL;
  }
  if (unlikely(kp_tls_heap == &kp_exited_heap)) return kp_malloc_late(size, 0, false);
  void *p = kp_alloc_big(size, 0, false);
  return p ? p : kp_fallback_alloc(size, 0, false);
}
