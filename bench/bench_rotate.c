/* A rotating working set of big blocks: a fixed number of live blocks of
 * random sizes in the band 32 KiB .. 64 MiB (image and document buffers,
 * decoded columns, network reassembly buffers), in which each step frees
 * one block at random and allocates one of a new random size, writing
 * one word in each of its pages.  Sizes change from step to step, so an
 * allocator that keeps freed blocks for reuse must decide which to keep
 * and how much: held memory beyond the live set is the price of its
 * speed, and this workload shows both.
 *
 * The WORKING_SET slots form one table that all THREADS threads share,
 * as in bench_churn: a step picks a random slot, allocates and writes the
 * new block, swaps it into the slot atomically and frees the block that
 * was there (which another thread may have allocated).  The main thread
 * fills the table before the clock starts.  Sizes are drawn so that each
 * power of two from 32 KiB to 32 MiB is equally likely, uniform within
 * it (so log-uniform over the band, mean about 9 MiB).
 *
 *   bench_rotate [-t THREADS] [-n STEPS] [-w WORKING_SET] [-a MIN] [-b MAX]
 *
 * Defaults: 1 thread, 2000 steps over all threads, 16 slots, MIN 32 KiB,
 * MAX 64 MiB (exclusive; both powers of two, MIN at least 4 KiB).  Counts
 * and sizes take K/M/G suffixes (powers of 1024).
 *
 * RESULT keys:
 *   workload=rotate threads steps slots
 *   seconds        wall time of the steps (the fill excluded)
 *   steps_per_s    steps (one free, one allocation) per second of wall
 *                  time (higher is better)
 *   gib_s          GiB of new blocks allocated and written per second
 *   live_max_mib   the most bytes the program ever held live, over the
 *                  fill and the steps (MiB)
 *   peak_rss_mib   peak resident set before the final frees (MiB)
 *   held_mib       peak_rss_mib - live_max_mib: how far the peak went
 *                  beyond the most the program ever held live, that is
 *                  what the allocator kept besides the live set (the
 *                  program's own few MiB included; lower is better)
 *   rss_freed_mib  resident set after everything is freed (MiB)
 *   cache_cap_mib, over_cap_mib   only when the process exports
 *                  kame_pool_get_large_cache_cap: the allocator's cap on
 *                  its recycle cache, and peak_rss - (live_max + cap),
 *                  which is above 0 when the allocator held more than
 *                  the cap allows (lower is better)
 *
 * Each block's head holds a tag (serial) and the next word its size; its
 * tail the tag's complement and its pages tag-derived words.  A slot
 * holds the block's address with 16 bits of its serial, so a block lost,
 * handed out twice or overlapping another fails the self-check (exit 3).
 */
#include "bench_threads.h"

#include <dlfcn.h>
#include <semaphore.h>

#define MAX_THREADS 1024
#define CHECK_PAGES 16
#define PTR_BITS 48
#define PTR_MASK ((1ull << PTR_BITS) - 1)
#define MIB (1024.0 * 1024.0)
#define SIZE_OFF 8 /* where a block keeps its size */

struct worker {
  _Alignas(64) pthread_t tid;
  unsigned index;
  uint64_t steps;
  uint64_t first_serial;
  uint64_t allocs, frees;
  uint64_t bytes_alloc, bytes_freed;
  uint64_t live_max;
};

static _Atomic uint64_t *g_table;
static uint64_t g_slots;
static unsigned g_min_log, g_octaves;
static _Atomic uint64_t g_live; /* bytes held live by the program */
static pthread_barrier_t g_ready, g_go;

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_rotate [-t THREADS] [-n STEPS] [-w WORKING_SET] [-a MIN] [-b MAX]\n");
  exit(BENCH_EXIT_USAGE);
}

static size_t pick_size(uint64_t *rng) {
  uint64_t base = 1ull << (g_min_log + bench_below(rng, g_octaves));
  return (size_t)(base + bench_below(rng, base));
}

