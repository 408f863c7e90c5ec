/* The dedicated, large and huge tiers.
 *
 * dedicated (32 KiB .. 4 MiB): one chunk of whole units, 256 KiB-aligned;
 *   any thread may free it (its units go straight back to the region).
 * large (4 .. 32 MiB): one 32 MiB-aligned mapping, one radix slot.
 * huge (> 32 MiB): one mapping over several slots; only the head slot is
 *   registered, since the block's only valid pointer lies in it.
 * Large and huge blocks are unmapped on free. */
#include "internal.h"

#include <string.h>

static void *alloc_dedicated(size_t size, bool zero) {
  kp_heap *h = kp_tls_heap;
  unsigned units = (unsigned)((size + KP_UNIT_SIZE - 1) >> KP_UNIT_SHIFT);
  bool zeroed;
  kp_chunk *c = kp_chunk_claim(h == &kp_empty_heap ? NULL : h, units, &zeroed);
  if (c == NULL) return NULL;
  c->kind = KP_CHUNK_DEDICATED;
  void *p = kp_chunk_start(kp_region_of(c), c);
  if (zero && !zeroed) memset(p, 0, size);
  return p;
}

static void *map_block(size_t size, size_t align, uintptr_t kind) {
  size_t page = kp_os_page_size();
  size_t len = (size + page - 1) & ~(page - 1);
  if (!kp_reserve_bytes(len)) return NULL;
  void *p = kp_os_map_aligned(len, align);
  if (p == NULL) {
    kp_unreserve_bytes(len);
    return NULL;
  }
  if (!kp_radix_set((uintptr_t)p, len | kind)) {
    kp_os_unmap(p, len);
    kp_unreserve_bytes(len);
    return NULL;
  }
  return p;
}

/* Serves size > 32 KiB, or an alignment the buckets cannot give.  Returns
 * NULL when the pool cannot (the caller falls back). */
void *kp_alloc_big(size_t size, size_t align, bool zero) {
  if (size <= KP_DEDICATED_MAX && align <= KP_DEDICATED_ALIGN_MAX) return alloc_dedicated(size, zero);
  if (size <= KP_LARGE_MAX && align <= KP_REGION_SIZE) return map_block(size, KP_REGION_SIZE, KP_RADIX_LARGE);
  /* Fresh mappings are zero-filled: `zero` needs no work here. */
  return map_block(size, align > KP_REGION_SIZE ? align : KP_REGION_SIZE, KP_RADIX_HUGE);
}

void kp_free_dedicated(kp_chunk *c, void *p) {
  if (p != kp_chunk_start(kp_region_of(c), c)) return; /* not a block start */
  kp_chunk_release(c);
}

void kp_free_mapping(void *p, uintptr_t entry) {
  size_t len = entry & ~KP_RADIX_KIND_MASK;
  /* Unregister first: once unmapped, the range may be mapped by anyone. */
  kp_radix_clear((uintptr_t)p);
  kp_os_unmap(p, len);
  kp_unreserve_bytes(len);
}

size_t kp_usable_size_of(const void *p, uintptr_t entry, bool *ours) {
  *ours = true;
  if (entry == KP_RADIX_REGION) {
    kp_chunk *c = kp_chunk_of(kp_region_of(p), p);
    if (c->kind == KP_CHUNK_BUCKET) return c->slot_size;
    if (c->kind == KP_CHUNK_DEDICATED) return (size_t)c->units << KP_UNIT_SHIFT;
    return 0;
  }
  if (entry != 0) {
    size_t offset = (uintptr_t)p & KP_REGION_MASK;
    if (offset == 0) return entry & ~KP_RADIX_KIND_MASK;
    if (offset < (entry & ~KP_RADIX_KIND_MASK)) return 0;
  }
  *ours = false;
  return 0;
}
