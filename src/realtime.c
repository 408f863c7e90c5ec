/* Realtime work: the gate that keeps a marked thread's frees out of the
 * kernel, and the calls that prepare and settle around it.
 *
 * The gate is consulted by the release layer (release.c), never by a hit
 * path.  When the calling thread is marked (or the process-wide floor is
 * set):
 *  - a chunk's release keeps its pages: the units go back to their region
 *    marked dirty, free for reuse, and kame_pool_trim (or, outside
 *    realtime mode, another thread's drain) purges them later;
 *  - a mapping's release is parked in a table here instead of unmapped,
 *    while the parked bytes stay under the pending cap and the table has
 *    a free slot; otherwise it is unmapped at once and counted as a
 *    forced release;
 *  - the drain tick neither evicts nor flushes, and the table of refused
 *    unmaps (mapping.c) is not retried;
 *  - an allocation that needs a new mapping goes through the OS policy.
 * The explicit calls below that are meant to enter the kernel (prewarm,
 * reserve, pinning, drain, trim, huge-page advice) lift the gate for the
 * calling thread while they run.  docs/realtime.md states the contract. */
#include "internal.h"

#include <string.h>

#define KP_RT_PARK_SLOTS 256
#define KP_RT_DEFAULT_PENDING_CAP ((size_t)1 << 30)
#define KP_SLOT_BUSY ((uintptr_t)1)

__thread uint8_t kp_rt_tls __attribute__((tls_model("initial-exec")));
_Atomic int kp_rt_floor;
_Atomic int kp_rt_mode;

static _Atomic int os_policy = KAME_RT_OS_ALLOW;
static _Atomic int thp_policy = KAME_THP_BLOCKS;
static _Atomic size_t pending_cap = KP_RT_DEFAULT_PENDING_CAP;
static _Atomic size_t pending_bytes;
static _Atomic unsigned long long violations;
static _Atomic unsigned long long forced_releases;

/* A parked mapping: the address (0 free, 1 being written or taken), then
 * its length, valid once the address is published. */
static _Atomic uintptr_t park_addr[KP_RT_PARK_SLOTS];
static size_t park_len[KP_RT_PARK_SLOTS];

/* ---- The gate ------------------------------------------------------------ */

int kp_rt_lift(void) {
  int saved = kp_rt_tls;
  kp_rt_tls = (uint8_t)(saved | KP_RT_LIFTED);
  return saved;
}

void kp_rt_restore(int saved) { kp_rt_tls = (uint8_t)saved; }

/* A new mapping for the calling thread's allocation: whether to make it. */
bool kp_rt_may_map(void) {
  if (!kp_rt_defers()) return true;
  int policy = kp_load_relaxed(&os_policy);
  if (policy == KAME_RT_OS_ALLOW) return true;
  kp_fetch_add_relaxed(&violations, 1);
  if (policy == KAME_RT_OS_COUNT) return true;
  if (policy == KAME_RT_OS_FAIL) return false;
  static const char msg[] = "kamepoolalloc: a realtime thread needed a new mapping (KAME_RT_OS_ABORT)\n";
  kp_os_write_error(msg, sizeof msg - 1);
  kp_os_abort();
}

/* A mapping that cannot be refused (an address-map leaf for a block that
 * is already mapped: without it the block would be taken for foreign):
 * counted like the others, never refused. */
void kp_rt_note_map(void) {
  if (kp_rt_defers() && kp_load_relaxed(&os_policy) != KAME_RT_OS_ALLOW) kp_fetch_add_relaxed(&violations, 1);
}

/* Parks the mapping p (len bytes) for a later unmap; false when the cap or
 * the table leaves no room (the caller unmaps now, a forced release). */
bool kp_rt_park(void *p, size_t len) {
  size_t cur = kp_load_relaxed(&pending_bytes);
  do {
    if (len > kp_load_relaxed(&pending_cap) || cur > kp_load_relaxed(&pending_cap) - len) goto forced;
  } while (!kp_cas_weak_acq_rel(&pending_bytes, &cur, cur + len));
  /* Freed: a second free of it is caught by the mapping's tag. */
  *(uintptr_t *)p = kp_free_tag(p);
  for (unsigned i = 0; i < KP_RT_PARK_SLOTS; i++) {
    uintptr_t expected = 0;
    if (kp_load_relaxed(&park_addr[i]) != 0 || !kp_cas_strong_acq_rel(&park_addr[i], &expected, KP_SLOT_BUSY))
      continue;
    park_len[i] = len;
    kp_store_release(&park_addr[i], (uintptr_t)p);
    return true;
  }
  kp_fetch_sub_relaxed(&pending_bytes, len);
forced:
  kp_fetch_add_relaxed(&forced_releases, 1);
  return false;
}

