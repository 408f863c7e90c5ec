/* Types, constants and the inline hit paths shared by the core.
 * Internal names carry the prefix kp_; none of them is exported.
 * Prototypes are grouped under the file that defines them. */
#ifndef KP_INTERNAL_H
#define KP_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kame_pool.h"
#include "os.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define KP_NOINLINE __attribute__((noinline))
#define KP_COLD __attribute__((cold, noinline))
#define KP_NORETURN __attribute__((noreturn))
#define KP_INLINE static inline __attribute__((always_inline))
#define KP_CACHE_LINE 64
/* The entry points of the hit paths start a cache line: their hot part
 * then spans as few lines as it can, whatever precedes them. */
#define KP_HOT_ENTRY __attribute__((aligned(KP_CACHE_LINE)))
#define KP_STRINGIFY_(x) #x
#define KP_STRINGIFY(x) KP_STRINGIFY_(x)

/* Atomics name their memory order at the call site. */
#define kp_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define kp_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define kp_store_relaxed(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define kp_store_release(p, v) atomic_store_explicit((p), (v), memory_order_release)
#define kp_exchange_acq_rel(p, v) atomic_exchange_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_or_acq_rel(p, v) atomic_fetch_or_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_and_acq_rel(p, v) atomic_fetch_and_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_add_acq_rel(p, v) atomic_fetch_add_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_sub_acq_rel(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_acq_rel)
#define kp_fetch_add_relaxed(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define kp_fetch_sub_relaxed(p, v) atomic_fetch_sub_explicit((p), (v), memory_order_relaxed)
#define kp_cas_weak_acq_rel(p, expected, desired)                                                   \
  atomic_compare_exchange_weak_explicit((p), (expected), (desired), memory_order_acq_rel,           \
                                        memory_order_relaxed)
#define kp_cas_strong_acq_rel(p, expected, desired)                                                 \
  atomic_compare_exchange_strong_explicit((p), (expected), (desired), memory_order_acq_rel,         \
                                          memory_order_acquire)

/* ---- Debug assertions ---------------------------------------------------
 * KP_DEBUG=1 checks cheap invariants, KP_DEBUG=2 also expensive ones.  Each
 * assertion names the invariant of docs/invariants.md it guards. */
#ifndef KP_DEBUG
#define KP_DEBUG 0
#endif
#define kp_assert_level(level, id, cond)                                                            \
  do {                                                                                              \
    if (KP_DEBUG >= (level) && unlikely(!(cond))) kp_assert_failed(id, #cond, __FILE__, __LINE__); \
  } while (0)
#define kp_assert(id, cond) kp_assert_level(1, id, cond)
#define kp_assert_deep(id, cond) kp_assert_level(2, id, cond)

/* ---- Address-space geometry ------------------------------------------- */

#define KP_REGION_SHIFT 25 /* 32 MiB regions */
#define KP_REGION_SIZE ((size_t)1 << KP_REGION_SHIFT)
#define KP_REGION_MASK (KP_REGION_SIZE - 1)
#define KP_UNIT_SHIFT 18 /* 256 KiB units */
#define KP_UNIT_SIZE ((size_t)1 << KP_UNIT_SHIFT)
#define KP_UNITS_PER_REGION 128
#define KP_UNIT_WORDS (KP_UNITS_PER_REGION / 64)
#define KP_MAX_CHUNK_UNITS 16

#define KP_MIN_ALIGN 16                     /* alignof(max_align_t) on every target */
#define KP_SMALL_MAX ((size_t)32 << 10)     /* bucket tier: 1 B .. 32 KiB   */
#define KP_DEDICATED_MAX ((size_t)4 << 20)  /* dedicated:  .. 4 MiB         */
#define KP_LARGE_MAX KP_REGION_SIZE         /* large:      .. 32 MiB        */
#define KP_DEDICATED_ALIGN_MAX KP_UNIT_SIZE /* chunks are unit-aligned      */
#define KP_MAX_REQUEST ((size_t)PTRDIFF_MAX)

/* User addresses the pool's own mappings may have, per target: 48 bits
 * on 64-bit ones (x86-64 and aarch64 kernels hand out no higher address
 * unless asked for one), the whole space on 32-bit ones.  Every region and
 * mapping of ours lies below this (mapping.c refuses any other); anything
 * above is foreign.  The address map is sized from it: 16 MiB of
 * (untouched, mostly never resident) bytes on 64-bit targets, 256 bytes
 * on 32-bit ones.  Preprocessor-visible, so that every shift by it is
 * checked against the width it shifts. */
#if UINTPTR_MAX > 0xffffffffu
#define KP_ADDRESS_BITS 48
#else
#define KP_ADDRESS_BITS 32
#endif
#define KP_SLOTS ((size_t)1 << (KP_ADDRESS_BITS - KP_REGION_SHIFT)) /* 32 MiB slots */
_Static_assert(KP_ADDRESS_BITS <= sizeof(uintptr_t) * 8, "address bits fit a pointer");
_Static_assert(KP_ADDRESS_BITS - KP_REGION_SHIFT < sizeof(size_t) * 8, "the slot count fits a size_t");

/* The default ceiling on what the pool maps (kame_pool_set_max_bytes(0)).
 * On 64-bit targets no practical limit.  In a 4 GiB address space the
 * program's own mappings, its stacks and the system allocator the pool
 * falls back to past the ceiling need room too: the pool takes at most
 * half of it. */
#if UINTPTR_MAX > 0xffffffffu
#define KP_DEFAULT_MAX_BYTES SIZE_MAX
#else
#define KP_DEFAULT_MAX_BYTES ((size_t)2 << 30)
#endif

/* ---- The address map ---------------------------------------------------
 * 16 bits per 32 MiB slot, the free hit path's one load: KP_ADDR_REGION
 * for a pool region (set once, never cleared); at the head slot of a
 * mapping of a cached class, its heap's mark (low byte, even) and its L1
 * index among the mapping slots (high byte), which send the mapping's
 * free straight to its L1 slot [MAP-4]; 0 anywhere else.  A two-level
 * radix tree records every large and huge mapping, its length and kind
 * (addrmap.c). */
#define KP_ADDR_REGION 1u
#define KP_ADDR_L1_SHIFT 8
extern KP_HIDDEN uint16_t kp_addr_map[KP_SLOTS];

/* The index is masked rather than bounds-checked: a pointer above the
 * address bits the pool uses is garbage (no program's memory lies there
 * unless it asks the kernel for it explicitly).  A region's bit is
 * written once, before any block of the region exists, and a head's bits
 * before its block is handed out, so a plain read is enough.  A thread
 * may read a slot's value for a block of a mapping there that is being
 * unmapped while another thread makes a region at the same address (the
 * kernel's reuse of the range orders nothing the race detector sees):
 * under ThreadSanitizer the read is a relaxed atomic load. */
#if defined(__SANITIZE_THREAD__)
#define KP_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KP_UNDER_TSAN 1
#endif
#endif
KP_INLINE unsigned kp_addr_map_get(uintptr_t slot) {
#ifdef KP_UNDER_TSAN
  return __atomic_load_n(&kp_addr_map[slot], __ATOMIC_RELAXED);
#else
  return kp_addr_map[slot];
#endif
}
KP_INLINE uintptr_t kp_addr_slot(const void *p) { return ((uintptr_t)p >> KP_REGION_SHIFT) & (KP_SLOTS - 1); }
KP_INLINE bool kp_is_region(const void *p) { return (kp_addr_map_get(kp_addr_slot(p)) & KP_ADDR_REGION) != 0; }

/* A radix entry: a length (a multiple of 64 KiB) with the kind in the
 * low three bits, and in bits 3..9 a hint of the heap that allocated the
 * block (for the recycle cache).  0 means foreign. */
#define KP_MAP_LARGE ((uintptr_t)1)    /* head of a block of at most 32 MiB */
#define KP_MAP_HUGE ((uintptr_t)2)     /* head of a longer block */
#define KP_MAP_RELEASED ((uintptr_t)3) /* a block of ours was unmapped here */
#define KP_MAP_CONT ((uintptr_t)4)     /* a later slot of a huge block: bytes covered */
#define KP_MAP_KIND_MASK ((uintptr_t)7)
#define KP_MAP_HEAP_SHIFT 3
#define KP_MAP_HEAP_MASK ((uintptr_t)0x7f << KP_MAP_HEAP_SHIFT)
/* A radix entry's heap mark m << KP_MAP_HEAP_SHIFT (m from 1 to 127) as
 * the address map and a heap's head_mark hold it: the even byte 2m. */
KP_INLINE uint8_t kp_addr_mark(uintptr_t radix_mark) { return (uint8_t)(radix_mark >> (KP_MAP_HEAP_SHIFT - 1)); }
#define KP_MAP_LEN(e) ((size_t)((e) & ~(uintptr_t)0xffff))

#define KP_RADIX_BITS (KP_ADDRESS_BITS - KP_REGION_SHIFT)
#define KP_RADIX_LEAF_BITS (KP_RADIX_BITS > 12 ? 12 : KP_RADIX_BITS)
#define KP_RADIX_ROOT_BITS (KP_RADIX_BITS - KP_RADIX_LEAF_BITS)
#define KP_RADIX_LEAF_ENTRIES ((size_t)1 << KP_RADIX_LEAF_BITS)
#define KP_RADIX_ROOT_ENTRIES ((size_t)1 << KP_RADIX_ROOT_BITS)
typedef _Atomic(uintptr_t) kp_radix_leaf[KP_RADIX_LEAF_ENTRIES];
extern KP_HIDDEN _Atomic(kp_radix_leaf *) kp_radix_root[KP_RADIX_ROOT_ENTRIES];

/* The radix entry for addr's slot (0 if none). */
KP_INLINE uintptr_t kp_radix_get(uintptr_t addr) {
  uintptr_t slot = addr >> KP_REGION_SHIFT;
  if (unlikely(slot >= KP_SLOTS)) return 0;
  kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[slot >> KP_RADIX_LEAF_BITS]);
  if (unlikely(leaf == NULL)) return 0;
  return kp_load_acquire(&(*leaf)[slot & (KP_RADIX_LEAF_ENTRIES - 1)]);
}

