/* Statistics, from the pool's own state.
 *
 * Nothing here runs on a hit path.  Counters kept on slow paths (bytes
 * given back to the OS, trims, heaps made, bad pointers) are read as they
 * are; everything else is derived when asked for, by walking what the
 * pool keeps anyway: the regions' unit bitmaps and chunk headers (live
 * slots are a chunk's `used` less what its lists hold), the address map
 * (large and huge blocks) and the recycle cache.  The walks read what
 * other threads may be changing, so they only read memory that stays
 * mapped (regions, heap slabs, the map) and clamp what they derive.
 *
 * The field list is KAME_POOL_STATS_FIELDS in kame_pool.h: the struct,
 * the table and the JSON are all expanded from it. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

typedef struct kp_census {
  uint64_t regions, units_claimed, units_dirty, units_clean;
  uint64_t chunks_bucket, chunks_detached, chunks_dedicated, chunks_cached;
  uint64_t small_blocks, small_bytes, small_free, dedicated_bytes, cache_chunk_bytes;
  uint64_t large_blocks, large_bytes, huge_blocks, huge_bytes;
  uint64_t cache_maps, cache_map_bytes;
} kp_census;

#define KP_READ(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* Slots of c on a free list of c, each entry checked to be a slot of c
 * or in a region (a slot of another chunk its owner keeps there
 * [HOST-1], not counted).  The list may be changing: a wrong link ends
 * the walk, it is never followed outside the pool's regions. */
static uint32_t list_length_checked(kp_chunk *c, kp_block *b, uint32_t limit) {
  char *start = kp_chunk_start(c);
  size_t bytes = kp_chunk_bytes(c);
  uint32_t n = 0;
  for (uint32_t steps = 0; b != NULL && steps < limit + KP_HOST_MAX; steps++) {
    size_t offset = (size_t)((char *)b - start);
    if (offset < bytes && kp_slot_boundary(c->cls, offset)) n++;
    else if (!kp_is_region(b) || ((uintptr_t)b & (KP_MIN_ALIGN - 1)) != 0) break;
    b = KP_READ(b->next);
  }
  return n;
}

/* Live slots of a bucket chunk [USED-1]: a detached chunk's `used` at
 * detach less the slots freed to it since; an owned chunk's `used` less
 * its remote list, and for a current chunk (biased) less its free list. */
static uint32_t bucket_live(kp_chunk *c, bool *detached) {
  uint64_t w = kp_load_acquire(&c->remote);
  int64_t remote = KP_REMOTE_COUNT(w), live;
  uint32_t capacity = KP_READ(c->capacity);
  *detached = (w & KP_REMOTE_DETACHED) != 0;
  if (*detached) {
    live = (int64_t)kp_load_relaxed(&c->detached_used) - remote;
  } else {
    int64_t used = KP_READ(c->used);
    if (used >= KP_CURRENT_BIAS / 2) used -= KP_CURRENT_BIAS + list_length_checked(c, KP_READ(c->free), capacity);
    live = used - remote;
  }
  if (live < 0) live = 0;
  if (live > (int64_t)capacity) live = capacity;
  return (uint32_t)live;
}

