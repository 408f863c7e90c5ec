/* Every decision to keep memory warm, purge it or unmap it.
 *
 * Memory the program no longer uses comes here: a bucket chunk that
 * emptied, a freed dedicated chunk, a freed mapping.  It goes to the
 * recycle cache (recycle.c) while the cache is under its byte cap, and
 * back to the OS otherwise: a chunk's units are freed with their pages
 * (dirty, up to a share of the cap) or purged (region.c), a mapping is
 * unmapped (mapping.c).  Idle cached blocks and idle dirty units drain a
 * little at a time, checked on slow paths (there is no background
 * thread), and kame_pool_trim empties the calling thread's cache, the
 * global one and the dirty units.  No other file decides to purge or
 * unmap. */
#include "internal.h"

#include <string.h>

#define KP_DEFAULT_CACHE_CAP ((size_t)(sizeof(void *) == 8 ? 512 : 64) << 20)
#define KP_DEFAULT_CACHE_TOP ((size_t)64 << 20)
#define KP_DRAIN_IDLE_TICKS 2 /* a block idle this many ticks is given back */
/* Free dirty units idle this many ticks are purged (docs/design.md). */
#define KP_DIRTY_IDLE_TICKS 10
#define KP_DRAIN_BLOCKS 4     /* at most this many per tick from L2 */
/* A resting bucket chunk gives back the pages of its free tail after this
 * many ticks on its owner's avail list, and is looked at again after as
 * many more if frees came meanwhile (docs/design.md) [TAIL-1]; at most
 * KP_TAIL_LOOKS chunks a tick. */
#define KP_TAIL_IDLE_TICKS 100
#define KP_TAIL_LOOKS 8
#define KP_L2_DEMAND_INTERVALS 8 /* an L2 size asked for this recently is spared */
#define KP_DIRTY_CAP_SHARE 32    /* free dirty units: at most cap / 32 */
/* calloc of a recycled block: below this, memset; above, purge the pages
 * and let the kernel zero them when touched. */
#define KP_ZERO_BY_PURGE ((size_t)1 << 20)

static _Atomic size_t cache_cap = KP_DEFAULT_CACHE_CAP;
_Atomic size_t kp_cache_top_bytes = KP_DEFAULT_CACHE_TOP;
_Atomic uint32_t kp_cache_top_epoch;
static _Atomic unsigned drain_interval_ms = 10;
static _Atomic int exit_reclaim = 1;
static _Atomic uint64_t next_drain_ns;
/* Starts at 1, so that a stamp of 0 (never popped) is out of demand. */
_Atomic uint32_t kp_drain_tick = 1;

size_t kp_cache_cap(void) { return kp_load_relaxed(&cache_cap); }
/* Realtime mode keeps an exiting thread's memory for other threads. */
bool kp_thread_exit_reclaim(void) { return kp_load_relaxed(&exit_reclaim) != 0 && kp_load_relaxed(&kp_rt_mode) == 0; }

/* ---- Chunks ---------------------------------------------------------------- */

kp_chunk *kp_chunk_obtain(kp_heap *h, unsigned units, bool *zeroed) {
  /* A miss in the thread's L1 has looked at the drain clock. */
  kp_chunk *c = kp_cache_take_chunk(h, units);
  if (c != NULL) *zeroed = false;
  else c = kp_units_claim(h, units, zeroed);
  if (c != NULL) kp_track_reuse(kp_chunk_start(c), kp_chunk_bytes(c));
  return c;
}

/* The resting chunks of h (on its avail lists) that rested KP_TAIL_IDLE_TICKS
 * since they were put there or last looked at, or all of them: the pages
 * that hold only free slots at the end of their carved part go back to
 * the OS [TAIL-1]. */
