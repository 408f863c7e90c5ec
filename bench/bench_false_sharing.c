/* Cache lines shared between threads (false sharing).
 *
 * Models threads that each keep a small private object and update it hard,
 * such as a per-thread counter.  If the allocator puts the objects of two
 * threads on one 64-byte cache line, every write steals the line from the
 * other core and the threads run far slower than their work implies.
 *
 *   active   each thread allocates its own block (SIZE bytes), increments a
 *            64-bit word in it WRITES times, checks it, frees it, and
 *            allocates the next: ROUNDS times.  Catches allocators that
 *            hand neighbouring slots to different threads.
 *   passive  the main thread allocates one block per thread back to back
 *            (likely neighbours) and hands them out; each thread works on
 *            its handed block for the first quarter of the rounds, frees
 *            it, then goes on as in active mode.  Catches allocators that
 *            give a block freed by one thread to that thread's next
 *            malloc even though another thread still uses its neighbour.
 *
 * Each thread records the address of the block it holds every few rounds;
 * pairs of threads whose blocks lie on one cache line are counted.  The
 * comparison is by round number, and threads drift apart in time, so the
 * later figures are a sample, not an exact count of simultaneous sharing.
 *
 *   bench_false_sharing [-t THREADS] [-m active|passive] [-n ROUNDS]
 *                       [-w WRITES_PER_ROUND] [-s SIZE]
 *
 * Defaults: 2 threads, active, 1000000 rounds of 1000 writes, 8-byte blocks.
 *
 * RESULT keys:
 *   workload=false_sharing
 *   mode              0 = active, 1 = passive
 *   threads rounds writes size   as given (size in bytes)
 *   seconds           wall time from the common start to the last thread's
 *                     end (s)
 *   mwrites           millions of writes per second of wall time, all
 *                     threads together (higher is better)
 *   shared_lines      pairs of threads whose first blocks share a line
 *                     (lower is better; 0 is right)
 *   shared_lines_max  most such pairs at any sampled round
 *   shared_lines_end  such pairs at the last sampled round
 */
#include "bench_threads.h"

#include <getopt.h>

#define LINE 64
#define MAX_THREADS 256
#define MAX_SAMPLES 1024

enum { MODE_ACTIVE = 0, MODE_PASSIVE = 1 };

/* One per thread, each on its own lines so the benchmark's own
 * bookkeeping cannot share a line between threads. */
struct worker {
  _Alignas(LINE) pthread_t tid;
  unsigned index;
  void *handed;          /* passive: the block given by the main thread */
  uint64_t handed_tag;
  uintptr_t *samples;    /* block held at rounds 0, stride, 2*stride, ... */
  double start, end;
};

static struct worker g_workers[MAX_THREADS];
static pthread_barrier_t g_barrier;
static unsigned g_threads = 2;
static int g_mode = MODE_ACTIVE;
static uint64_t g_rounds = 1000000, g_writes = 1000, g_stride;
static size_t g_size = 8;
static unsigned g_nsamples;

static inline uint64_t make_tag(unsigned thread, uint64_t round) {
  return bench_seed(((uint64_t)thread << 40) ^ round);
}

/* Stamps a fresh block: word 0 is the counter, starting at TAG; the last
 * word (when there is one apart from word 0) holds ~TAG for the end. */
static inline void stamp_block(void *p, uint64_t tag) { bench_stamp(p, g_size, tag); }

static inline void check_counter(const volatile uint64_t *w, uint64_t expect, unsigned thread,
                                 uint64_t round) {
  uint64_t got = *w;
  if (__builtin_expect(got != expect, 0))
    bench_check_failed("thread %u round %llu: block %p holds %#llx, expected %#llx", thread,
                       (unsigned long long)round, (const void *)w, (unsigned long long)got,
                       (unsigned long long)expect);
}

static inline void check_tail(const void *p, uint64_t tag, unsigned thread) {
  uint64_t tail;
  if (g_size < 16)
    return;
  memcpy(&tail, (const char *)p + g_size - 8, 8);
  if (__builtin_expect(tail != ~tag, 0))
    bench_check_failed("thread %u: block %p of %zu bytes lost its end stamp", thread, p,
                       g_size);
}

/* The volatile access makes each increment a real load and store, which
 * is what a contended line punishes. */
static inline void hammer(volatile uint64_t *w, uint64_t n) {
  for (uint64_t i = 0; i < n; i++)
    *w = *w + 1;
}

static void *run(void *arg) {
  struct worker *me = arg;
  const unsigned id = me->index;
  volatile uint64_t *p = NULL;
  uint64_t tag = 0, expect = 0, hold = 0;

  if (g_mode == MODE_PASSIVE) {
    p = me->handed;
    tag = expect = me->handed_tag;
    hold = g_rounds / 4 ? g_rounds / 4 : 1;
  }
  pthread_barrier_wait(&g_barrier);
  me->start = bench_now();
  for (uint64_t r = 0; r < g_rounds; r++) {
    if (!p) {
      p = bench_malloc(g_size);
      tag = expect = make_tag(id, r);
      stamp_block((void *)p, tag);
      hold = 1;
    }
    if (r % g_stride == 0)
      me->samples[r / g_stride] = (uintptr_t)p;
    hammer(p, g_writes);
    expect += g_writes;
    check_counter(p, expect, id, r);
    if (--hold == 0) {
      check_tail((const void *)p, tag, id);
      free((void *)p);
      p = NULL;
    }
  }
  me->end = bench_now();
  return NULL;
}