/* What the first word of a cached (freed) mapping holds, and of a freed
 * dedicated block in its thread's hot cell [HOT-1], so a second free of
 * it is caught: its own address scrambled, a value no program stores in a
 * block by chance. */
KP_INLINE uintptr_t kp_free_tag(const void *p) { return (uintptr_t)p ^ (uintptr_t)0x9E3779B97F4A7C15ull; }

/* Mapping lengths are multiples of this: the largest page size of the
 * supported targets, so rounding needs no look-up of the page size. */
#define KP_MAP_GRANULE ((size_t)64 << 10)

/* ---- Blocks, chunks and regions --------------------------------------- */

/* A free slot: the list link, then a tag that marks it free (the address
 * of its chunk's header, a value no live block holds in practice).  Every
 * slot is at least 16 bytes, so both words exist. */
typedef struct kp_block {
  struct kp_block *next;
  uintptr_t tag;
} kp_block;

typedef struct kp_heap kp_heap;

enum {
  KP_CHUNK_NONE = 0,      /* free units (or never claimed) */
  KP_CHUNK_BUCKET = 1,    /* slots of one size class */
  KP_CHUNK_DEDICATED = 2, /* one live block */
  KP_CHUNK_CACHED = 3,    /* claimed, held warm by the recycle cache */
  KP_CHUNK_META = 4,      /* a region's metadata unit */
};

/* Chunk flags.  ZEROED: all pages known zero.  PARKED: a full chunk kept
 * by its owner on the heap's full list [PARK-1]. */
enum { KP_CHUNK_ZEROED = 1, KP_CHUNK_PARKED = 4 };

/* The remote word of a bucket chunk: the head of the list of slots freed
 * by other threads, how many slots that list holds, and whether the chunk
 * is detached (no heap owns it).  See remote.c. */
#define KP_REMOTE_PTR_BITS KP_ADDRESS_BITS
#define KP_REMOTE_PTR_MASK ((((uint64_t)1) << KP_REMOTE_PTR_BITS) - 1)
#define KP_REMOTE_COUNT_ONE (((uint64_t)1) << KP_REMOTE_PTR_BITS)
#define KP_REMOTE_DETACHED (((uint64_t)1) << 63)
#define KP_REMOTE_COUNT(w) ((uint32_t)(((w) & ~KP_REMOTE_DETACHED) >> KP_REMOTE_PTR_BITS))
#define KP_REMOTE_HEAD(w) ((kp_block *)(uintptr_t)((w) & KP_REMOTE_PTR_MASK))

/* A chunk's header lives in its region's metadata unit, indexed by the
 * chunk's first unit, so every slot of the chunk is usable and aligned.
 * Three cache lines: what every free reads, written rarely (so a free
 * from another thread does not pull the owner's busy line); the owner's;
 * and the one other threads write. */
typedef struct kp_chunk {
  /* Read-mostly: what every free reads, the other threads' included; it
   * changes when the chunk changes hands, role or kind. */
  /* bucket: the owning thread's token when it is the thread's current
   * chunk, that token ^ KP_OWNER_RESTING when the thread owns it otherwise,
   * 0 when detached; dedicated, live or in an L1: kp_dedicated_token of
   * the heap whose L1 takes it back */
  _Atomic uintptr_t owner;
  uint32_t capacity; /* slots in the chunk */
  uint32_t slot_size;
  uint8_t cls;
  uint8_t units;
  _Atomic uint8_t kind; /* KP_CHUNK_* */
  /* bucket: 1 while slots it handed out lie beyond its carved part, their
   * pages given back and their free tags gone (kp_chunk_token) [TAIL-1] */
  _Atomic uint8_t trimmed;
  /* A free dirty unit's header: the drain tick at which it was freed
   * (its pages are purged once idle) [DIRTY-3]. */
  _Atomic uint32_t dirty_tick;
  /* The heap that detached it, for re-adoption: read by every free from
   * another thread, so it lies here, not on the line they write. */
  _Atomic(kp_heap *) last_owner;
  /* The owner's line, written on its every malloc and free. */
  _Alignas(KP_CACHE_LINE) union {
    kp_block *free; /* bucket: slots to hand out */
    char *block;    /* dedicated, live or in an L1: the block's start */
  };
  union {
    kp_block *local_free;    /* bucket: slots the owner freed */
    struct kp_l1_slot *home; /* dedicated: the L1 slot its owner frees it into */
  };
  /* The owner's free hit path picks `free` or `local_free`, and
   * `owner_frees` or `used`, by the same offset (kp_free_inline). */
  int32_t owner_frees; /* current: KP_OWNER_FREES_NONE less the owner's frees into it */
#if UINTPTR_MAX > 0xffffffffu
  uint32_t carved; /* slots made into list entries so far */
  int32_t used;    /* slots off the owner's lists, incl. the remote list [USED-1] */
#else
  int32_t used;
  uint32_t carved;
#endif
  uint8_t flags;   /* KP_CHUNK_* flags above */
  union {
    int32_t parked_used; /* PARKED: `used` when parked (`used` is then 1) */
    int32_t tail_used;   /* on the avail list: `used` when its tail was last looked at [TAIL-1] */
  };
  uint32_t free_count; /* not current: how many slots `free` holds [USED-1] */
  struct kp_chunk *next, *prev; /* the owner's avail list */
  uint32_t trim_mark; /* trimmed: how far it had been carved [TAIL-1] */
  uint32_t rest_tick; /* on the avail list: the drain tick it was put there, or its tail last looked at */
  /* Where other threads write. */
  _Alignas(KP_CACHE_LINE) _Atomic uint64_t remote;
  _Atomic int32_t detached_used; /* `used` when it was detached */
  char pad1[KP_CACHE_LINE - sizeof(uint64_t) - sizeof(int32_t)];
} kp_chunk;

/* Whether other threads have freed slots onto c's remote list. */
KP_INLINE bool kp_remote_pending(kp_chunk *c) { return (kp_load_relaxed(&c->remote) & ~KP_REMOTE_DETACHED) != 0; }

#define KP_NUM_CLASSES 44

typedef struct kp_region {
  /* unit -> header of the chunk covering it (the metadata chunk for unit 0
   * and for units never claimed): an interior pointer's chunk is one load
   * away. */
  _Atomic(kp_chunk *) unit_chunk[KP_UNITS_PER_REGION];
  _Atomic uint64_t claimed[KP_UNIT_WORDS]; /* unit in a chunk (unit 0: metadata) */
  _Atomic uint64_t dirty[KP_UNIT_WORDS];   /* free unit whose pages may be resident */
  /* Detached bucket chunks that have slots to give, per class: set when
   * one is detached with room or gets its first remote free, cleared by
   * the thread that takes it (adoption). */
  _Atomic uint64_t reusable[KP_NUM_CLASSES][KP_UNIT_WORDS];
  struct kp_region *next; /* push-only list of all regions */
  kp_chunk chunks[KP_UNITS_PER_REGION]; /* indexed by a chunk's first unit */
} kp_region;

_Static_assert(sizeof(kp_region) <= KP_UNIT_SIZE, "region metadata must fit in unit 0");
_Static_assert(offsetof(kp_chunk, remote) == 2 * KP_CACHE_LINE, "owner fields fit one cache line");
_Static_assert(sizeof(kp_chunk) == 3 * KP_CACHE_LINE, "a chunk header is three cache lines");