static void census_regions(kp_census *g) {
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    g->regions++;
    for (unsigned w = 0; w < KP_UNIT_WORDS; w++) {
      uint64_t claimed = kp_load_relaxed(&r->claimed[w]), dirty = kp_load_relaxed(&r->dirty[w]);
      if (w == 0) claimed &= ~(uint64_t)1; /* the metadata unit */
      unsigned n_claimed = (unsigned)__builtin_popcountll(claimed);
      unsigned n_free = 64 - n_claimed - (w == 0);
      uint64_t meta = w == 0 ? 1 : 0;
      unsigned n_dirty = (unsigned)__builtin_popcountll(dirty & ~claimed & ~meta);
      g->units_claimed += n_claimed;
      g->units_dirty += n_dirty;
      g->units_clean += n_free - n_dirty;
    }
    for (unsigned i = 1; i < KP_UNITS_PER_REGION; i++) {
      kp_chunk *c = &r->chunks[i];
      if (kp_load_relaxed(&r->unit_chunk[i]) != c) continue; /* not a chunk's first unit */
      int kind = kp_load_acquire(&c->kind);
      size_t bytes = (size_t)KP_READ(c->units) << KP_UNIT_SHIFT;
      if (kind == KP_CHUNK_BUCKET) {
        bool detached;
        uint32_t live = bucket_live(c, &detached);
        uint64_t live_bytes = (uint64_t)live * KP_READ(c->slot_size);
        g->chunks_bucket++;
        g->chunks_detached += detached;
        g->small_blocks += live;
        g->small_bytes += live_bytes;
        g->small_free += bytes > live_bytes ? bytes - live_bytes : 0;
      } else if (kind == KP_CHUNK_DEDICATED) {
        g->chunks_dedicated++;
        g->dedicated_bytes += bytes;
      } else if (kind == KP_CHUNK_CACHED) {
        g->chunks_cached++;
        g->cache_chunk_bytes += bytes;
      }
    }
  }
}

/* Large and huge blocks from the address map (the cached ones are there
 * too, and taken out after). */
static void census_mappings(kp_census *g) {
  for (size_t root = 0; root < KP_RADIX_ROOT_ENTRIES; root++) {
    kp_radix_leaf *leaf = kp_load_acquire(&kp_radix_root[root]);
    if (leaf == NULL) continue;
    for (size_t i = 0; i < KP_RADIX_LEAF_ENTRIES; i++) {
      uintptr_t e = kp_load_relaxed(&(*leaf)[i]);
      uintptr_t kind = e & KP_MAP_KIND_MASK;
      if (kind == KP_MAP_LARGE) {
        g->large_blocks++;
        g->large_bytes += KP_MAP_LEN(e);
      } else if (kind == KP_MAP_HUGE) {
        g->huge_blocks++;
        g->huge_bytes += KP_MAP_LEN(e);
      }
    }
  }
  kp_cache_census cc;
  kp_cache_census_take(&cc);
  g->cache_maps = cc.maps;
  g->cache_map_bytes = cc.map_bytes;
  /* Dedicated chunks in hot cells keep their kind: the walk of the
   * regions counted them as live [HOT-1]. */
  uint64_t n = cc.cell_chunks < g->chunks_dedicated ? cc.cell_chunks : g->chunks_dedicated;
  uint64_t nb = cc.cell_chunk_bytes < g->dedicated_bytes ? cc.cell_chunk_bytes : g->dedicated_bytes;
  g->chunks_dedicated -= n;
  g->dedicated_bytes -= nb;
  g->chunks_cached += n;
  g->cache_chunk_bytes += nb;
  /* Cached mappings are taken from the large tier first, the rest from
   * the huge one (the cache's top is below 1 GiB, so both may hold some). */
  uint64_t maps = cc.maps, bytes = cc.map_bytes;
  uint64_t m = maps < g->large_blocks ? maps : g->large_blocks;
  g->large_blocks -= m;
  maps -= m;
  g->huge_blocks -= maps < g->huge_blocks ? maps : g->huge_blocks;
  uint64_t b = bytes < g->large_bytes ? bytes : g->large_bytes;
  g->large_bytes -= b;
  bytes -= b;
  g->huge_bytes -= bytes < g->huge_bytes ? bytes : g->huge_bytes;
}

/* The version's fields end here (they are appended in version order). */
static size_t size_of_version(unsigned version) {
  size_t end = offsetof(kame_pool_stats_t, size) + sizeof(unsigned);
#define KP_STAT_END(name, since, accuracy, unit, text, source)                                    \
  if ((since) <= version && offsetof(kame_pool_stats_t, name) + sizeof(unsigned long long) > end) \
    end = offsetof(kame_pool_stats_t, name) + sizeof(unsigned long long);
  KAME_POOL_STATS_FIELDS(KP_STAT_END)
#undef KP_STAT_END
  return end;
}