/* Allocates, writes and stamps a block; returns its slot word. */
static uint64_t make_block(uint64_t serial, uint64_t *rng, struct worker *w) {
  size_t size = pick_size(rng);
  void *p = bench_malloc(size);
  uint64_t addr = (uint64_t)(uintptr_t)p;
  if (__builtin_expect(addr & ~PTR_MASK, 0))
    bench_check_failed("block %p lies above 2^48; slots cannot hold it", p);
  bench_touch_pages(p, size, serial);
  uint64_t sz = size;
  memcpy((char *)p + SIZE_OFF, &sz, 8);
  /* Counted live once every page is written, and no longer from the
   * start of its free: the count never exceeds what the program itself
   * has made resident, so live_max is a floor under any allocator's peak
   * RSS. */
  uint64_t live = atomic_fetch_add_explicit(&g_live, size, memory_order_relaxed) + size;
  if (live > w->live_max)
    w->live_max = live;
  w->allocs++;
  w->bytes_alloc += size;
  return addr | (serial & 0xffff) << PTR_BITS;
}

static void check_and_free(uint64_t word, const char *what, struct worker *w) {
  void *p = (void *)(uintptr_t)(word & PTR_MASK);
  if (__builtin_expect(p == NULL, 0))
    bench_check_failed("%s: a slot was empty", what);
  uint64_t tag, size;
  memcpy(&tag, p, 8);
  memcpy(&size, (char *)p + SIZE_OFF, 8);
  if (__builtin_expect((tag & 0xffff) != word >> PTR_BITS, 0))
    bench_check_failed("%s: block %p carries tag %#llx, its slot expected %#llx (low 16 bits)",
                       what, p, (unsigned long long)tag, (unsigned long long)(word >> PTR_BITS));
  if (__builtin_expect(size < (1ull << g_min_log) || size >= (1ull << (g_min_log + g_octaves)), 0))
    bench_check_failed("%s: block %p records size %llu, outside the band", what, p,
                       (unsigned long long)size);
  bench_check_pages(p, size, tag, CHECK_PAGES, what);
  atomic_fetch_sub_explicit(&g_live, size, memory_order_relaxed);
  free(p);
  w->frees++;
  w->bytes_freed += size;
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  uint64_t rng = bench_seed(w->index + 1); /* seed 0 belongs to the fill */
  pthread_barrier_wait(&g_ready);
  pthread_barrier_wait(&g_go);
  for (uint64_t i = 0; i < w->steps; i++) {
    uint64_t slot = bench_below(&rng, g_slots);
    uint64_t word = make_block(w->first_serial + i, &rng, w);
    uint64_t old = atomic_exchange_explicit(&g_table[slot], word, memory_order_acq_rel);
    check_and_free(old, "step", w);
  }
  return NULL;
}

/* The pool's cap on its recycle cache, when the allocator in the process
 * is a pool build that has the call; 0 otherwise.  Looked up by name so
 * the program runs under any allocator and needs no rebuild once the call
 * exists. */
static size_t large_cache_cap(void) {
  size_t (*get)(void);
  *(void **)&get = dlsym(RTLD_DEFAULT, "kame_pool_get_large_cache_cap");
  return get ? get() : 0;
}

static unsigned log2_exact(uint64_t v) {
  if (v == 0 || (v & (v - 1)))
    usage();
  return (unsigned)__builtin_ctzll(v);
}