/* Unmaps every parked mapping; returns the bytes. */
size_t kp_rt_settle(void) {
  size_t done = 0;
  for (unsigned i = 0; i < KP_RT_PARK_SLOTS && kp_load_relaxed(&pending_bytes) != 0; i++) {
    uintptr_t addr = kp_load_acquire(&park_addr[i]);
    if (addr <= KP_SLOT_BUSY || !kp_cas_strong_acq_rel(&park_addr[i], &addr, KP_SLOT_BUSY)) continue;
    size_t len = park_len[i];
    kp_store_release(&park_addr[i], 0);
    kp_fetch_sub_relaxed(&pending_bytes, len);
    kp_mapping_release_now((void *)addr, len);
    done += len;
  }
  return done;
}

/* ---- Levels and mode ------------------------------------------------------ */

int kame_pool_set_realtime_thread(int level) {
  int prev = kp_rt_tls & ~KP_RT_LIFTED;
  if (level < KAME_RT_OFF) level = KAME_RT_OFF;
  if (level > KAME_RT_STRICT) level = KAME_RT_STRICT;
  kp_rt_tls = (uint8_t)((kp_rt_tls & KP_RT_LIFTED) | level);
  return prev;
}

int kame_pool_get_realtime_thread(void) {
  int t = kp_rt_tls & ~KP_RT_LIFTED, f = kp_load_relaxed(&kp_rt_floor);
  return t > f ? t : f;
}

void kame_pool_set_realtime_default(int level) {
  kp_store_relaxed(&kp_rt_floor, level > KAME_RT_OFF ? KAME_RT_DEFER : KAME_RT_OFF);
}
int kame_pool_get_realtime_default(void) { return kp_load_relaxed(&kp_rt_floor); }

void kame_pool_set_realtime_mode(int on) { kp_store_relaxed(&kp_rt_mode, on != 0); }
int kame_pool_get_realtime_mode(void) { return kp_load_relaxed(&kp_rt_mode); }

/* ---- Parking and counters ------------------------------------------------- */

size_t kame_pool_rt_drain(void) {
  int saved = kp_rt_lift();
  size_t done = kp_rt_settle();
  done += kp_unmap_retry();
  kp_rt_restore(saved);
  return done;
}

void kame_pool_set_rt_pending_cap(size_t bytes) { kp_store_relaxed(&pending_cap, bytes); }
size_t kame_pool_get_rt_pending_cap(void) { return kp_load_relaxed(&pending_cap); }
size_t kame_pool_rt_pending_bytes(void) { return kp_load_relaxed(&pending_bytes); }
unsigned long long kame_pool_rt_violations(void) { return kp_load_relaxed(&violations); }
unsigned long long kame_pool_rt_forced_releases(void) { return kp_load_relaxed(&forced_releases); }

void kame_pool_set_rt_os_policy(int policy) {
  if (policy < KAME_RT_OS_ALLOW || policy > KAME_RT_OS_ABORT) return;
  kp_store_relaxed(&os_policy, policy);
}
int kame_pool_get_rt_os_policy(void) { return kp_load_relaxed(&os_policy); }

/* ---- Prewarm ---------------------------------------------------------------- */

/* Writes to every page of the block (its contents are the caller's
 * anyway: the block is fresh). */
static void touch_pages(char *p, size_t size) {
  size_t page = kp_page_size();
  for (size_t off = 0; off < size; off += page) ((volatile char *)p)[off] = 0;
  if (size != 0) ((volatile char *)p)[size - 1] = 0;
}

int kame_pool_prewarm(const size_t *sizes, const unsigned *counts, unsigned n) {
  if (n != 0 && (sizes == NULL || counts == NULL)) return -1;
  size_t total = 0;
  for (unsigned i = 0; i < n; i++) {
    if (sizes[i] > KP_MAX_REQUEST || __builtin_add_overflow(total, counts[i], &total)) return -1;
  }
  if (total == 0) return 0;
  if (total > KP_MAX_REQUEST / sizeof(void *)) return -1;
  int saved = kp_rt_lift();
  int rc = 0;
  void **held = kp_malloc(total * sizeof(void *));
  if (held == NULL) {
    kp_rt_restore(saved);
    return -1;
  }
  touch_pages((char *)held, total * sizeof(void *));
  /* Two passes: the first brings the blocks in, the second takes them as
   * the section will, from the caches and free lists the first left (a
   * chunk's free list can start with slots the first pass never touched,
   * only linked). */
  for (unsigned pass = 0; pass < 2; pass++) {
    size_t k = 0;
    for (unsigned i = 0; i < n; i++) {
      for (unsigned j = 0; j < counts[i]; j++) {
        void *p = kp_malloc(sizes[i]);
        if (p == NULL) {
          rc = -1;
          continue;
        }
        kp_ptr_info info;
        kp_lookup(p, &info);
        if (info.kind == KP_PTR_FOREIGN) rc = -1; /* the system allocator's */
        touch_pages(p, sizes[i]);
        held[k++] = p;
      }
    }
    /* Last allocated, first freed: the caches hand blocks out in the
     * reverse order, so the next pass gets them back in the same order. */
    while (k > 0) kp_free(held[--k]);
  }
  kp_free(held);
  kp_rt_restore(saved);
  return rc;
}