unsigned kame_pool_get_stats(kame_pool_stats_t *stats) {
  if (stats == NULL || stats->version == 0) return 0;
  unsigned version = stats->version < KAME_POOL_STATS_VERSION ? stats->version : KAME_POOL_STATS_VERSION;
  /* The caller's own frees of other threads' blocks, still in its batches,
   * are published first, so that they show. */
  kp_heap *h = kp_heap_if_any();
  if (h != NULL && h->batched) kp_remote_flush_all(h);
  kp_census g;
  memset(&g, 0, sizeof g);
  census_regions(&g);
  census_mappings(&g);
  kame_pool_stats_t all;
  memset(&all, 0, sizeof all);
#define KP_STAT_FILL(name, since, accuracy, unit, text, source) all.name = (unsigned long long)(source);
  KAME_POOL_STATS_FIELDS(KP_STAT_FILL)
#undef KP_STAT_FILL
  size_t end = size_of_version(version), first = offsetof(kame_pool_stats_t, size) + sizeof(unsigned);
  memcpy((char *)stats + first, (char *)&all + first, end - first);
  stats->version = version;
  stats->size = (unsigned)end;
  return version;
}

/* ---- Printing ----------------------------------------------------------------- */

static const char *human(unsigned long long v, char *buf, size_t len) {
  static const char units[] = "KMGTPE";
  if (v < 1024) {
    snprintf(buf, len, "%llu B", v);
    return buf;
  }
  double d = (double)v;
  unsigned u = 0;
  for (d /= 1024; d >= 1024 && u + 1 < sizeof units - 1; d /= 1024) u++;
  snprintf(buf, len, "%.1f %ciB", d, units[u]);
  return buf;
}

void kame_pool_print_stats(FILE *out, int format) {
  if (out == NULL) out = stderr;
  kame_pool_stats_t s = KAME_POOL_STATS_INIT;
  kame_pool_get_stats(&s);
  char buf[32];
  if (format == KAME_POOL_STATS_JSON) {
    fprintf(out, "{\"version\": %u", s.version);
#define KP_STAT_JSON(name, since, accuracy, unit, text, source) fprintf(out, ", \"%s\": %llu", #name, s.name);
    KAME_POOL_STATS_FIELDS(KP_STAT_JSON)
#undef KP_STAT_JSON
    fprintf(out, "}\n");
  } else {
    fprintf(out, "kamepoolalloc statistics (version %u; exact: counted, snapshot: walked when read)\n", s.version);
#define KP_STAT_ROW(name, since, accuracy, unit, text, source)                                        \
  fprintf(out, "  %-22s %16llu %11s  %-8s %s\n", #name, s.name,                                       \
          strcmp(#unit, "BYTES") == 0 ? human(s.name, buf, sizeof buf) : "", #accuracy[0] == 'E' ? "exact" : "snapshot", \
          text);
    KAME_POOL_STATS_FIELDS(KP_STAT_ROW)
#undef KP_STAT_ROW
  }
  fflush(out);
}

/* Per size class: live slots and free slots of bucket chunks (for
 * malloc_info's size list).  A snapshot, as above. */
void kp_census_classes(uint64_t live[KP_NUM_CLASSES], uint64_t free_slots[KP_NUM_CLASSES]) {
  memset(live, 0, KP_NUM_CLASSES * sizeof live[0]);
  memset(free_slots, 0, KP_NUM_CLASSES * sizeof free_slots[0]);
  for (kp_region *r = kp_regions_first(); r != NULL; r = r->next) {
    for (unsigned i = 1; i < KP_UNITS_PER_REGION; i++) {
      kp_chunk *c = &r->chunks[i];
      if (kp_load_relaxed(&r->unit_chunk[i]) != c || kp_load_acquire(&c->kind) != KP_CHUNK_BUCKET) continue;
      unsigned cls = KP_READ(c->cls);
      if (cls >= KP_NUM_CLASSES) continue;
      bool detached;
      uint32_t n = bucket_live(c, &detached), capacity = KP_READ(c->capacity);
      live[cls] += n;
      free_slots[cls] += capacity > n ? capacity - n : 0;
    }
  }
}