int main(int argc, char **argv) {
  uint64_t threads = 1, steps = 2000, slots = 16, min = 32 << 10, max = 64 << 20;
  int opt;
  while ((opt = getopt(argc, argv, "t:n:w:a:b:")) != -1) {
    uint64_t *dst;
    switch (opt) {
    case 't': dst = &threads; break;
    case 'n': dst = &steps; break;
    case 'w': dst = &slots; break;
    case 'a': dst = &min; break;
    case 'b': dst = &max; break;
    default: usage();
    }
    if (bench_parse_u64(optarg, dst) != 0)
      usage();
  }
  if (optind != argc || threads < 1 || threads > MAX_THREADS || steps < 1 || slots < 1 ||
      slots > (1ull << 20) || steps > (1ull << 40) || min < 4096 || max <= min || max > (1ull << 36))
    usage();
  g_min_log = log2_exact(min);
  g_octaves = log2_exact(max) - g_min_log;
  g_slots = slots;

  g_table = bench_map_zeroed(slots * sizeof *g_table, "bench_rotate");
  struct worker *ws = bench_map_zeroed((threads + 1) * sizeof *ws, "bench_rotate");
  struct worker *filler = &ws[threads];
  uint64_t rng = bench_seed(0);
  for (uint64_t s = 0; s < slots; s++)
    atomic_init(&g_table[s], make_block(s, &rng, filler));

  pthread_barrier_init(&g_ready, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&g_go, NULL, (unsigned)threads + 1);
  uint64_t next_serial = slots;
  for (uint64_t t = 0; t < threads; t++) {
    ws[t].index = (unsigned)t;
    ws[t].steps = steps / threads + (t < steps % threads);
    ws[t].first_serial = next_serial;
    next_serial += ws[t].steps;
    int rc = pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]);
    if (rc) {
      fprintf(stderr, "bench_rotate: pthread_create: %s\n", strerror(rc));
      return BENCH_EXIT_NULL;
    }
  }
  pthread_barrier_wait(&g_ready);
  double t0 = bench_now();
  pthread_barrier_wait(&g_go);
  for (uint64_t t = 0; t < threads; t++)
    pthread_join(ws[t].tid, NULL);
  double wall = bench_now() - t0;
  uint64_t peak = bench_peak_rss_bytes();

  uint64_t live_max = filler->live_max, bytes_new = 0;
  for (uint64_t t = 0; t < threads; t++) {
    if (ws[t].allocs != ws[t].steps || ws[t].frees != ws[t].steps)
      bench_check_failed("thread %llu: %llu allocations and %llu frees for %llu steps",
                         (unsigned long long)t, (unsigned long long)ws[t].allocs,
                         (unsigned long long)ws[t].frees, (unsigned long long)ws[t].steps);
    if (ws[t].live_max > live_max)
      live_max = ws[t].live_max;
    bytes_new += ws[t].bytes_alloc;
  }
  for (uint64_t s = 0; s < slots; s++)
    check_and_free(atomic_load_explicit(&g_table[s], memory_order_relaxed), "final sweep", filler);
  uint64_t alloc_total = filler->bytes_alloc, freed_total = filler->bytes_freed;
  for (uint64_t t = 0; t < threads; t++) {
    alloc_total += ws[t].bytes_alloc;
    freed_total += ws[t].bytes_freed;
  }
  if (alloc_total != freed_total || atomic_load(&g_live) != 0)
    bench_check_failed("%llu bytes allocated, %llu freed, %llu still counted live",
                       (unsigned long long)alloc_total, (unsigned long long)freed_total,
                       (unsigned long long)atomic_load(&g_live));
  uint64_t rss_freed = bench_rss_bytes();
  pthread_barrier_destroy(&g_ready);
  pthread_barrier_destroy(&g_go);

  if (wall <= 0)
    wall = 1e-9;
  char cap_text[96] = "";
  size_t cap = large_cache_cap();
  if (cap)
    snprintf(cap_text, sizeof cap_text, " cache_cap_mib=%.1f over_cap_mib=%.1f", (double)cap / MIB,
             ((double)peak - (double)live_max - (double)cap) / MIB);
  bench_result("workload=rotate threads=%llu steps=%llu slots=%llu seconds=%.4f steps_per_s=%.1f "
               "gib_s=%.3f live_max_mib=%.1f peak_rss_mib=%.1f held_mib=%.1f rss_freed_mib=%.1f%s",
               (unsigned long long)threads, (unsigned long long)steps, (unsigned long long)slots,
               wall, (double)steps / wall, (double)bytes_new / wall / (double)(1u << 30),
               (double)live_max / MIB, (double)peak / MIB, ((double)peak - (double)live_max) / MIB,
               (double)rss_freed / MIB, cap_text);
  return 0;
}