/* ---- Regions: reserve, pin --------------------------------------------------- */

/* Faults in every page of the region's free units without changing a
 * byte: a compare-and-swap of a byte with itself is a write the kernel
 * must back (an add of zero would be compiled to a load, which maps the
 * shared zero page), and it is harmless even if another thread has
 * meanwhile claimed the unit. */
static void prefault_region(kp_region *r) {
  size_t page = kp_page_size();
  for (unsigned u = 1; u < KP_UNITS_PER_REGION; u++) {
    if (kp_load_relaxed(&r->claimed[u / 64]) & ((uint64_t)1 << (u % 64))) continue;
    char *unit = (char *)r + ((size_t)u << KP_UNIT_SHIFT);
    for (size_t off = 0; off < KP_UNIT_SIZE; off += page) {
      _Atomic uint8_t *b = (_Atomic uint8_t *)(unit + off);
      uint8_t v = kp_load_relaxed(b);
      kp_cas_strong_acq_rel(b, &v, v);
    }
  }
}

unsigned kame_pool_reserve_regions(unsigned n, int prefault) {
  int saved = kp_rt_lift();
  kp_region *before = kp_regions_first();
  unsigned made = (unsigned)kp_regions_reserve(n);
  if (prefault) {
    /* New regions are pushed at the head of the list. */
    for (kp_region *r = kp_regions_first(); r != NULL && r != before; r = r->next) prefault_region(r);
  }
  kp_rt_restore(saved);
  return made;
}

static size_t regions_pin(bool pin) {
  int saved = kp_rt_lift();
  size_t bytes = 0;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    int rc = pin ? kp_os_lock(r, KP_REGION_SIZE) : kp_os_unlock(r, KP_REGION_SIZE);
    if (rc == 0) bytes += KP_REGION_SIZE;
  }
  kp_rt_restore(saved);
  return bytes;
}

size_t kame_pool_mlock_regions(void) { return regions_pin(true); }
size_t kame_pool_munlock_regions(void) { return regions_pin(false); }

/* ---- Transparent huge pages -------------------------------------------------- */

#define KP_THP_SIZE ((size_t)2 << 20) /* x86-64's and a 4 KiB-page arm64's */

static size_t advise(void *p, size_t len, int policy) {
  if (policy == KAME_THP_SYSTEM || policy == KAME_THP_BLOCKS) return 0;
  return kp_os_advise_huge(p, len, policy == KAME_THP_ALWAYS) == 0 ? len : 0;
}

/* Whether BLOCKS advises a block of len bytes: one the recycle cache can
 * keep, so that its pages are touched again and again, and at least one
 * huge page long.  A block above the cache's top is mapped for one use:
 * huge pages would make a program that touches a few of its bytes zero
 * 2 MiB at the first touch, and the advice would add a system call to the
 * two of every such pair. */
static bool blocks_advised(size_t len) { return len >= KP_THP_SIZE && len <= kp_cache_top(); }

/* A region just mapped gets the current advice (BLOCKS gives it none). */
void kp_rt_advise_region(void *p, size_t len) { (void)advise(p, len, kp_load_relaxed(&thp_policy)); }

/* Under BLOCKS a large or huge block the cache can keep is advised for
 * huge pages, and nothing else is. */
static size_t advise_block(void *p, size_t len, int policy) {
  if (policy == KAME_THP_BLOCKS && blocks_advised(len)) policy = KAME_THP_ALWAYS;
  return advise(p, len, policy);
}
void kp_rt_advise_block(void *p, size_t len) { (void)advise_block(p, len, kp_load_relaxed(&thp_policy)); }

size_t kame_pool_set_thp_policy(int policy) {
  if (policy < KAME_THP_SYSTEM || policy > KAME_THP_BLOCKS) return 0;
  kp_store_relaxed(&thp_policy, policy);
  if (policy == KAME_THP_SYSTEM) return 0;
  int saved = kp_rt_lift();
  size_t bytes = 0;
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) bytes += advise(r, KP_REGION_SIZE, policy);
  /* Large and huge blocks, live or cached, by their head entries. */
  for (size_t top = 0; top < KP_RADIX_ROOT_ENTRIES; top++) {
    kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[top]);
    if (leaf == NULL) continue;
    for (size_t i = 0; i < KP_RADIX_LEAF_ENTRIES; i++) {
      uintptr_t e = kp_load_acquire(&(*leaf)[i]), kind = e & KP_MAP_KIND_MASK;
      if (kind != KP_MAP_LARGE && kind != KP_MAP_HUGE) continue;
      uintptr_t addr = ((top << KP_RADIX_LEAF_BITS) | i) << KP_REGION_SHIFT;
      bytes += advise_block((void *)addr, KP_MAP_LEN(e), policy);
    }
  }
  kp_rt_restore(saved);
  return bytes;
}
int kame_pool_get_thp_policy(void) { return kp_load_relaxed(&thp_policy); }
