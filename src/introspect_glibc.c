/* glibc's introspection calls, answered from the pool's state: mallinfo2
 * and mallinfo, malloc_stats, malloc_info (glibc's XML shape) and mallopt.
 * Built with the override only: without it these names are the C
 * library's.  The pool is one "arena" to these calls (its regions are
 * shared by all threads); kamepoolalloc(3) says which pool figure each
 * field carries, and which mallopt parameters take effect (those that map
 * onto an option; the others are accepted and ignored, as glibc ignores
 * parameters it does not use). */
#include "internal.h"

#include <limits.h>
#include <malloc.h>
#include <stdio.h>

#define KP_EXPORT KAME_POOL_EXPORT

static kame_pool_stats_t snapshot(void) {
  kame_pool_stats_t s = KAME_POOL_STATS_INIT;
  kame_pool_get_stats(&s);
  return s;
}

static size_t region_bytes(const kame_pool_stats_t *s) { return (size_t)s->regions * KP_REGION_SIZE; }
static size_t mapped_live(const kame_pool_stats_t *s) { return s->large_live_bytes + s->huge_live_bytes; }
static size_t mapped_count(const kame_pool_stats_t *s) { return s->large_live_blocks + s->huge_live_blocks; }

KP_EXPORT struct mallinfo2 mallinfo2(void) {
  kame_pool_stats_t s = snapshot();
  struct mallinfo2 m = {0};
  m.arena = region_bytes(&s);
  m.ordblks = s.units_dirty + s.units_clean;
  m.smblks = s.chunks_cached + s.cache_mappings;
  m.hblks = mapped_count(&s);
  m.hblkhd = mapped_live(&s);
  m.usmblks = 0;
  m.fsmblks = s.cache_bytes;
  m.uordblks = s.live_bytes;
  m.fordblks = s.reserved_bytes > s.live_bytes ? s.reserved_bytes - s.live_bytes : 0;
  m.keepcost = s.cache_bytes + s.units_dirty * KP_UNIT_SIZE;
  return m;
}

static int clamp(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

KP_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m = {0};
  m.arena = clamp(m2.arena);
  m.ordblks = clamp(m2.ordblks);
  m.smblks = clamp(m2.smblks);
  m.hblks = clamp(m2.hblks);
  m.hblkhd = clamp(m2.hblkhd);
  m.usmblks = clamp(m2.usmblks);
  m.fsmblks = clamp(m2.fsmblks);
  m.uordblks = clamp(m2.uordblks);
  m.fordblks = clamp(m2.fordblks);
  m.keepcost = clamp(m2.keepcost);
  return m;
}

/* glibc's summary (the regions as arena 0, mappings in the totals), then
 * the pool's own table. */
KP_EXPORT void malloc_stats(void) {
  kame_pool_stats_t s = snapshot();
  size_t in_regions = s.small_live_bytes + s.dedicated_live_bytes;
  fprintf(stderr, "Arena 0:\n");
  fprintf(stderr, "system bytes     = %10zu\n", region_bytes(&s));
  fprintf(stderr, "in use bytes     = %10zu\n", in_regions);
  fprintf(stderr, "Total (incl. mmap):\n");
  fprintf(stderr, "system bytes     = %10llu\n", s.reserved_bytes);
  fprintf(stderr, "in use bytes     = %10llu\n", s.live_bytes);
  fprintf(stderr, "max mmap regions = %10zu\n", mapped_count(&s));
  fprintf(stderr, "max mmap bytes   = %10zu\n", mapped_live(&s));
  kame_pool_print_stats(stderr, KAME_POOL_STATS_TABLE);
}

KP_EXPORT int malloc_info(int options, FILE *fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  if (fp == NULL) fp = stderr;
  kame_pool_stats_t s = snapshot();
  uint64_t live[KP_NUM_CLASSES], free_slots[KP_NUM_CLASSES];
  kp_census_classes(live, free_slots);
  fprintf(fp, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  uint64_t free_count = 0, free_bytes = 0;
  for (unsigned cls = 0; cls < KP_NUM_CLASSES; cls++) {
    if (free_slots[cls] == 0) continue;
    uint64_t bytes = free_slots[cls] * kp_class_size[cls];
    free_count += free_slots[cls];
    free_bytes += bytes;
    fprintf(fp, "  <size from=\"%u\" to=\"%u\" total=\"%llu\" count=\"%llu\"/>\n",
            cls == 0 ? 1u : kp_class_size[cls - 1] + 1, kp_class_size[cls], (unsigned long long)bytes,
            (unsigned long long)free_slots[cls]);
  }
  uint64_t cached = s.chunks_cached + s.cache_mappings;
  fprintf(fp, "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n");
  fprintf(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)(free_count + cached),
          (unsigned long long)(free_bytes + s.cache_bytes));
  fprintf(fp, "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n", region_bytes(&s),
          region_bytes(&s));
  fprintf(fp, "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n</heap>\n",
          region_bytes(&s), region_bytes(&s));
  fprintf(fp, "<total type=\"fast\" count=\"0\" size=\"0\"/>\n");
  fprintf(fp, "<total type=\"rest\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)(free_count + cached),
          (unsigned long long)(free_bytes + s.cache_bytes));
  fprintf(fp, "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n", mapped_count(&s), mapped_live(&s));
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n<system type=\"max\" size=\"%llu\"/>\n", s.reserved_bytes,
          s.reserved_peak_bytes);
  fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n<aspace type=\"mprotect\" size=\"%llu\"/>\n</malloc>\n",
          s.reserved_bytes, s.reserved_bytes);
  return 0;
}

/* Returns 1 (done) or 0 (a value the parameter cannot take). */
KP_EXPORT int mallopt(int param, int value) {
  switch (param) {
  case M_MMAP_THRESHOLD: /* above it, blocks are mapped and unmapped each time */
    if (value < 0) return 0;
    kame_pool_set_large_cache_top((size_t)value);
    return 1;
  case M_TRIM_THRESHOLD: /* free memory kept before it goes back to the OS */
    if (value < 0) return 0;
    kame_pool_set_large_cache_cap((size_t)value);
    return 1;
  case M_CHECK_ACTION:
    kame_pool_set_check_level(value == 0 ? 0 : 1);
    return 1;
  default: /* M_MXFAST, M_TOP_PAD, M_MMAP_MAX, M_PERTURB, M_ARENA_*: nothing to tune */
    return 1;
  }
}