KP_INLINE kp_region *kp_region_of(const void *p) {
  return (kp_region *)((uintptr_t)p & ~(uintptr_t)KP_REGION_MASK);
}
KP_INLINE unsigned kp_unit_of(const void *p) {
  return (unsigned)(((uintptr_t)p >> KP_UNIT_SHIFT) & (KP_UNITS_PER_REGION - 1));
}
KP_INLINE kp_chunk *kp_chunk_of(const void *p) {
  return kp_load_relaxed(&kp_region_of(p)->unit_chunk[kp_unit_of(p)]);
}
KP_INLINE unsigned kp_chunk_index(kp_region *r, kp_chunk *c) { return (unsigned)(c - r->chunks); }
KP_INLINE char *kp_chunk_start(kp_chunk *c) {
  kp_region *r = kp_region_of(c);
  return (char *)r + ((size_t)kp_chunk_index(r, c) << KP_UNIT_SHIFT);
}
KP_INLINE size_t kp_chunk_bytes(const kp_chunk *c) { return (size_t)c->units << KP_UNIT_SHIFT; }
/* The header of the chunk that starts at p, by arithmetic alone (headers
 * are indexed by a chunk's first unit): no load, so a hit path that has
 * the block need not wait for its header's address. */
KP_INLINE kp_chunk *kp_chunk_at_start(const void *p) { return &kp_region_of(p)->chunks[kp_unit_of(p)]; }
KP_INLINE uint64_t kp_unit_mask(unsigned units, unsigned bit) {
  return (units == 64 ? ~(uint64_t)0 : (((uint64_t)1 << units) - 1)) << bit;
}

/* region.c: regions, units and byte accounting (mechanism only: which
 * memory to keep or give back is release.c's decision). */
KP_HIDDEN kp_region *kp_regions_first(void);
KP_HIDDEN kp_chunk *kp_units_claim(kp_heap *heap, unsigned units, bool *zeroed);
KP_HIDDEN void kp_units_free(kp_chunk *c, bool dirty);
KP_HIDDEN bool kp_units_free_dirty_within(kp_chunk *c, size_t limit);
KP_HIDDEN size_t kp_units_clean_dirty(bool (*clean)(void *addr, size_t len), uint32_t idle_ticks);
KP_HIDDEN size_t kp_units_dirty_bytes(void);
KP_HIDDEN bool kp_reserve_bytes(size_t bytes);
KP_HIDDEN void kp_unreserve_bytes(size_t bytes);
KP_HIDDEN size_t kp_reserved_now(void);
KP_HIDDEN size_t kp_reserved_peak(void);
KP_HIDDEN size_t kp_regions_reserve(unsigned n);

/* ---- Size classes ------------------------------------------------------ */

extern KP_HIDDEN const uint8_t kp_class_of_granule[(KP_SMALL_MAX >> 4) + 1];
extern KP_HIDDEN const uint8_t kp_class_host_max[KP_NUM_CLASSES];
extern KP_HIDDEN const uint32_t kp_class_size[KP_NUM_CLASSES];
extern KP_HIDDEN const uint8_t kp_class_units[KP_NUM_CLASSES];
extern KP_HIDDEN const uint64_t kp_class_recip[KP_NUM_CLASSES];

KP_INLINE unsigned kp_size_class(size_t size) { return kp_class_of_granule[(size + 15) >> 4]; }
/* Whether `offset` (from the chunk's start) is a slot boundary of class
 * `cls`, without a division. */
KP_INLINE uint64_t kp_offset_index(unsigned cls, size_t offset) { return (uint64_t)offset * kp_class_recip[cls] >> 48; }
KP_INLINE bool kp_slot_boundary(unsigned cls, size_t offset) {
  return kp_offset_index(cls, offset) * kp_class_size[cls] == offset;
}
/* Whether p is the start of a slot of bucket chunk c: inside it, on a slot
 * boundary. */
KP_INLINE bool kp_is_slot_start(kp_chunk *c, const void *p) {
  size_t offset = (size_t)((const char *)p - kp_chunk_start(c));
  return offset < kp_chunk_bytes(c) && kp_slot_boundary(c->cls, offset);
}
/* The index of slot p of bucket chunk c. */
KP_INLINE uint32_t kp_slot_index(kp_chunk *c, const void *p) {
  return (uint32_t)kp_offset_index(c->cls, (size_t)((const char *)p - kp_chunk_start(c)));
}
/* size_class.c: smallest class >= size whose slots are `align`-aligned,
 * or -1 when none is. */
KP_HIDDEN int kp_size_class_aligned(size_t size, size_t align);

/* ---- The recycle cache (recycle.c) -------------------------------------
 * Freed dedicated chunks, empty bucket chunks and large mappings, kept
 * warm.  Indices 0..15 hold chunks by unit count, the rest mappings by a
 * log-spaced length (8 per octave) from 4 MiB up to the cache's top. */
#define KP_CACHE_CHUNK_INDEXES KP_MAX_CHUNK_UNITS
#define KP_CACHE_MAP_PER_OCTAVE 8
#define KP_CACHE_MAP_MIN ((size_t)4 << 20)
#define KP_CACHE_MAP_MAX_LIMIT ((size_t)1 << 30) /* highest top a build may choose */
#define KP_CACHE_MAP_INDEXES (8 * KP_CACHE_MAP_PER_OCTAVE)
_Static_assert(KP_CACHE_MAP_INDEXES <= 0xffff >> KP_ADDR_L1_SHIFT, "a map index fits the address map's high byte");
#define KP_CACHE_INDEXES (KP_CACHE_CHUNK_INDEXES + KP_CACHE_MAP_INDEXES)
#define KP_L1_DEPTH 4
_Static_assert(KP_L1_DEPTH <= 5, "an L1 slot fits one cache line");

/* A slot holds block starts: chunks' (chunk indexes) or mappings'.  `limit`
 * is how many blocks the slot may hold without asking
 * the release layer: a block popped leaves its place granted, so that a
 * thread freeing and allocating one size pays for no decision; places
 * are taken back when the slot goes out of demand or the thread's share
 * shrinks [L1-2].  count <= limit <= KP_L1_DEPTH.
 *
 * `held` keeps the count in its low byte and, in its top bits, the hit
 * paths' pushes into the slot modulo 256: the push that carries out of
 * them sends its free to the slow path, which looks at the drain clock
 * (every 64th push cost the 64 KiB loop about 8 %: docs/design.md).
 * One word, loaded and stored once a push or a pop: a second counter
 * decremented on each push (a read-modify-write of its own) cost a
 * 64 KiB malloc+free loop 10 % (docs/design.md). */
typedef struct kp_l1_slot {
  uint32_t held;
  uint32_t stamp; /* 1 + the drain tick of the last pop dated; 0: never popped */
  uint32_t limit;
  uint32_t miss_tick; /* drain tick of the last request the slot could not serve */
  uint32_t misses;    /* such requests in that tick and the one before */
  uint32_t unused;
  void *entry[KP_L1_DEPTH];
  /* 64 bytes with 4- and 8-byte pointers alike: a mapping's radix entry
   * names its slot by an index that a shift makes an offset. */
  char pad[64 - 6 * sizeof(uint32_t) - KP_L1_DEPTH * sizeof(void *)];
} kp_l1_slot;

#define KP_L1_COUNT_MASK 0xffu
/* Set in `held` by a pop, cleared when the thread's next look at the
 * drain clock dates the pop in `stamp` (a store of its own on every pop
 * cost the mapping loop a fifth: docs/design.md). */
#define KP_L1_POPPED ((uint32_t)1 << 8)
#define KP_L1_PUSHES_SHIFT 24
/* What a hit path's push adds to `held`: a block and a push. */
#define KP_L1_HIT_PUSH (((uint32_t)1 << KP_L1_PUSHES_SHIFT) + 1u)
_Static_assert(KP_L1_DEPTH <= KP_L1_COUNT_MASK, "the count fits below the pushes");
KP_INLINE uint32_t kp_l1_count(const kp_l1_slot *s) { return s->held & KP_L1_COUNT_MASK; }

typedef struct kp_l1 {
  size_t bytes; /* granted: every slot's limit times kp_l1_place_bytes */
  size_t cap;   /* this thread's share of the cache cap */
  kp_l1_slot slot[KP_CACHE_INDEXES];
} kp_l1;

/* Mappings up to this length are cached (run-time choice, below 1 GiB). */
extern KP_HIDDEN _Atomic size_t kp_cache_top_bytes;
KP_INLINE size_t kp_cache_top(void) { return kp_load_relaxed(&kp_cache_top_bytes); }
/* Counts changes of the top: each thread gives up its L1 places above a
 * lowered top at its next look at the drain clock [L1-3]. */
extern KP_HIDDEN _Atomic uint32_t kp_cache_top_epoch;

/* The drain clock: advanced once per drain interval (release.c). */
extern KP_HIDDEN _Atomic uint32_t kp_drain_tick;
KP_INLINE uint32_t kp_drain_now(void) { return kp_load_relaxed(&kp_drain_tick); }

