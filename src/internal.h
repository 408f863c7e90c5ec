/* Types, constants and the inline fast paths shared by the core.
 * Internal names carry the prefix kp_; none of them is exported. */
#ifndef KP_INTERNAL_H
#define KP_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "os.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define KP_NOINLINE __attribute__((noinline))
#define KP_INLINE static inline __attribute__((always_inline))
#define KP_CACHE_LINE 64

/* Atomics name their memory order at the call site. */
#define kp_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define kp_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define kp_store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define kp_store_release(p, v) atomic_store_explicit((p), (v), memory_order_release)
#define kp_fetch_or_acq_rel(p, v) atomic_fetch_or_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_and_acq_rel(p, v) atomic_fetch_and_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_add_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define kp_fetch_sub_relaxed(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_relaxed)
#define kp_cas_weak_acq_rel(p, expected, desired)                                                   \
  atomic_compare_exchange_weak_explicit((p), (expected), (desired), memory_order_acq_rel,           \
                                        memory_order_relaxed)

/* ---- Address-space geometry ------------------------------------------- */

#define KP_REGION_SHIFT 25 /* 32 MiB regions */
#define KP_REGION_SIZE ((size_t)1 << KP_REGION_SHIFT)
#define KP_REGION_MASK (KP_REGION_SIZE - 1)
#define KP_UNIT_SHIFT 18 /* 256 KiB units */
#define KP_UNIT_SIZE ((size_t)1 << KP_UNIT_SHIFT)
#define KP_UNITS_PER_REGION 128
#define KP_UNIT_WORDS (KP_UNITS_PER_REGION / 64)
#define KP_MAX_CHUNK_UNITS 16

#define KP_SMALL_MAX ((size_t)32 << 10)     /* bucket tier: 1 B .. 32 KiB   */
#define KP_DEDICATED_MAX ((size_t)4 << 20)  /* dedicated:  .. 4 MiB         */
#define KP_LARGE_MAX KP_REGION_SIZE         /* large:      .. 32 MiB        */
#define KP_DEDICATED_ALIGN_MAX KP_UNIT_SIZE /* chunks are unit-aligned      */
#define KP_MAX_REQUEST ((size_t)PTRDIFF_MAX)

/* ---- Address map (radix tree over 32 MiB slots) ------------------------ */

/* A slot's entry: 0 = foreign; KP_RADIX_REGION = a pool region; otherwise
 * the byte length of a large or huge mapping (a page multiple) with the
 * kind in the low bits. */
#define KP_RADIX_REGION ((uintptr_t)1)
#define KP_RADIX_LARGE ((uintptr_t)2)
#define KP_RADIX_HUGE ((uintptr_t)3)
#define KP_RADIX_KIND_MASK ((uintptr_t)3)

#define KP_ADDRESS_BITS 48
#define KP_RADIX_LEAF_BITS 12
#define KP_RADIX_ROOT_BITS (KP_ADDRESS_BITS - KP_REGION_SHIFT - KP_RADIX_LEAF_BITS)
#define KP_RADIX_LEAF_ENTRIES ((size_t)1 << KP_RADIX_LEAF_BITS)
#define KP_RADIX_ROOT_ENTRIES ((size_t)1 << KP_RADIX_ROOT_BITS)

typedef _Atomic(uintptr_t) kp_radix_leaf[KP_RADIX_LEAF_ENTRIES];
extern KP_HIDDEN _Atomic(kp_radix_leaf *) kp_radix_root[KP_RADIX_ROOT_ENTRIES];

/* One bit per 32 MiB slot of the 47-bit user address space: set when the
 * slot is a pool region (regions are never unmapped, so never cleared).
 * The free hit path tests it instead of walking the radix tree. */
#define KP_USER_ADDRESS_BITS 47
#define KP_REGION_BITMAP_WORDS ((size_t)1 << (KP_USER_ADDRESS_BITS - KP_REGION_SHIFT - 6))
extern KP_HIDDEN _Atomic(uint64_t) kp_region_bitmap[KP_REGION_BITMAP_WORDS];

KP_INLINE bool kp_is_region(uintptr_t addr) {
  uintptr_t index = addr >> (KP_REGION_SHIFT + 6);
  if (unlikely(index >= KP_REGION_BITMAP_WORDS)) return false;
  uint64_t word = kp_load_relaxed(&kp_region_bitmap[index]);
  return (word >> ((addr >> KP_REGION_SHIFT) & 63)) & 1;
}

KP_INLINE uintptr_t kp_radix_get(uintptr_t addr) {
  uintptr_t top = addr >> (KP_REGION_SHIFT + KP_RADIX_LEAF_BITS);
  if (unlikely(top >= KP_RADIX_ROOT_ENTRIES)) return 0;
  kp_radix_leaf *leaf = kp_load_relaxed(&kp_radix_root[top]);
  if (unlikely(leaf == NULL)) return 0;
  return kp_load_relaxed(&(*leaf)[(addr >> KP_REGION_SHIFT) & (KP_RADIX_LEAF_ENTRIES - 1)]);
}

