/* The pool's mappings: aligned placement above the OS interface, and
 * unmapping that survives the OS refusing.
 *
 * Aligned placement is portable policy on top of kp_os_reserve, which
 * only promises the OS's allocation granularity.  It first asks for the
 * range at an address likely to be free and aligned (where the last
 * aligned mapping was unmapped, or just below the last one made): one
 * system call when the OS agrees.  Otherwise, where the OS can unmap part
 * of a reservation, it reserves `align` more than needed and unmaps both
 * ends; where it cannot (a reservation is released whole or not at all),
 * it reserves the larger range, releases it, and reserves the aligned
 * range inside it, which another thread may take in between: then it
 * tries again, a few times.
 *
 * Unmapping can fail: at the kernel's limit on mappings per process
 * (vm.max_map_count), unmapping the middle of a mapping the kernel has
 * merged with its neighbours needs one mapping more and is refused.  A
 * refused range has its pages purged (which never needs a new mapping)
 * and is kept in a table to be unmapped later, retried whenever the pool
 * has just unmapped something or is trimmed, so the address space comes
 * back once the process is under the limit again. */
#include "internal.h"

static _Atomic uintptr_t hint_freed; /* start of the last aligned range unmapped */
static _Atomic uintptr_t hint_below; /* start of the last aligned range mapped */

#define KP_PENDING_UNMAPS 1024
/* A slot's address: 0 free, 1 being written or retried, else a range. */
static _Atomic uintptr_t pending_addr[KP_PENDING_UNMAPS];
static size_t pending_len[KP_PENDING_UNMAPS];
static _Atomic size_t pending_bytes;
static _Atomic size_t pending_lost; /* ranges the table had no room for */

#define KP_SLOT_BUSY ((uintptr_t)1)

/* What went back to the OS, for the statistics (system calls are the slow
 * path: the counts cost nothing next to them). */
static _Atomic size_t purged_total;
static _Atomic size_t unmapped_total;
size_t kp_stat_purged_bytes(void) { return kp_load_relaxed(&purged_total); }
size_t kp_stat_unmapped_bytes(void) { return kp_load_relaxed(&unmapped_total); }

/* `len` carries KP_LEN_RESERVED when the range counts in the pool's
 * reserved bytes (blocks and regions do, the ends of an over-mapping
 * do not). */
#define KP_LEN_RESERVED ((size_t)1)

static void unmap_later(void *addr, size_t len) {
  (void)kp_purge(addr, len & ~KP_LEN_RESERVED);
  for (unsigned i = 0; i < KP_PENDING_UNMAPS; i++) {
    uintptr_t expected = 0;
    if (!kp_cas_strong_acq_rel(&pending_addr[i], &expected, KP_SLOT_BUSY)) continue;
    pending_len[i] = len;
    kp_fetch_add_relaxed(&pending_bytes, len & ~KP_LEN_RESERVED);
    kp_store_release(&pending_addr[i], (uintptr_t)addr);
    return;
  }
  kp_fetch_add_relaxed(&pending_lost, 1);
}

/* Unmaps the range; if the OS refuses, the range is purged and queued.
 * `reserved`: the range counts in the reserved bytes, which drop when it
 * is really unmapped.  Returns whether it was unmapped now. */
bool kp_unmap(void *addr, size_t len, bool reserved) {
  if (kp_os_unmap(addr, len) != 0) {
    unmap_later(addr, len | (reserved ? KP_LEN_RESERVED : 0));
    return false;
  }
  if (reserved) {
    kp_unreserve_bytes(len);
    kp_fetch_add_relaxed(&unmapped_total, len);
  }
  if (kp_load_relaxed(&pending_bytes) != 0) kp_unmap_retry();
  return true;
}