/* Mapping classes: lengths 2^e + j * 2^(e-3) for j = 1..8, e = 22..29,
 * 8 per octave from 4.5 MiB to 1 GiB.  Every mapping of more than 4 MiB
 * and up to 1 GiB is made at its class length, so a block in an L1 slot
 * fits every request the slot serves and a pop checks nothing [MAP-3];
 * the cost is address space only (at most an eighth), since pages not
 * touched are never resident.  Shorter mappings (aligned requests the
 * dedicated tier cannot place) keep whole granules and skip L1. */
KP_INLINE size_t kp_cache_map_len(unsigned m) {
  unsigned e = 22 + m / KP_CACHE_MAP_PER_OCTAVE;
  return ((size_t)1 << e) + ((size_t)(m % KP_CACHE_MAP_PER_OCTAVE + 1) << (e - 3));
}

/* The class of a request of len bytes (at most 1 GiB): the shortest class
 * length that holds it. */
KP_INLINE unsigned kp_cache_map_index(size_t len) {
  if (len <= kp_cache_map_len(0)) return 0;
  unsigned long long x = (unsigned long long)len - 1;
  unsigned e = (unsigned)(sizeof(long long) * 8 - 1) - (unsigned)__builtin_clzll(x);
  unsigned idx = (e - 22) * KP_CACHE_MAP_PER_OCTAVE + (unsigned)((x >> (e - 3)) & 7);
  return idx < KP_CACHE_MAP_INDEXES ? idx : KP_CACHE_MAP_INDEXES - 1;
}

/* The same for requests up to 64 MiB, from a table by 512 KiB granule
 * (every class length is a multiple of it): the malloc hit path's.  It
 * holds the class times 64, the offset of its L1 slot from the first
 * mapping slot, which saves the hit path a shift. */
#define KP_MAP_TABLE_SHIFT 19
#define KP_MAP_TABLE_MAX ((size_t)64 << 20)
extern KP_HIDDEN const uint16_t kp_map_slot_offset_of_granule[KP_MAP_TABLE_MAX >> KP_MAP_TABLE_SHIFT];

/* The length of a mapping that serves `size` bytes: its class length
 * from 4 MiB to 1 GiB, otherwise a multiple of the granule. */
KP_INLINE size_t kp_map_length(size_t size) {
  if (size > KP_DEDICATED_MAX && size <= KP_CACHE_MAP_MAX_LIMIT) return kp_cache_map_len(kp_cache_map_index(size));
  return (size + KP_MAP_GRANULE - 1) & ~(KP_MAP_GRANULE - 1);
}
KP_INLINE bool kp_map_is_class(size_t len) {
  return len > KP_DEDICATED_MAX && len <= KP_CACHE_MAP_MAX_LIMIT && kp_map_length(len) == len;
}

/* release.c: looks at the drain clock (every KP_TICK_EVERY slow paths
 * and slow-path L1 pushes, every 256th hit-path push into a slot and
 * every 256th take from the hot cell). */
KP_HIDDEN void kp_release_tick(kp_heap *h);
KP_HIDDEN void kp_release_idle_tails(kp_heap *h, bool all);
#define KP_TICK_EVERY 64

/* Keeps a block in the thread's L1 if its slot and its share have room.
 * Heaps without a thread (the empty one) have no share, so nothing is
 * ever kept in them. */
KP_INLINE bool kp_l1_push(kp_heap *h, unsigned idx, void *block);
KP_HIDDEN void kp_l1_note_miss(kp_heap *h, unsigned idx);
KP_HIDDEN KP_NOINLINE bool kp_l1_push_ticked(kp_heap *h, unsigned idx, void *block);
KP_HIDDEN void kp_l1_revoke(kp_heap *h, bool all);
KP_HIDDEN void kp_l1_drop_above(kp_heap *h, size_t top);
KP_HIDDEN void kp_l1_date_pops(kp_heap *h);
KP_HIDDEN void kp_l1_settle(kp_heap *h);
KP_HIDDEN void kp_l1_hot_clear(kp_heap *h);
KP_HIDDEN KP_NOINLINE void *kp_l1_hot_look(kp_heap *h, void *p);
KP_HIDDEN bool kp_l1_keep(kp_heap *h, kp_l1_slot *s, void *block);
/* The place of a heap's hot cell when it has none: a slot no block is
 * ever pushed into, which no size maps to [HOT-1]. */
extern KP_HIDDEN kp_l1_slot kp_l1_no_slot;
KP_HIDDEN kp_chunk *kp_cache_take_chunk(kp_heap *h, unsigned units);
KP_HIDDEN bool kp_cache_put_chunk(kp_heap *h, kp_chunk *c, bool prefer_local);
KP_HIDDEN void *kp_cache_take_mapping(kp_heap *h, size_t len, bool *zeroed);
KP_HIDDEN bool kp_cache_put_mapping(kp_heap *h, void *p, size_t len, bool prefer_local);
KP_HIDDEN size_t kp_cache_evict_l2(unsigned max_blocks, uint32_t older_than, uint64_t spare_since_ns);
KP_HIDDEN size_t kp_cache_flush_l1(kp_heap *h, bool to_l2, uint32_t older_than);
KP_HIDDEN size_t kp_cache_l2_bytes(void);
KP_HIDDEN void kp_cache_update_share(kp_heap *h);
/* What the cache holds in mappings (L2 and the L1 of every heap), and in
 * dedicated chunks in the heaps' hot cells. */
typedef struct kp_cache_census {
  size_t maps, map_bytes;
  size_t cell_chunks, cell_chunk_bytes; /* dedicated chunks in hot cells */
} kp_cache_census;
KP_HIDDEN void kp_cache_census_take(kp_cache_census *out);

/* ---- Per-thread heaps -------------------------------------------------- */

/* Cross-thread frees are collected per destination chunk and published
 * one batch at a time (remote.c). */
#define KP_BATCH_SLOTS 8
#define KP_BATCH_MAX 32

typedef struct kp_batch {
  kp_chunk *chunk;
  kp_block *head, *tail;
  uint32_t count;
} kp_batch;

/* Slots of other threads' chunks a thread keeps per class for its own
 * next allocations: about KP_HOST_BYTES' worth, at most KP_HOST_MAX
 * (kp_class_host_max) [HOST-1]. */
#define KP_HOST_BYTES ((uint32_t)256 << 10)
#define KP_HOST_MAX 255
/* A thread keeps slots of chunks whose owner is alive only while at least
 * 1 in KP_HOST_SHARE of its own slots come back from other threads, or
 * while at least 1 in KP_HOST_ORPHANED of the other chunks' slots it frees
 * are of chunks whose owner has gone (kp_heap_shares_blocks). */
#define KP_HOST_SHARE 4
#define KP_HOST_ORPHANED 16

/* malloc up to this size finds its chunk by its size alone
 * (heap->current_at). */
#define KP_DIRECT_MAX 1024

struct kp_heap {
  kp_chunk *current[KP_NUM_CLASSES]; /* never NULL: &kp_empty_chunk when none */
  kp_chunk *avail[KP_NUM_CLASSES];   /* other owned chunks with slots to give, newest first */
  kp_chunk *avail_tail[KP_NUM_CLASSES]; /* the oldest of them, taken first */
  kp_chunk *full[KP_NUM_CLASSES];    /* owned chunks with none, parked [PARK-1] */
  uint8_t full_count[KP_NUM_CLASSES];
  /* Other chunks' slots this thread freed onto current[class]'s free
   * list since that list was last empty (at least as many as are on it),
   * at most kp_class_host_max[class] [HOST-1]. */
  uint8_t hosted[KP_NUM_CLASSES];
  /* Slots of its own chunks that it freed itself and that other threads
   * freed, as its current chunks took them back: recent counts, halved
   * as they grow (kp_heap_note_frees). */
  uint32_t home_frees, away_frees;
  /* Slots of other chunks it freed while it allocated their class, and
   * how many of those chunks had no owner: recent counts, halved as they
   * grow (kp_remote_free_by). */
  uint32_t foreign_frees, orphaned_frees;
  uintptr_t token;                   /* what owned chunks hold in `owner` */
  /* What its dedicated chunks hold in `owner`, xor its thread's id (the
   * free hit path's test); KP_OWNER_NONE in the heaps without a thread,
   * which no chunk's `owner` xor a thread id is. */
  _Alignas(KP_CACHE_LINE) uintptr_t dedicated_mismatch; /* on the hot cell's line */
  /* The hot cell: a block of L1 slot hot_slot, kept in one of its places
   * (reserved while hot_slot names the slot) at addresses that the hit
   * paths find without first loading the slot's own count [HOT-1].  Each
   * hit path tests its own key of the slot: malloc the requests it serves
   * (size - hot_lo < hot_span), a mapping's free the address-map value of
   * its heads (hot_head_value; odd, so no head's, when the slot is a
   * chunk slot or none), a dedicated chunk's free its `home`. */
  void *hot;              /* the block, or NULL */
  kp_l1_slot *hot_slot;   /* &kp_l1_no_slot when no place is reserved */
  size_t hot_lo, hot_span; /* hot_span 0 when no place is reserved */
  uint16_t hot_head_value;
  uint8_t hot_takes;      /* takes from the cell since the last look at the drain clock, mod 256 */
  kp_region *region_hint;
  struct kp_heap_slab *slab;
  unsigned slab_index;
  uintptr_t map_hint; /* this heap's mark in a mapping's radix entry */
  uint8_t head_mark;  /* the same in the address map [MAP-4] */
  uint32_t batched;   /* batches not yet published */
  uint32_t drain_seen;
  uint32_t tick_countdown; /* big frees and slow paths until the next drain check */
  uint32_t top_seen;       /* kp_cache_top_epoch at its last look */
  bool exiting; /* being torn down */
  bool collect_due; /* a drain tick passed: look at the resting chunks [REST-1] */
  kp_batch batch[KP_BATCH_SLOTS];
  kp_l1 l1;
  /* By request size up to KP_DIRECT_MAX: the offset in the heap of
   * current[class of the size].  The same in every heap, but kept in each,
   * so that the hit path reaches it from the heap's address with the size
   * as the index and no arithmetic [CUR-3]. */
  uint16_t current_at[KP_DIRECT_MAX + 1];
};