/* ---- Chunks and regions ------------------------------------------------ */

typedef struct kp_block {
  struct kp_block *next;
} kp_block;

typedef struct kp_heap kp_heap;

enum { KP_CHUNK_NONE = 0, KP_CHUNK_BUCKET = 1, KP_CHUNK_DEDICATED = 2 };
enum { KP_LIST_NONE = 0, KP_LIST_AVAIL = 1, KP_LIST_FULL = 2 };

/* A chunk's header lives in its region's metadata unit, indexed by the
 * chunk's first unit, so every slot of the chunk is usable and aligned.
 * The first cache line is the owner's; remote frees use the second. */
typedef struct kp_chunk {
  kp_block *free;       /* slots to hand out */
  kp_block *local_free; /* slots the owner freed */
  _Atomic(kp_heap *) owner;
  int32_t used;      /* slots out of the owner's lists (incl. uncollected remote frees) */
  uint32_t capacity; /* slots in the chunk */
  uint32_t carved;   /* slots made into list entries so far */
  uint32_t slot_size;
  uint8_t cls;
  uint8_t units;
  uint8_t kind;
  uint8_t list;                 /* KP_LIST_*: where the owning heap keeps it */
  struct kp_chunk *next, *prev; /* the owner's avail or full list */
  _Alignas(KP_CACHE_LINE) _Atomic(kp_block *) remote_free;
} kp_chunk;

typedef struct kp_region {
  _Atomic uint64_t claimed[KP_UNIT_WORDS]; /* unit in a chunk (unit 0: metadata) */
  _Atomic uint64_t dirty[KP_UNIT_WORDS];   /* free unit whose pages may be resident */
  _Atomic uint64_t orphans[KP_UNIT_WORDS]; /* first unit of a chunk with no owner */
  struct kp_region *next;                  /* push-only list of all regions */
  kp_chunk chunks[KP_UNITS_PER_REGION];    /* indexed by a chunk's first unit */
  /* unit -> header of the chunk covering it: an interior pointer's chunk
   * is one load away (the back map). */
  kp_chunk *unit_chunk[KP_UNITS_PER_REGION];
} kp_region;

_Static_assert(sizeof(kp_region) <= KP_UNIT_SIZE, "region metadata must fit in unit 0");
_Static_assert(offsetof(kp_chunk, remote_free) == KP_CACHE_LINE, "owner fields fit one cache line");

KP_INLINE kp_region *kp_region_of(const void *p) {
  return (kp_region *)((uintptr_t)p & ~(uintptr_t)KP_REGION_MASK);
}
KP_INLINE unsigned kp_unit_of(const void *p) {
  return (unsigned)(((uintptr_t)p >> KP_UNIT_SHIFT) & (KP_UNITS_PER_REGION - 1));
}
KP_INLINE kp_chunk *kp_chunk_of(kp_region *r, const void *p) { return r->unit_chunk[kp_unit_of(p)]; }
KP_INLINE unsigned kp_chunk_index(kp_region *r, kp_chunk *c) { return (unsigned)(c - r->chunks); }
KP_INLINE char *kp_chunk_start(kp_region *r, kp_chunk *c) {
  return (char *)r + ((size_t)kp_chunk_index(r, c) << KP_UNIT_SHIFT);
}

/* region.c */
KP_HIDDEN kp_chunk *kp_chunk_claim(kp_heap *heap, unsigned units, bool *zeroed);
KP_HIDDEN void kp_chunk_release(kp_chunk *c);
KP_HIDDEN bool kp_radix_set(uintptr_t addr, uintptr_t entry);
KP_HIDDEN void kp_radix_clear(uintptr_t addr);
KP_HIDDEN kp_region *kp_regions_first(void);
KP_HIDDEN size_t kp_purge_dirty_units(void);
KP_HIDDEN bool kp_reserve_bytes(size_t bytes);
KP_HIDDEN void kp_unreserve_bytes(size_t bytes);

/* ---- Size classes ------------------------------------------------------ */

#define KP_NUM_CLASSES 41
extern KP_HIDDEN const uint8_t kp_class_of_granule[(KP_SMALL_MAX >> 3) + 1];
extern KP_HIDDEN const uint32_t kp_class_size[KP_NUM_CLASSES];
extern KP_HIDDEN const uint8_t kp_class_units[KP_NUM_CLASSES];

KP_INLINE unsigned kp_size_class(size_t size) { return kp_class_of_granule[(size + 7) >> 3]; }
/* size_class.c: smallest class >= size whose slots are `align`-aligned,
 * or -1 when none is. */
KP_HIDDEN int kp_size_class_aligned(size_t size, size_t align);

/* ---- Per-thread heaps -------------------------------------------------- */

struct kp_heap {
  kp_chunk *current[KP_NUM_CLASSES]; /* never NULL: &kp_empty_chunk when none */
  kp_chunk *avail[KP_NUM_CLASSES];   /* chunks with slots to hand out */
  kp_chunk *full[KP_NUM_CLASSES];    /* chunks with none (remote frees may come) */
  _Atomic uint8_t remote_hint[KP_NUM_CLASSES]; /* a full chunk got a remote free */
  kp_region *region_hint;
  struct kp_heap_slab *slab;
  unsigned slab_index;
};