void kp_release_idle_tails(kp_heap *h, bool all) {
  if (!all && kp_rt_keeps_pages()) return;
  uint32_t now = kp_drain_now(), looks = 0;
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    for (kp_chunk *c = h->avail[cls]; c != NULL; c = c->next) {
      if (!all && now - c->rest_tick < KP_TAIL_IDLE_TICKS) continue;
      if (c->used == c->tail_used) continue; /* no frees since the last look */
      if (!all && looks++ == KP_TAIL_LOOKS) return;
      c->rest_tick = now;
      c->tail_used = c->used;
      size_t from, to;
      bool was_trimmed;
      if (kp_chunk_uncarve_tail(h, c, &from, &to, &was_trimmed) && !kp_purge(kp_chunk_start(c) + from, to - from) &&
          !was_trimmed)
        kp_chunk_untrim(h, c);
    }
  }
}

/* The chunk's pages go back to the OS and its units to the region.  For a
 * realtime thread, or in realtime mode, the pages stay: the units are
 * freed dirty (reusable at once; trim purges them). */
void kp_chunk_release(kp_chunk *c) {
  if (kp_rt_keeps_pages()) {
    kp_units_free(c, true);
    return;
  }
  /* Pages the OS would not purge (locked) keep their data: dirty. */
  kp_units_free(c, !kp_purge(kp_chunk_start(c), kp_chunk_bytes(c)));
}

/* Free dirty units may hold this share of the cache's cap [DIRTY-3]. */
static size_t dirty_share(void) { return kp_cache_cap() / KP_DIRTY_CAP_SHARE; }

/* Frees c's units with their pages if the drain will purge them later and
 * the dirty units stay within their share. */
static bool free_units_dirty(kp_chunk *c) {
  if (kp_load_relaxed(&drain_interval_ms) == 0 || kp_load_relaxed(&kp_rt_mode)) return false;
  return kp_units_free_dirty_within(c, dirty_share());
}

/* A chunk no block of which is live.  `local`: the heap whose L1 may keep
 * it (the one that used it), or NULL.  What the cache does not take goes
 * back to its region with its pages, which the drain purges once idle,
 * unless the dirty units are over their share of the cap or the thread is
 * exiting with reclaim on. */
void kp_chunk_retire(kp_heap *local, kp_chunk *c) {
  bool exiting = local != NULL && local->exiting;
  bool reclaim = exiting && kp_thread_exit_reclaim(); /* released, not kept warm */
  /* Its tail tagged again only if it may be kept warm [TAIL-1]; a
   * realtime thread touches no page it gave back, and its chunk goes
   * back with its tail untagged, as if released. */
  if (!reclaim && kp_load_relaxed(&c->kind) == KP_CHUNK_BUCKET && kp_load_relaxed(&c->trimmed) &&
      !kp_rt_keeps_pages())
    kp_chunk_retag_tail(c);
  if (exiting) {
    if (!reclaim && kp_cache_put_chunk(NULL, c, false)) return;
  } else if (kp_cache_put_chunk(local, c, local != NULL)) {
    return;
  }
  if (!reclaim && free_units_dirty(c)) return;
  kp_chunk_release(c);
}

/* ---- Mappings -------------------------------------------------------------- */

void kp_mapping_release_now(void *p, size_t len) {
  kp_radix_clear_mapping((uintptr_t)p, len);
  kp_unmap_aligned(p, len);
}

/* A realtime thread parks the mapping for a later unmap (realtime.c),
 * unless the pending cap forces it out now. */
void kp_mapping_release(void *p, size_t len) {
  if (kp_rt_defers() && kp_rt_park(p, len)) return;
  kp_mapping_release_now(p, len);
}

void kp_mapping_retire(kp_heap *local, void *p, size_t len) {
  if (len <= kp_load_relaxed(&kp_cache_top_bytes)) {
    *(uintptr_t *)p = kp_free_tag(p); /* freed: a second free is caught */
    bool exiting = local != NULL && local->exiting;
    if (exiting ? !kp_thread_exit_reclaim() && kp_cache_put_mapping(NULL, p, len, false)
                : kp_cache_put_mapping(local, p, len, local != NULL))
      return;
  }
  kp_mapping_release(p, len);
}