/* An owner token no thread has (chunks of threads lost in a fork). */
#define KP_OWNER_NONE ((uintptr_t)3)

/* What an owned chunk that is not current holds in `owner`: the owner's
 * token with this bit flipped.  The owner's frees into it go onto its
 * local list and count off `used`; those into its current chunk go
 * straight back onto the free list, so a block freed is the next one
 * handed out while it is still in the cache [CUR-2].  The bit is also
 * the distance from `free` to `local_free` and from `owner_frees` to
 * `used`, so that one free path serves both without a branch on which
 * (a branch that a program freeing at random mispredicts). */
#define KP_OWNER_RESTING ((uintptr_t)sizeof(void *))
_Static_assert(offsetof(kp_chunk, local_free) - offsetof(kp_chunk, free) == KP_OWNER_RESTING,
               "local_free lies KP_OWNER_RESTING bytes after free");
_Static_assert(offsetof(kp_chunk, used) - offsetof(kp_chunk, owner_frees) == KP_OWNER_RESTING,
               "used lies KP_OWNER_RESTING bytes after owner_frees");
/* A current chunk's `owner_frees` when it is made current: the owner's
 * frees count it down, so it tells whether the owner freed into the chunk
 * while it was current [PARK-1].  Should it reach 0, the free takes the
 * slow path, which sets it back; the debug builds start it low, so that
 * their tests take that path. */
#if KP_DEBUG
#define KP_OWNER_FREES_NONE (1 << 10)
#else
#define KP_OWNER_FREES_NONE (1 << 30)
#endif
KP_INLINE uintptr_t kp_resting_token(const kp_heap *h);

/* What a dedicated chunk holds in `owner` while heap h's L1 takes it back
 * at free: never a thread's token (those have bit 1 clear), so the bucket
 * hit path never takes it for one of its chunks. */
KP_INLINE uintptr_t kp_dedicated_token(const kp_heap *h) { return (uintptr_t)h | 2; }
KP_INLINE uintptr_t kp_resting_token(const kp_heap *h) { return h->token ^ KP_OWNER_RESTING; }
/* What h's chunk c carries in `owner`: a trimmed chunk's token has its
 * low bit set, which sends h's frees into it the checked way, past the
 * hit path's test of the free tag [TAIL-1]. */
KP_INLINE uintptr_t kp_chunk_token(const kp_heap *h, const kp_chunk *c, bool current) {
  return (current ? h->token : kp_resting_token(h)) | kp_load_relaxed(&c->trimmed);
}
/* Whether `owner` is one of h's tokens, trimmed or not. */
KP_INLINE bool kp_heap_owns_token(const kp_heap *h, uintptr_t owner) {
  return (owner | 1) == (h->token | 1) || (owner | 1) == (kp_resting_token(h) | 1);
}

/* Makes c's header say what a dedicated block of heap h carries [L1-1]:
 * its start, the L1 slot that takes it back and h's token.  h is NULL for
 * a thread whose heap is gone or cannot be made: no L1 takes the block
 * back, so it names none. */
KP_INLINE void kp_chunk_set_home(kp_chunk *c, kp_heap *h) {
  c->block = kp_chunk_start(c);
  c->home = h != NULL ? &h->l1.slot[c->units - 1u] : NULL;
  kp_store_relaxed(&c->owner, h != NULL ? kp_dedicated_token(h) : 0);
}
/* A chunk that the cache takes: its kind says so, and `block` no longer
 * names its start, so the free hit path, which compares `block` with the
 * pointer freed, never takes a cached chunk for a live block and needs no
 * test of the kind [L1-1]. */
KP_INLINE void kp_chunk_set_cached(kp_chunk *c) {
  c->block = kp_chunk_start(c) + 1;
  kp_store_relaxed(&c->kind, KP_CHUNK_CACHED);
}

/* Whether the thread still asks for the size of L1 slot idx: the slot was
 * popped from in this drain tick or the one before, or asked for at least
 * twice then.  A buffer growing through realloc leaves one chunk of each
 * size that nobody asks for again; keeping those only costs memory, so a
 * thread's own chunk of a size out of demand is given back at once (a
 * mapping goes to L2, where a smaller request can take it cut to size). */
KP_INLINE uint32_t kp_l1_use_stamp(void) { return kp_drain_now() + 1; }
/* A pop marks its slot with KP_L1_POPPED rather than reading the drain
 * clock; the thread's next look at the clock dates the mark to that look's
 * tick (kp_l1_date_pops), which can only make the slot look younger. */
KP_INLINE bool kp_l1_popped_lately(const kp_l1_slot *s) {
  return (s->held & KP_L1_POPPED) != 0 || kp_drain_now() + 1 - s->stamp <= 1;
}
KP_INLINE bool kp_l1_in_demand(const kp_heap *h, unsigned idx) {
  const kp_l1_slot *s = &h->l1.slot[idx];
  return kp_l1_popped_lately(s) || (s->misses >= 2 && kp_drain_now() - s->miss_tick <= 1);
}

/* What a place in L1 slot idx counts for against the thread's share: a
 * chunk slot's chunk size, a mapping slot's class length (that of every
 * block it holds [MAP-3]). */
KP_INLINE size_t kp_l1_place_bytes(unsigned idx) {
  if (idx < KP_CACHE_CHUNK_INDEXES) return (size_t)(idx + 1) << KP_UNIT_SHIFT;
  return kp_cache_map_len(idx - KP_CACHE_CHUNK_INDEXES);
}

/* The push into a place slot s already grants [L1-2] (a slot other than
 * the hot cell's: its reserved place is not in the count [HOT-1]): no
 * decision, but it counts towards the thread's next look at the drain
 * clock.  False when there is no place, or when the slot's pushes run
 * out (every 256th); then the caller calls kp_l1_tick_if_due, which looks
 * at the clock. */
KP_INLINE bool kp_l1_push_granted(kp_l1_slot *s, void *block) {
  uint32_t held = s->held, n = held & KP_L1_COUNT_MASK, next;
  if (n >= s->limit || __builtin_add_overflow(held, KP_L1_HIT_PUSH, &next)) return false;
  s->entry[n] = block;
  s->held = next;
  return true;
}
/* The pop from L1 slot s, whose `held` (read by the caller) counts a
 * block or more: the place the block leaves stays granted for its return
 * [L1-2]. */
KP_INLINE void *kp_l1_pop(kp_l1_slot *s, uint32_t held) {
  s->held = (held - 1) | KP_L1_POPPED;
  return s->entry[(held - 1) & KP_L1_COUNT_MASK];
}
/* L1 slot of heap h at byte offset `off` (its index times 64) from the
 * first: the malloc hit paths scale a size to an offset with one mask,
 * and the entry's address then needs no index arithmetic.  The pointer is
 * hidden from the compiler, which would fold it back into an index (two
 * instructions more a pop). */
KP_INLINE kp_l1_slot *kp_l1_slot_at(kp_heap *h, size_t off) {
  _Static_assert(sizeof(kp_l1_slot) == 64, "an L1 slot's offset is its index times 64");
  kp_l1_slot *s = (kp_l1_slot *)((char *)h->l1.slot + off);
  __asm__("" : "+r"(s));
  return s;
}
/* For the slow path of a free whose kp_l1_push_granted into s failed: if
 * a place was granted and the slot's pushes ran out, the thread looks at
 * the drain clock and the slot's pushes start again.  Only a thread's own
 * heap has places, so the empty heaps' slots (never written) never ask. */
KP_INLINE void kp_l1_tick_if_due(kp_heap *h, kp_l1_slot *s) {
  if (kp_l1_count(s) < s->limit && s->held > UINT32_MAX - KP_L1_HIT_PUSH) {
    s->held &= KP_L1_COUNT_MASK | KP_L1_POPPED;
    kp_release_tick(h);
  }
}