extern KP_HIDDEN __thread kp_heap *kp_tls_heap __attribute__((tls_model("initial-exec")));
extern KP_HIDDEN kp_chunk kp_empty_chunk;
extern KP_HIDDEN kp_heap kp_empty_heap;

/* heap.c */
KP_HIDDEN kp_heap *kp_heap_for_thread(void);
KP_HIDDEN void kp_heap_list_remove(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_heap_list_push(kp_heap *h, kp_chunk *c, uint8_t list);
KP_HIDDEN bool kp_heap_adopt_orphan(kp_heap *h, unsigned cls);
KP_HIDDEN void kp_heap_collect(kp_heap *h);
KP_HIDDEN void kp_orphans_release_empty(void);

/* alloc.c */
KP_HIDDEN KP_NOINLINE void *kp_malloc_small_slow(kp_heap *h, size_t size);
KP_HIDDEN KP_NOINLINE void *kp_malloc_big(size_t size);
KP_HIDDEN void kp_chunk_init_bucket(kp_chunk *c, kp_heap *h, unsigned cls);

/* free.c */
KP_HIDDEN KP_NOINLINE void kp_free_owned_slow(kp_heap *h, kp_chunk *c);
KP_HIDDEN KP_NOINLINE void kp_free_generic(void *p);

/* remote.c */
KP_HIDDEN void kp_remote_free(kp_chunk *c, kp_block *b);
KP_HIDDEN uint32_t kp_remote_collect(kp_chunk *c);
KP_HIDDEN uint32_t kp_remote_collect_now(kp_chunk *c);

/* large.c: the dedicated, large and huge tiers */
KP_HIDDEN void *kp_alloc_big(size_t size, size_t align, bool zero);
KP_HIDDEN void kp_free_dedicated(kp_chunk *c, void *p);
KP_HIDDEN void kp_free_mapping(void *p, uintptr_t entry);
KP_HIDDEN size_t kp_usable_size_of(const void *p, uintptr_t entry, bool *ours);

/* sys_alloc.c: the system allocator, for foreign pointers and past the cap */
KP_HIDDEN void *kp_sys_malloc(size_t size);
KP_HIDDEN void *kp_sys_calloc(size_t count, size_t size);
KP_HIDDEN void *kp_sys_realloc(void *p, size_t size);
KP_HIDDEN void *kp_sys_memalign(size_t align, size_t size);
KP_HIDDEN void kp_sys_free(void *p);
KP_HIDDEN size_t kp_sys_usable_size(void *p);

/* api.c: the entry points the override layer forwards to */
KP_HIDDEN void *kp_fallback_alloc(size_t size, size_t align, bool zero);
KP_HIDDEN void *kp_malloc(size_t size);
KP_HIDDEN void *kp_calloc(size_t count, size_t size);
KP_HIDDEN void *kp_realloc(void *p, size_t size);
KP_HIDDEN void kp_free(void *p);
KP_HIDDEN void *kp_memalign(size_t align, size_t size);
KP_HIDDEN int kp_posix_memalign(void **out, size_t align, size_t size);
KP_HIDDEN size_t kp_usable_size(const void *p);
/* Returns the bytes whose pages went back to the OS. */
KP_HIDDEN size_t kp_trim(void);

/* ---- The bucket tier's hit paths --------------------------------------- */

/* `used` carries this flag while the chunk is on its heap's full list, so
 * the owner's free tests "now empty or was full" with one compare. */
#define KP_USED_FULL INT32_MIN
#define KP_USED_COUNT(c) ((c)->used & INT32_MAX)

/* Pops a slot of the class for `size`; NULL only when neither the pool
 * nor the system allocator can serve it. */
KP_INLINE void *kp_malloc_small(size_t size) {
  kp_heap *h = kp_tls_heap;
  unsigned cls = kp_size_class(size);
  kp_chunk *c = h->current[cls];
  kp_block *b = c->free;
  if (likely(b != NULL)) {
    c->free = b->next;
    c->used++;
    return b;
  }
  return kp_malloc_small_slow(h, size);
}

KP_INLINE void *kp_malloc_inline(size_t size) {
  if (likely(size <= KP_SMALL_MAX)) return kp_malloc_small(size);
  return kp_malloc_big(size);
}

KP_INLINE void kp_free_inline(void *p) {
  if (likely(kp_is_region((uintptr_t)p))) {
    kp_chunk *c = kp_chunk_of(kp_region_of(p), p);
    kp_heap *h = kp_tls_heap;
    if (likely(kp_load_relaxed(&c->owner) == h)) {
      kp_block *b = (kp_block *)p;
      b->next = c->local_free;
      c->local_free = b;
      if (unlikely(--c->used <= 0)) kp_free_owned_slow(h, c);
      return;
    }
  }
  kp_free_generic(p);
}

#endif