/* Zeroes the first `size` bytes of a recycled block of `capacity` bytes. */
void kp_zero_block(void *p, size_t size, size_t capacity) {
  if (capacity < KP_ZERO_BY_PURGE || kp_rt_defers()) { /* a purge is a system call */
    memset(p, 0, size);
    return;
  }
  size_t page = kp_page_size();
  if (!kp_purge(p, (size + page - 1) & ~(page - 1))) memset(p, 0, size); /* locked pages */
}

/* ---- Draining ------------------------------------------------------------- */

/* A change of the cache's top since the thread last looked: its L1 gives
 * up the slots above the top [L1-3].  The epoch is read before the top, so
 * the top dropped against is at least as new as the change recorded. */
static void look_at_top(kp_heap *h) {
  uint32_t epoch = kp_load_relaxed(&kp_cache_top_epoch);
  if (h->top_seen == epoch) return;
  h->top_seen = epoch;
  kp_l1_drop_above(h, kp_cache_top());
}

/* Called on slow paths (and now and then from hit paths): the drain clock
 * advances by the intervals elapsed since it last moved, so after a quiet
 * spell everything cached before it is old at once; L2 blocks idle for
 * KP_DRAIN_IDLE_TICKS go back, a few per interval elapsed, unless their
 * size was asked for lately [L2-3], and so do the calling thread's idle L1
 * blocks. */
void kp_release_tick(kp_heap *h) {
  if (h != NULL) {
    h->tick_countdown = KP_TICK_EVERY;
    kp_l1_settle(h); /* what follows reads and changes L1 [HOT-1] */
  }
  /* Realtime mode silences the drain; a realtime thread does not run it
   * (it would give back blocks: system calls, and its warm set). */
  unsigned ms = kp_load_relaxed(&kp_rt_mode) || kp_rt_defers() ? 0 : kp_load_relaxed(&drain_interval_ms);
  if (ms != 0) {
    uint64_t interval = (uint64_t)ms * 1000000u;
    uint64_t now = kp_os_now_ns(), next = kp_load_relaxed(&next_drain_ns);
    if (now >= next && kp_cas_strong_acq_rel(&next_drain_ns, &next, now + interval)) {
      uint64_t elapsed = next == 0 ? 1 : 1 + (now - next) / interval;
      uint32_t ticks = elapsed > 64 ? 64 : (uint32_t)elapsed;
      kp_fetch_add_relaxed(&kp_drain_tick, ticks);
      /* Sizes asked for within the last KP_L2_DEMAND_INTERVALS keep theirs [L2-3]. */
      uint64_t demand = KP_L2_DEMAND_INTERVALS * interval;
      kp_cache_evict_l2(KP_DRAIN_BLOCKS * ticks, KP_DRAIN_IDLE_TICKS, now > demand ? now - demand : 1);
      if (kp_units_dirty_bytes() != 0) kp_units_clean_dirty(kp_purge, KP_DIRTY_IDLE_TICKS);
    }
  }
  if (h != NULL) look_at_top(h);
  uint32_t tick = kp_drain_now();
  if (h != NULL && h->drain_seen != tick) {
    h->drain_seen = tick;
    kp_l1_date_pops(h);
    h->collect_due = true; /* at its next allocation slow path, not nested here */
    kp_l1_revoke(h, false);
    kp_cache_update_share(h);
    if (ms != 0) kp_cache_flush_l1(h, false, KP_DRAIN_IDLE_TICKS);
  }
}

/* New mappings need `bytes` under the pool's ceiling: give back cached
 * memory.  Returns whether anything was given back. */
bool kp_release_make_room(size_t bytes) {
  size_t freed = 0;
  kp_heap *h = kp_heap_if_any();
  if (h != NULL && h->l1.bytes != 0) freed += kp_cache_flush_l1(h, false, 0);
  while (freed < bytes) {
    size_t got = kp_cache_evict_l2(1, 0, 0);
    if (got == 0) break;
    freed += got;
  }
  return freed != 0 || kp_unmap_retry() != 0;
}