KP_INLINE bool kp_l1_push(kp_heap *h, unsigned idx, void *block) {
  kp_l1_slot *s = &h->l1.slot[idx];
  uint32_t n = kp_l1_count(s);
  if (n >= s->limit) {
    size_t bytes = kp_l1_place_bytes(idx);
    if (n >= KP_L1_DEPTH || h->l1.bytes + bytes > h->l1.cap || !kp_l1_in_demand(h, idx)) return false;
    if (idx >= KP_CACHE_CHUNK_INDEXES && bytes > kp_cache_top()) return false; /* [L1-3] */
    /* A thread busy with big blocks also looks at the drain clock now and
     * then, so idle blocks go back while it runs on hit paths only. */
    if (unlikely(--h->tick_countdown == 0)) return kp_l1_push_ticked(h, idx, block);
    h->l1.bytes += bytes;
    s->limit = n + 1;
  }
  s->entry[n] = block;
  s->held++;
  return true;
}

/* The bias a current chunk's `used` carries, so that the owner's free of
 * its last slot does not take the slow path (hysteresis).  A current
 * chunk's `used` also counts the slots on its `free` list, so that malloc's
 * hit path need not count [USED-1]. */
#define KP_CURRENT_BIAS (1 << 30)

extern KP_HIDDEN KP_THREAD_LOCAL kp_heap *kp_tls_heap;
extern KP_HIDDEN kp_chunk kp_empty_chunk;
extern KP_HIDDEN kp_heap kp_empty_heap;
extern KP_HIDDEN kp_heap kp_exited_heap;