/* Pairs of threads whose addresses fall on one cache line. */
static uint64_t shared_pairs(const uintptr_t *addr, unsigned n) {
  uint64_t pairs = 0;
  for (unsigned i = 0; i < n; i++)
    for (unsigned j = i + 1; j < n; j++)
      pairs += addr[i] / LINE == addr[j] / LINE;
  return pairs;
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr,
          "usage: bench_false_sharing [-t THREADS] [-m active|passive] [-n ROUNDS]"
          " [-w WRITES_PER_ROUND] [-s SIZE]\n"
          "  THREADS 1..%d, ROUNDS and WRITES >= 1, SIZE 8 B..1 MiB\n",
          MAX_THREADS);
  exit(BENCH_EXIT_USAGE);
}

static uint64_t parse_range(const char *s, uint64_t lo, uint64_t hi) {
  uint64_t v;
  if (bench_parse_u64(s, &v) || v < lo || v > hi)
    usage();
  return v;
}

int main(int argc, char **argv) {
  int opt;
  while ((opt = getopt(argc, argv, "t:m:n:w:s:")) != -1) {
    switch (opt) {
    case 't': g_threads = (unsigned)parse_range(optarg, 1, MAX_THREADS); break;
    case 'm':
      if (strcmp(optarg, "active") == 0)
        g_mode = MODE_ACTIVE;
      else if (strcmp(optarg, "passive") == 0)
        g_mode = MODE_PASSIVE;
      else
        usage();
      break;
    case 'n': g_rounds = parse_range(optarg, 1, 1ull << 40); break;
    case 'w': g_writes = parse_range(optarg, 1, 1ull << 40); break;
    case 's': g_size = (size_t)parse_range(optarg, 8, 1u << 20); break;
    default: usage();
    }
  }
  if (optind != argc)
    usage();

  g_stride = (g_rounds + MAX_SAMPLES - 1) / MAX_SAMPLES;
  g_nsamples = (unsigned)((g_rounds + g_stride - 1) / g_stride);

  /* Sample rows come straight from the kernel, so the allocator under
   * test places nothing of the benchmark's own; rows are line-padded. */
  size_t row = ((size_t)g_nsamples * sizeof(uintptr_t) + LINE - 1) / LINE * LINE;
  char *rows = bench_map_zeroed(row * g_threads, "bench_false_sharing");

  for (unsigned i = 0; i < g_threads; i++) {
    g_workers[i].index = i;
    g_workers[i].samples = (uintptr_t *)(rows + row * i);
  }
  /* Back to back, before any thread exists: the likeliest neighbours. */
  if (g_mode == MODE_PASSIVE)
    for (unsigned i = 0; i < g_threads; i++) {
      g_workers[i].handed = bench_malloc(g_size);
      g_workers[i].handed_tag = make_tag(i, UINT64_MAX);
      stamp_block(g_workers[i].handed, g_workers[i].handed_tag);
    }

  if (pthread_barrier_init(&g_barrier, NULL, g_threads)) {
    perror("pthread_barrier_init");
    return BENCH_EXIT_NULL;
  }
  for (unsigned i = 0; i < g_threads; i++) {
    int err = pthread_create(&g_workers[i].tid, NULL, run, &g_workers[i]);
    if (err) {
      fprintf(stderr, "pthread_create: %s\n", strerror(err));
      return BENCH_EXIT_NULL;
    }
  }
  for (unsigned i = 0; i < g_threads; i++)
    pthread_join(g_workers[i].tid, NULL);
  pthread_barrier_destroy(&g_barrier);

  double start = g_workers[0].start, end = g_workers[0].end;
  for (unsigned i = 1; i < g_threads; i++) {
    if (g_workers[i].start < start)
      start = g_workers[i].start;
    if (g_workers[i].end > end)
      end = g_workers[i].end;
  }
  double seconds = end - start;

  uintptr_t addr[MAX_THREADS];
  uint64_t first = 0, most = 0, last = 0;
  for (unsigned s = 0; s < g_nsamples; s++) {
    for (unsigned i = 0; i < g_threads; i++)
      addr[i] = g_workers[i].samples[s];
    uint64_t pairs = shared_pairs(addr, g_threads);
    if (s == 0)
      first = pairs;
    if (pairs > most)
      most = pairs;
    last = pairs;
  }
  munmap(rows, row * g_threads);

  double writes = (double)g_threads * (double)g_rounds * (double)g_writes;
  bench_result("workload=false_sharing mode=%d threads=%u rounds=%llu writes=%llu size=%zu "
               "seconds=%.4f mwrites=%.1f shared_lines=%llu shared_lines_max=%llu "
               "shared_lines_end=%llu",
               g_mode, g_threads, (unsigned long long)g_rounds, (unsigned long long)g_writes,
               g_size, seconds, seconds > 0 ? writes / seconds / 1e6 : 0.0,
               (unsigned long long)first, (unsigned long long)most, (unsigned long long)last);
  return 0;
}