static _Atomic size_t trims, trim_bytes;
size_t kp_stat_trims(void) { return kp_load_relaxed(&trims); }
size_t kp_stat_trim_bytes(void) { return kp_load_relaxed(&trim_bytes); }

/* Gives back everything no thread needs.  Returns the bytes whose pages
 * went back to the OS. */

size_t kp_trim(void) {
  int rt = kp_rt_lift(); /* an explicit call: the realtime gate does not apply */
  /* What went back is what the OS was given meanwhile: pages purged and
   * blocks unmapped (another thread's returns at the same time count too). */
  size_t before = kp_stat_purged_bytes() + kp_stat_unmapped_bytes();
  kp_heap *h = kp_heap_if_any();
  if (h != NULL) {
    kp_heap_collect(h);
    kp_release_idle_tails(h, true);
    kp_cache_flush_l1(h, false, 0);
  }
  kp_cache_evict_l2(UINT32_MAX, 0, 0);
  kp_units_clean_dirty(kp_purge, 0);
  kp_rt_settle();
  kp_unmap_retry();
  size_t freed = kp_stat_purged_bytes() + kp_stat_unmapped_bytes() - before;
  kp_fetch_add_relaxed(&trims, 1);
  kp_fetch_add_relaxed(&trim_bytes, freed);
  kp_rt_restore(rt);
  return freed;
}

/* ---- The public knobs ------------------------------------------------------ */

void kame_pool_set_large_cache_cap(size_t bytes) {
  kp_store_relaxed(&cache_cap, bytes);
  kp_heap *h = kp_heap_if_any();
  if (h != NULL) kp_cache_update_share(h);
  /* Over the new cap: give back the excess now. */
  while (kp_cache_l2_bytes() > bytes / 2 && kp_cache_evict_l2(1, 0, 0) != 0) {
  }
  if (h != NULL && h->l1.bytes > h->l1.cap) kp_cache_flush_l1(h, false, 0);
  if (kp_units_dirty_bytes() > dirty_share()) kp_units_clean_dirty(kp_purge, 0);
}
size_t kame_pool_get_large_cache_cap(void) { return kp_cache_cap(); }

void kame_pool_set_large_cache_top(size_t bytes) {
  if (bytes >= KP_CACHE_MAP_MAX_LIMIT) bytes = KP_CACHE_MAP_MAX_LIMIT - 1;
  kp_store_relaxed(&kp_cache_top_bytes, bytes);
  kp_fetch_add_relaxed(&kp_cache_top_epoch, 1);
  /* The calling thread at once; the others at their next look [L1-3]. */
  kp_heap *h = kp_heap_if_any();
  if (h != NULL) look_at_top(h);
}
size_t kame_pool_get_large_cache_top(void) { return kp_cache_top(); }

/* The new interval counts from now: a shorter one takes effect at once,
 * not after the deadline the old one had set. */
void kame_pool_set_lazy_drain_interval_ms(unsigned ms) {
  kp_store_relaxed(&drain_interval_ms, ms);
  kp_store_relaxed(&next_drain_ns, kp_os_now_ns() + (uint64_t)ms * 1000000u);
  /* No drain will purge what is held dirty now. */
  if (ms == 0 && kp_units_dirty_bytes() != 0) kp_units_clean_dirty(kp_purge, 0);
}
unsigned kame_pool_get_lazy_drain_interval_ms(void) { return kp_load_relaxed(&drain_interval_ms); }

void kame_pool_set_thread_exit_reclaim(int on) { kp_store_relaxed(&exit_reclaim, on != 0); }
int kame_pool_get_thread_exit_reclaim(void) { return kp_load_relaxed(&exit_reclaim); }

void kame_pool_trim(void) { kp_trim(); }
