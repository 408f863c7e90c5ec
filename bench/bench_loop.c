/* Tight malloc/free loop: each thread repeats malloc(size), a write to the
 * first byte, free.  Whatever allocator the process uses (the C library's
 * or one put in with LD_PRELOAD) is what gets measured.
 *
 *   bench_loop SIZE THREADS [SECONDS | -n ITERATIONS]
 *
 * SIZE takes a K/M/G suffix (powers of 1024).  By default each thread runs
 * for SECONDS (0.2) of wall time; with -n every thread does ITERATIONS
 * pairs.  Each block's first word is stamped and checked before the free
 * (a failed check exits with status 3).  The last line of output is the
 * result, as key=value pairs:
 *
 *   RESULT size=65536 threads=2 ops=1234567 seconds=0.200 mops=6.172
 *
 * where ops counts malloc+free pairs over all threads and mops is millions
 * of pairs per second of wall time.  A NULL from malloc is an error: the
 * program says so and exits with status 1.
 *
 * Build with -fno-builtin-malloc -fno-builtin-free, or the compiler may
 * remove a malloc/free pair whose memory is never observed.
 */
#include "bench_common.h"

#include <pthread.h>
#include <stdatomic.h>

struct worker {
  pthread_t tid;
  uint64_t index;
  uint64_t ops;
  double start;
  double end;
};

static size_t g_size;
static uint64_t g_iters;   /* 0: run until g_stop */
static pthread_barrier_t g_barrier;
static atomic_int g_stop;

/* One malloc, a stamp in the first word, a check of it, a free.  A thread
 * holds one block at a time, so the check catches a block that another
 * thread was handed too (in the 2-thread runs), not overlap in general.
 * The empty asm with the pointer as input and a memory clobber tells the
 * compiler the block is used, so neither the store nor the pair can be
 * dropped, and the stamp is read back from memory. */
static inline void one_pair(uint64_t i, uint64_t tag_base) {
  uint64_t *p = bench_malloc(g_size < 8 ? 8 : g_size);
  const uint64_t tag = tag_base | i;
  *(volatile uint64_t *)p = tag;
  __asm__ volatile("" : : "r"(p) : "memory");
  if (__builtin_expect(*(volatile uint64_t *)p != tag, 0))
    bench_check_failed("bench_loop: block %p lost its stamp %#llx", (void *)p,
                       (unsigned long long)tag);
  free(p);
}

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t i = 0;
  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  if (g_iters) {
    for (; i < g_iters; i++)
      one_pair(i, w->index << 48);
  } else {
    /* The stop flag is read every pair; it stays in this core's cache
     * until the main thread writes it once. */
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
      one_pair(i, w->index << 48);
      i++;
    }
  }
  w->end = bench_now();
  w->ops = i;
  return NULL;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_loop SIZE THREADS [SECONDS | -n ITERATIONS]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 3)
    usage();
  uint64_t size;
  if (bench_parse_u64(argv[1], &size) != 0)
    usage();
  g_size = (size_t)size;
  int threads = atoi(argv[2]);
  if (threads < 1 || threads > 1024)
    usage();
  double seconds = 0.2;
  if (argc >= 4) {
    if (strcmp(argv[3], "-n") == 0) {
      if (argc < 5)
        usage();
      g_iters = strtoull(argv[4], NULL, 10);
      if (g_iters == 0)
        usage();
    } else {
      seconds = strtod(argv[3], NULL);
      if (!(seconds > 0))
        usage();
    }
  }

  struct worker *w = calloc((size_t)threads, sizeof *w);
  if (!w) {
    fprintf(stderr, "bench_loop: out of memory\n");
    return 1;
  }
  /* The main thread joins the barrier too, so the clock for the time
   * limit starts when the workers do. */
  pthread_barrier_init(&g_barrier, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; t++) {
    w[t].index = (uint64_t)t;
    int rc = pthread_create(&w[t].tid, NULL, run, &w[t]);
    if (rc) {
      fprintf(stderr, "bench_loop: pthread_create: %s\n", strerror(rc));
      return 1;
    }
  }
  pthread_barrier_wait(&g_barrier);
  if (!g_iters) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    atomic_store_explicit(&g_stop, 1, memory_order_relaxed);
  }
  uint64_t ops = 0;
  double start = 0, end = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(w[t].tid, NULL);
    ops += w[t].ops;
    if (t == 0 || w[t].start < start)
      start = w[t].start;
    if (t == 0 || w[t].end > end)
      end = w[t].end;
  }
  double wall = end - start;
  if (wall <= 0)
    wall = 1e-9;
  printf("RESULT size=%zu threads=%d ops=%llu seconds=%.4f mops=%.3f\n", g_size, threads,
         (unsigned long long)ops, wall, (double)ops / wall / 1e6);
  free(w);
  pthread_barrier_destroy(&g_barrier);
  return 0;
}