/* Tries every queued range again; returns the bytes unmapped. */
size_t kp_unmap_retry(void) {
  size_t done = 0;
  if (kp_rt_defers()) return 0; /* later, from a drain or trim */
  for (unsigned i = 0; i < KP_PENDING_UNMAPS && kp_load_relaxed(&pending_bytes) != 0; i++) {
    uintptr_t addr = kp_load_acquire(&pending_addr[i]);
    if (addr <= KP_SLOT_BUSY) continue;
    if (!kp_cas_strong_acq_rel(&pending_addr[i], &addr, KP_SLOT_BUSY)) continue;
    size_t len = pending_len[i] & ~KP_LEN_RESERVED;
    if (kp_os_unmap((void *)addr, len) == 0) {
      kp_fetch_sub_relaxed(&pending_bytes, len);
      if (pending_len[i] & KP_LEN_RESERVED) {
        kp_unreserve_bytes(len);
        kp_fetch_add_relaxed(&unmapped_total, len);
      }
      done += len;
      kp_store_release(&pending_addr[i], 0);
    } else {
      kp_store_release(&pending_addr[i], addr);
    }
  }
  return done;
}

size_t kp_unmap_pending_bytes(void) { return kp_load_relaxed(&pending_bytes); }

/* Returns whether the pages were given back (and read as zero from now
 * on).  The OS refuses locked pages (kame_pool_mlock_regions): they keep
 * their contents, and the caller must not count them as zero. */
bool kp_purge(void *addr, size_t len) {
  if (kp_os_purge(addr, len) != 0) return false;
  kp_fetch_add_relaxed(&purged_total, len);
  return true;
}

/* Whether [p, p + len) lies where the address map can describe it. */
static bool addressable(const void *p, size_t len) {
  return ((uint64_t)(uintptr_t)p + len - 1) >> KP_ADDRESS_BITS == 0;
}

static void *try_at(uintptr_t hint, size_t len, size_t align) {
  if (hint == 0 || (hint & (align - 1)) != 0) return NULL;
  void *p;
  if (kp_os_reserve((void *)hint, len, true, &p) != 0) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0 && addressable(p, len)) return p;
  (void)kp_unmap(p, len, false);
  return NULL;
}

/* Over-reserves and trims the ends (partial unmapping). */
static void *map_trimmed(size_t len, size_t align) {
  char *raw;
  if (kp_os_reserve(NULL, len + align, true, (void **)&raw) != 0) return NULL;
  char *aligned = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(aligned - raw), tail = align - head;
  /* A refused trim leaves its piece queued for unmapping, not lost. */
  if (head) (void)kp_unmap(raw, head, false);
  if (tail) (void)kp_unmap(aligned + len, tail, false);
  if (addressable(aligned, len)) return aligned;
  (void)kp_unmap(aligned, len, false);
  return NULL;
}

/* Finds an aligned hole by reserving a larger range, releases it whole
 * and reserves the aligned part (no partial unmapping). */
static void *map_in_hole(size_t len, size_t align) {
  for (int attempt = 0; attempt < 8; attempt++) {
    char *raw;
    if (kp_os_reserve(NULL, len + align, false, (void **)&raw) != 0) return NULL;
    uintptr_t aligned = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    if (kp_os_unmap(raw, len + align) != 0) return NULL;
    void *p = try_at(aligned, len, align);
    if (p != NULL) return p;
  }
  return NULL;
}

/* Maps `len` bytes (a page multiple) aligned to `align` (a power of two,
 * at least a page), or returns NULL with the pool's state unchanged. */
void *kp_map_aligned(size_t len, size_t align) {
  kp_os_init();
  if (len + align < len) return NULL;
  if (align <= kp_os.alloc_granularity) {
    void *p;
    if (kp_os_reserve(NULL, len, true, &p) != 0) return NULL;
    if (addressable(p, len)) return p;
    (void)kp_unmap(p, len, false);
    return NULL;
  }
  /* One guess only: a wrong one costs two system calls. */
  uintptr_t hint = kp_exchange_acq_rel(&hint_freed, 0);
  if (hint == 0) {
    uintptr_t below = kp_load_relaxed(&hint_below);
    hint = below > len ? (below - len) & ~(uintptr_t)(align - 1) : 0;
  }
  void *p = try_at(hint, len, align);
  if (p == NULL) p = kp_os.has_partial_unmap ? map_trimmed(len, align) : map_in_hole(len, align);
  if (p == NULL) return NULL;
  kp_store_relaxed(&hint_below, (uintptr_t)p);
  return p;
}

/* Unmaps a reserved block made by kp_map_aligned, and remembers where it
 * was for the next aligned mapping. */
void kp_unmap_aligned(void *p, size_t len) {
  if (kp_unmap(p, len, true)) kp_store_relaxed(&hint_freed, (uintptr_t)p);
}