/* heap.c */
KP_HIDDEN kp_heap *kp_heap_for_thread(void);
KP_HIDDEN kp_heap *kp_heap_if_any(void);
KP_HIDDEN void kp_heap_avail_push(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_heap_avail_remove(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_heap_park(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_heap_unpark(kp_heap *h, kp_chunk *c);
KP_HIDDEN kp_chunk *kp_heap_take_parked(kp_heap *h, unsigned cls);
KP_HIDDEN void kp_heap_set_current(kp_heap *h, unsigned cls, kp_chunk *c);
KP_HIDDEN void kp_heap_unset_current(kp_heap *h, unsigned cls);
KP_HIDDEN void kp_heap_collect(kp_heap *h);
KP_HIDDEN void kp_heap_collect_resting(kp_heap *h);
KP_HIDDEN void kp_heap_retoken(kp_heap *h);
KP_HIDDEN unsigned kp_heaps_live(void);
KP_HIDDEN size_t kp_heaps_made(void);
KP_HIDDEN void kp_heaps_for_each(void (*fn)(const kp_heap *h, void *arg), void *arg);
KP_HIDDEN unsigned kp_heap_id(const kp_heap *h);
KP_HIDDEN void *kp_malloc_late(size_t size, size_t align, bool zero);

/* Counts slots of h's own chunks coming back: `home` freed by h itself,
 * `away` by other threads.  Halving keeps the counts recent. */
KP_INLINE void kp_heap_note_frees(kp_heap *h, uint32_t home, uint32_t away) {
  h->home_frees += home;
  h->away_frees += away;
  if (h->home_frees + h->away_frees > (1u << 14)) {
    h->home_frees >>= 1;
    h->away_frees >>= 1;
  }
}

/* Whether blocks lately travel between h and other threads: h's own die
 * in other threads as often as 1 in KP_HOST_SHARE, or the other threads'
 * slots h frees belong to chunks whose owner has gone as often as 1 in
 * KP_HOST_ORPHANED (owners are short-lived).  A thread with no counts yet
 * is taken to share. */
KP_INLINE bool kp_heap_shares_blocks(const kp_heap *h) {
  return (uint64_t)h->away_frees * KP_HOST_SHARE >= (uint64_t)h->home_frees + h->away_frees ||
         (uint64_t)h->orphaned_frees * KP_HOST_ORPHANED >= h->foreign_frees;
}

/* alloc.c */
KP_HIDDEN KP_NOINLINE void *kp_malloc_small_slow(size_t size, kp_heap *h);
KP_HIDDEN void kp_chunk_init_bucket(kp_chunk *c, kp_heap *h, unsigned cls);

/* free.c */
KP_HIDDEN KP_NOINLINE void kp_free_owned_slow(kp_heap *h, kp_chunk *c);
KP_HIDDEN KP_NOINLINE void kp_free_in_region(void *p, kp_chunk *c, uintptr_t mismatch);
KP_HIDDEN KP_NOINLINE void kp_free_dedicated_slow(kp_heap *h, kp_chunk *c);
KP_HIDDEN KP_NOINLINE void kp_free_generic(void *p, kp_l1_slot *s);

/* remote.c */
KP_HIDDEN void kp_remote_free(kp_chunk *c, kp_block *b);
KP_HIDDEN void kp_remote_free_by(kp_heap *h, kp_chunk *c, kp_block *b);
KP_HIDDEN void kp_remote_flush_all(kp_heap *h);
KP_HIDDEN uint32_t kp_remote_collect(kp_chunk *c, bool current);
KP_HIDDEN uint32_t kp_list_length(const kp_block *b);
KP_HIDDEN void kp_remote_unhost(kp_heap *h, kp_chunk *c);
KP_HIDDEN bool kp_chunk_has_room(const kp_chunk *c);
KP_HIDDEN KP_NOINLINE bool kp_chunk_uncarve_tail(kp_heap *h, kp_chunk *c, size_t *from, size_t *to, bool *was_trimmed);
KP_HIDDEN void kp_chunk_untrim(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_chunk_retag_tail(kp_chunk *c);
KP_HIDDEN bool kp_chunk_detach(kp_heap *h, kp_chunk *c);
KP_HIDDEN bool kp_chunk_adopt(kp_heap *h, kp_chunk *c);
KP_HIDDEN kp_chunk *kp_adopt_reusable(kp_heap *h, unsigned cls, const kp_chunk *skip);
KP_HIDDEN size_t kp_remote_reusable_count(void);

/* mapping.c: the pool's mappings: aligned placement, unmapping that
 * survives the OS refusing (retried later), purging */
KP_HIDDEN void *kp_map_aligned(size_t len, size_t align);
KP_HIDDEN bool kp_unmap(void *addr, size_t len, bool reserved);
KP_HIDDEN void kp_unmap_aligned(void *p, size_t len);
KP_HIDDEN bool kp_purge(void *addr, size_t len);
KP_HIDDEN size_t kp_unmap_retry(void);
KP_HIDDEN size_t kp_unmap_pending_bytes(void);
KP_HIDDEN size_t kp_stat_purged_bytes(void);
KP_HIDDEN size_t kp_stat_unmapped_bytes(void);

/* large.c: the dedicated, large and huge tiers; malloc's slow path above
 * the bucket tier */
KP_HIDDEN KP_NOINLINE void *kp_malloc_big_slow(size_t size);
KP_HIDDEN void *kp_alloc_big(size_t size, size_t align, bool zero);
KP_HIDDEN void kp_free_dedicated(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_free_mapping(void *p, uintptr_t entry);
KP_HIDDEN void *kp_mapping_grow(void *p, uintptr_t entry, size_t size);
KP_HIDDEN bool kp_mapping_shrink(void *p, uintptr_t entry, size_t size);
/* A cached mapping p of `have` bytes cut to len (a shorter length the
 * cache hands out), with no heap's mark, where kp_mapping_can_cut. */
KP_HIDDEN bool kp_mapping_can_cut(void);
KP_HIDDEN void kp_mapping_cut(void *p, size_t have, size_t len);

/* release.c: every decision to keep memory warm, purge it or unmap it */
KP_HIDDEN kp_chunk *kp_chunk_obtain(kp_heap *h, unsigned units, bool *zeroed);
KP_HIDDEN void kp_chunk_retire(kp_heap *h, kp_chunk *c);
KP_HIDDEN void kp_chunk_release(kp_chunk *c);
KP_HIDDEN void kp_mapping_retire(kp_heap *h, void *p, size_t len);
KP_HIDDEN void kp_mapping_release(void *p, size_t len);
KP_HIDDEN void kp_mapping_release_now(void *p, size_t len);
KP_HIDDEN void kp_zero_block(void *p, size_t size, size_t capacity);

KP_HIDDEN bool kp_release_make_room(size_t bytes);
KP_HIDDEN size_t kp_cache_cap(void);
KP_HIDDEN bool kp_thread_exit_reclaim(void);
KP_HIDDEN size_t kp_trim(void);
KP_HIDDEN size_t kp_stat_trims(void);
KP_HIDDEN size_t kp_stat_trim_bytes(void);

/* realtime.c: the realtime gate.  The thread's mark (with a bit that lifts
 * the gate while the thread runs one of the explicit calls that are
 * allowed to enter the kernel) and the process-wide floor.  Read on cold
 * paths only. */
#define KP_RT_LIFTED 0x80
extern KP_HIDDEN __thread uint8_t kp_rt_tls __attribute__((tls_model("initial-exec")));
extern KP_HIDDEN _Atomic int kp_rt_floor;
extern KP_HIDDEN _Atomic int kp_rt_mode;
KP_INLINE int kp_rt_level(void) {
  int t = kp_rt_tls;
  if (t & KP_RT_LIFTED) return KAME_RT_OFF;
  int f = kp_load_relaxed(&kp_rt_floor);
  return t > f ? t : f;
}
/* The calling thread's frees make no system call. */
KP_INLINE bool kp_rt_defers(void) { return kp_rt_level() != KAME_RT_OFF; }
/* No release path purges pages: a realtime thread, or realtime mode. */
KP_INLINE bool kp_rt_keeps_pages(void) { return kp_load_relaxed(&kp_rt_mode) != 0 || kp_rt_defers(); }
KP_HIDDEN bool kp_rt_may_map(void);
KP_HIDDEN void kp_rt_note_map(void);
KP_HIDDEN bool kp_rt_park(void *p, size_t len);
KP_HIDDEN size_t kp_rt_settle(void);
KP_HIDDEN int kp_rt_lift(void);
KP_HIDDEN void kp_rt_restore(int saved);
KP_HIDDEN void kp_rt_advise_region(void *p, size_t len);
KP_HIDDEN void kp_rt_advise_block(void *p, size_t len);

/* addrmap.c: the address map and pointer classification */
enum {
  KP_PTR_FOREIGN = 0, /* not the pool's: the system allocator's business */
  KP_PTR_SLOT,        /* a live slot of a bucket chunk */
  KP_PTR_DEDICATED,   /* a live dedicated block */
  KP_PTR_MAPPING,     /* a live large or huge block */
  KP_PTR_INVALID,     /* in the pool's memory but not a live block */
};
typedef struct kp_ptr_info {
  int kind;
  kp_chunk *chunk;     /* SLOT, DEDICATED */
  uintptr_t entry;     /* MAPPING: the radix entry */
  size_t usable;       /* live blocks */
  const char *problem; /* INVALID: what is wrong with the pointer */
} kp_ptr_info;
KP_HIDDEN void kp_lookup(const void *p, kp_ptr_info *out);
KP_HIDDEN void kp_lookup_in_region(const void *p, kp_chunk *c, kp_ptr_info *out);
KP_HIDDEN bool kp_radix_set(uintptr_t addr, uintptr_t entry);
KP_HIDDEN bool kp_radix_set_mapping(uintptr_t p, size_t len, uintptr_t kind_bits);
KP_HIDDEN void kp_radix_clear_mapping(uintptr_t p, size_t len);
KP_HIDDEN void kp_radix_shrink_mapping(uintptr_t p, size_t len, size_t new_len, uintptr_t kind_bits);
KP_HIDDEN void kp_addr_map_set_region(uintptr_t addr);

/* check.c: the check level and the reports of misuse */
enum { KP_CHECK_IGNORE = 0, KP_CHECK_ABORT = 1, KP_CHECK_FULL = 2 };
extern KP_HIDDEN _Atomic int kp_check_level;
KP_HIDDEN void kp_check_init(void);
KP_HIDDEN size_t kp_stat_invalid_pointers(void);
KP_HIDDEN KP_COLD void kp_invalid_pointer(const char *op, const void *p, const char *problem);
KP_HIDDEN KP_COLD KP_NORETURN void kp_corrupt(const char *what, const void *where);
KP_HIDDEN KP_COLD KP_NORETURN void kp_assert_failed(const char *id, const char *cond, const char *file,
                                                    int line);
KP_HIDDEN void kp_debug_validate(void);

/* stats.c: live and free slots per class, walked when asked for */
KP_HIDDEN void kp_census_classes(uint64_t live[KP_NUM_CLASSES], uint64_t free_slots[KP_NUM_CLASSES]);

/* sys_alloc.c: the fallback policy (portable) */
KP_HIDDEN void *kp_fallback_alloc(size_t size, size_t align, bool zero);
KP_HIDDEN void *kp_fallback_realign(void *p, size_t size, size_t align);
/* sys_alloc_<os>.c: the system allocator, for foreign pointers and past
 * the cap; kp_sys_free leaves errno unchanged */
KP_HIDDEN void *kp_sys_malloc(size_t size);
KP_HIDDEN void *kp_sys_calloc(size_t count, size_t size);
KP_HIDDEN void *kp_sys_realloc(void *p, size_t size);
KP_HIDDEN void *kp_sys_memalign(size_t align, size_t size);
KP_HIDDEN void kp_sys_free(void *p);
KP_HIDDEN size_t kp_sys_usable_size(void *p);

/* api.c: the entry points the override layer forwards to */
KP_HIDDEN void *kp_malloc(size_t size);
KP_HIDDEN void *kp_calloc(size_t count, size_t size);
KP_HIDDEN void *kp_realloc(void *p, size_t size);
KP_HIDDEN void kp_free(void *p);
KP_HIDDEN void *kp_memalign(size_t align, size_t size);
KP_HIDDEN int kp_posix_memalign(void **out, size_t align, size_t size);
KP_HIDDEN size_t kp_usable_size(const void *p);

/* track.c: telling memcheck about blocks (a build with KP_VALGRIND=1 only;
 * otherwise these are nothing, and the hit paths are as without them).
 * alloc: p became a live block (`zeroed`: its bytes are known zero);
 * free: p is about to be freed; reuse: the pool takes len bytes at p back
 * for its own use. */
#ifndef KP_VALGRIND
#define KP_VALGRIND 0
#endif
#if KP_VALGRIND
KP_HIDDEN void kp_track_alloc(void *p, bool zeroed);
KP_HIDDEN void kp_track_free(void *p);
KP_HIDDEN void kp_track_reuse(void *p, size_t len);
#else
#define kp_track_alloc(p, zeroed) ((void)0)
#define kp_track_free(p) ((void)0)
#define kp_track_reuse(p, len) ((void)0)
#endif

/* Whether p, at a slot whose address-map value carries a heap's mark
 * [MAP-4], is a mapping's head not freed already (its first word is not
 * its free tag `tag`, kp_free_tag(p)). */
KP_INLINE bool kp_live_mapping_head(const void *p, uintptr_t tag) {
  return ((uintptr_t)p & KP_REGION_MASK) == 0 && *(const uintptr_t *)p != tag;
}

/* The L1 slot of heap h that takes back p, if p is the head of one of
 * h's mappings of a cached class and not already freed; NULL otherwise.
 * (The cache's top is not looked at here: a slot above it has no place
 * granted once the thread has seen the top [L1-3].)  `v`: the address
 * map's value at p's slot, which names the slot.  Only heads of cached
 * classes carry a heap's mark, and the heaps without a thread have an odd
 * mark, which no head carries [MAP-4]: a matching mark is a live head's,
 * and p's first word may be read.  `tag`: kp_free_tag(p), which the
 * caller stores if it takes p. */
KP_INLINE kp_l1_slot *kp_own_mapping_slot(kp_heap *h, void *p, unsigned v, uintptr_t tag) {
  if ((uint8_t)v != h->head_mark || !kp_live_mapping_head(p, tag)) return NULL;
  _Static_assert(sizeof(kp_l1_slot) == 64, "the address map's L1 index scales to a slot offset by a shift");
  char *slots = (char *)&h->l1.slot[KP_CACHE_CHUNK_INDEXES];
  return (kp_l1_slot *)(slots + ((size_t)(v >> KP_ADDR_L1_SHIFT) << 6));
}

/* ---- The bucket tier's hit paths --------------------------------------- */

/* The token a thread's owned chunks carry: its thread id, with the low bit
 * set at the full check level (so that no free takes the hit path). */
KP_INLINE uintptr_t kp_owner_token(void) {
  return kp_os_thread_id() | (kp_load_relaxed(&kp_check_level) >= 2 ? 1 : 0);
}

/* The current chunk for a request of `size` bytes, at most KP_DIRECT_MAX. */
KP_INLINE kp_chunk *kp_direct_current(kp_heap *h, size_t size) {
  return *(kp_chunk **)((char *)h + h->current_at[size]);
}

/* &region->unit_chunk[unit of p] for p in the region of address-map slot
 * `slot`, with one multiply: p >> 18 is slot * 128 + unit (p lies below
 * the address bits, so the slot is p >> 25 unmasked), and the entry's
 * address slot * 2^25 + 8 * unit is then slot * (2^25 - 2^10) +
 * 8 * (p >> 18).  gcc turns the multiply into shifts and a subtraction,
 * one instruction more, hence the assembly. */
#define KP_UNIT_CHUNK_SCALE (KP_REGION_SIZE - KP_UNITS_PER_REGION * sizeof(kp_chunk *))
KP_INLINE _Atomic(kp_chunk *) *kp_unit_chunk_at(uintptr_t slot, const void *p) {
  _Static_assert(offsetof(kp_region, unit_chunk) == 0, "the unit table starts the region");
  uintptr_t base = slot;
#if defined(__x86_64__)
  __asm__("imulq %1, %0" : "+r"(base) : "i"(KP_UNIT_CHUNK_SCALE));
#else
  base *= KP_UNIT_CHUNK_SCALE;
#endif
  return (_Atomic(kp_chunk *) *)(base + ((uintptr_t)p >> KP_UNIT_SHIFT) * sizeof(kp_chunk *));
}

/* Hands out slot b, the head of chunk c's free list. */
KP_INLINE void *kp_take_slot(kp_chunk *c, kp_block *b) {
  c->free = b->next;
  b->tag = 0; /* no longer free */
  kp_track_alloc(b, false);
  return b;
}

/* Pops a slot of chunk c (the heap's current one for `size`). */
KP_INLINE void *kp_pop_slot(kp_heap *h, kp_chunk *c, size_t size) {
  kp_block *b = c->free;
  if (likely(b != NULL)) return kp_take_slot(c, b);
  return kp_malloc_small_slow(size, h);
}

/* A slot of the class for `size` (at most KP_SMALL_MAX); NULL only when
 * neither the pool nor the system allocator can serve it. */
KP_INLINE void *kp_malloc_small(size_t size) {
  kp_heap *h = kp_tls_heap;
  kp_chunk *c = size <= KP_DIRECT_MAX ? kp_direct_current(h, size) : h->current[kp_size_class(size)];
  return kp_pop_slot(h, c, size);
}

/* A take of block p from the heap's hot cell, which the caller found
 * full and of its slot: the cell empties first (a store to a fixed
 * address before the one into the block let the loop run a third faster,
 * docs/design.md), then the block's free tag goes.  The drain clock is
 * looked at every 256th take [HOT-1]. */
KP_INLINE void *kp_hot_take(kp_heap *h, void *p) {
  h->hot = NULL;
  *(uintptr_t *)p = 0;
  kp_track_alloc(p, false);
  if (unlikely(++h->hot_takes == 0)) return kp_l1_hot_look(h, p); /* a tail call: no frame here */
  return p;
}

/* A dedicated block (32 KiB .. 4 MiB) from the thread's L1 slot for its
 * unit count, when the hot cell had none.  A chunk is kept there only by
 * the thread it belongs to, so it is handed out as it is: its owner,
 * start and slot stand [L1-1]. */
KP_INLINE void *kp_malloc_dedicated(size_t size, kp_heap *h) {
  kp_l1_slot *s = kp_l1_slot_at(h, ((size - 1) >> (KP_UNIT_SHIFT - 6)) & ~(size_t)63);
  uint32_t held = s->held;
  if (unlikely((held & KP_L1_COUNT_MASK) == 0)) return kp_malloc_big_slow(size);
  char *p = kp_l1_pop(s, held);
  kp_chunk *c = kp_chunk_at_start(p);
  c->block = p;
  kp_store_relaxed(&c->kind, KP_CHUNK_DEDICATED);
  kp_track_alloc(p, false);
  return p;
}

/* malloc above the dedicated tier: a mapping from the thread's L1, or the
 * slow path.  The slot's blocks are all of the request's class length
 * [MAP-3]: the last one pushed is handed out unchecked, and its place
 * stays granted for its return [L1-2].  A slot above the cache's top
 * (lowered since) may still hold blocks: handing them out is as good as
 * keeping them. */
KP_INLINE void *kp_malloc_mapping(size_t size, kp_heap *h) {
  if (likely(size <= KP_MAP_TABLE_MAX)) {
    size_t off = kp_map_slot_offset_of_granule[(size - 1) >> KP_MAP_TABLE_SHIFT];
    kp_l1_slot *s = kp_l1_slot_at(h, off + KP_CACHE_CHUNK_INDEXES * sizeof(kp_l1_slot));
    uint32_t held = s->held;
    if (likely((held & KP_L1_COUNT_MASK) != 0)) {
      void *p = kp_l1_pop(s, held);
      *(uintptr_t *)p = 0; /* the free tag */
      kp_track_alloc(p, false);
      return p;
    }
  }
  return kp_malloc_big_slow(size);
}

/* malloc above the bucket tier: the hot cell's block if the request is
 * of the cell's slot (one compare of the size, whichever tier: the
 * block is still of its kind [HOT-1]), else the L1 slot of its tier.
 * The take laid out first: a taken branch there cost the 64 KiB loop 5 %
 * in the measurements of docs/design.md. */
KP_INLINE void *kp_malloc_big(size_t size, kp_heap *h) {
  void *p = h->hot;
  if (likely(size - h->hot_lo < h->hot_span && p != NULL)) return kp_hot_take(h, p);
  if (likely(size <= KP_DEDICATED_MAX)) return kp_malloc_dedicated(size, h);
  return kp_malloc_mapping(size, h);
}

KP_INLINE void *kp_malloc_inline(size_t size) {
  kp_heap *h = kp_tls_heap;
  kp_chunk *c;
  if (likely(size <= KP_DIRECT_MAX)) c = kp_direct_current(h, size);
  else if (size <= KP_SMALL_MAX) c = h->current[kp_size_class(size)];
  else return kp_malloc_big(size, h);
  return kp_pop_slot(h, c, size);
}

/* The owner's free of slot b of its chunk c, checked: onto `free`, taking
 * one off `owner_frees` (`offset` 0, the current chunk), or onto
 * `local_free`, taking one off `used` (KP_OWNER_RESTING, a resting one);
 * the fields lie that far on in the header, so no branch picks them. */
KP_INLINE void kp_owner_push(kp_chunk *c, kp_block *b, uintptr_t offset) {
  char *at = (char *)c + offset;
  kp_block **list = (kp_block **)(at + offsetof(kp_chunk, free));
  int32_t *count = (int32_t *)(at + offsetof(kp_chunk, owner_frees));
  b->tag = (uintptr_t)c;
  b->next = *list;
  *list = b;
  if (unlikely(--*count == 0)) kp_free_owned_slow(kp_tls_heap, c);
}

KP_INLINE void kp_free_inline(void *p) {
  kp_track_free(p);
  uintptr_t slot = kp_addr_slot(p);
  if (likely(kp_addr_map_get(slot) & KP_ADDR_REGION)) {
    kp_chunk *c = kp_load_relaxed(kp_unit_chunk_at(slot, p));
    uintptr_t owner = kp_load_relaxed(&c->owner);
    uintptr_t mismatch = kp_os_thread_id_xor(owner);
    if (likely((mismatch & ~KP_OWNER_RESTING) == 0)) {
      /* One of the thread's bucket chunks [CUR-2].  Its current one
       * (mismatch 0): back onto its free list, which `used` counts, so
       * `used` stays as it is [USED-1], and `owner_frees` counts the free.
       * Another one (mismatch KP_OWNER_RESTING): onto its local list,
       * counted off `used`; at 0 no slot is live. */
      kp_block *b = (kp_block *)p;
      if (unlikely(b->tag == (uintptr_t)c)) {
        kp_invalid_pointer("free", p, "double free");
        return;
      }
      kp_owner_push(c, b, mismatch);
      return;
    }
    /* The thread's own dedicated block (`block` names its start only
     * while it is live or in the hot cell [L1-1]): into the hot cell, as
     * it is, if the cell is empty and of the L1 slot its header names
     * [HOT-1]; otherwise into that slot or the release layer decides. */
    kp_heap *h = kp_tls_heap;
    if (likely(mismatch == h->dedicated_mismatch && c->block == (char *)p)) {
      if (likely(c->home == h->hot_slot && h->hot == NULL)) {
        h->hot = p;
        *(uintptr_t *)p = kp_free_tag(p); /* a second free is caught [HOT-1] */
        return;
      }
      kp_free_dedicated_slow(h, c);
      return;
    }
    kp_free_in_region(p, c, mismatch);
    return;
  }
  /* Outside the regions: the thread's own mapping goes into the hot cell
   * of the L1 slot the address map names, the same way.  (The value is
   * loaded again so that the bucket hit path tests the bit in memory,
   * without a load into a register first.) */
  kp_heap *h = kp_tls_heap;
  uintptr_t tag = kp_free_tag(p);
  unsigned v = __atomic_load_n(&kp_addr_map[slot], __ATOMIC_RELAXED);
  /* The value names the heap and the slot [MAP-4]: a head's free tag in
   * its first word means it is free already. */
  if (likely(v == h->hot_head_value && kp_live_mapping_head(p, tag) && h->hot == NULL)) {
    h->hot = p;
    *(uintptr_t *)p = tag; /* freed: a second free is caught */
    return;
  }
  kp_free_generic(p, kp_own_mapping_slot(h, p, v, tag));
}

#endif
