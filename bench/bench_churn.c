/* A server under churn: a shared table of SLOTS blocks (think sessions or
 * cache entries) that worker threads keep replacing.  Each operation picks
 * a random slot, allocates a block of random size (16 B .. 4 KiB, spread
 * evenly over the powers of two, and 1 time in 64 a larger one up to
 * 64 KiB), swaps it into the slot atomically and frees the block that was
 * there.  The table is filled before the clock starts.
 *
 * Workers are short-lived, like request handlers in a thread-per-task
 * server: each does LIFETIME operations and exits, and the main thread
 * starts a successor, so THREADS workers run at any moment.  Most blocks
 * a worker frees were allocated by a thread that has already exited, and
 * each new worker starts with whatever per-thread state the allocator
 * builds for a fresh thread.
 *
 *   bench_churn [-t THREADS] [-n OPS] [-m SLOTS] [-l LIFETIME_OPS]
 *
 * THREADS defaults to 2, OPS (exchanges over all workers) to 768K, SLOTS to
 * 64K and LIFETIME_OPS to OPS / (THREADS * 8).  Counts take K/M/G
 * suffixes (powers of 1024).  The last line of output:
 *
 *   RESULT workload=churn threads=T ops=N workers=W seconds=S mops=R
 *
 *   ops      exchanges done (one malloc and one free each)
 *   workers  worker threads started over the run
 *   seconds  wall time of the measured phase, thread starts included
 *   mops     millions of exchanges per second of wall time (higher is better)
 *
 * Exit status: 0 success, 1 malloc returned NULL (or a thread could not
 * be started), 2 bad usage, 3 a self-check failed.
 */
#include "bench_common.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>

#define DEFAULT_THREADS 2
#define DEFAULT_OPS (768ull << 10)
#define DEFAULT_SLOTS (64ull << 10)
#define MAX_THREADS 1024
#define MIN_SIZE 16

/* A slot holds the block's address in the low 48 bits and 16 bits of the
 * block's serial number in the top 16, so one atomic exchange moves both
 * and a block handed out twice (its stamp overwritten by a later owner)
 * shows up as a mismatch.  User addresses on x86-64 Linux fit in 47 bits.
 * The tag stamped into the block is serial << 16 | (size - 1), which lets
 * whoever frees the block find its size without another lookup. */
#define PTR_BITS 48
#define PTR_MASK ((1ull << PTR_BITS) - 1)
#define MAX_SERIAL (1ull << 48)

struct counts {
  uint64_t allocs, frees;
  uint64_t bytes_alloc, bytes_freed;
};

struct worker {
  pthread_t tid;
  uint64_t seq;      /* position in start order; picks the seed */
  uint64_t first_op; /* global index of this worker's first exchange */
  uint64_t ops;
  struct counts c;
  atomic_int done;
  int active;
};

static _Atomic uint64_t *g_table;
static uint64_t g_slots;
static sem_t g_done_sem;

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_churn [-t THREADS] [-n OPS] [-m SLOTS] [-l LIFETIME_OPS]\n");
  exit(BENCH_EXIT_USAGE);
}

static size_t pick_size(uint64_t *rng) {
  uint64_t base;
  if (bench_below(rng, 64) == 0)
    base = 4096ull << bench_below(rng, 4); /* 4 KiB .. 64 KiB - 1 */
  else
    base = 16ull << bench_below(rng, 8); /* 16 B .. 4 KiB - 1 */
  return (size_t)(base + bench_below(rng, base));
}

/* Allocates and stamps a block for SERIAL; returns the slot word. */
static uint64_t make_block(uint64_t serial, uint64_t *rng, struct counts *c) {
  size_t size = pick_size(rng);
  void *p = bench_malloc(size);
  uint64_t addr = (uint64_t)(uintptr_t)p;
  if (__builtin_expect(addr & ~PTR_MASK, 0))
    bench_check_failed("block %p lies above 2^48; slots cannot hold it", p);
  uint64_t tag = serial << 16 | (uint64_t)(size - 1);
  bench_stamp(p, size, tag);
  c->allocs++;
  c->bytes_alloc += size;
  return addr | (serial & 0xffff) << PTR_BITS;
}

/* Checks the block a slot word names against the slot and its own stamp,
 * then frees it. */
static void check_and_free(uint64_t word, const char *what, struct counts *c) {
  void *p = (void *)(uintptr_t)(word & PTR_MASK);
  if (__builtin_expect(p == NULL, 0))
    bench_check_failed("%s: a slot was empty", what);
  uint64_t head;
  memcpy(&head, p, 8);
  if (__builtin_expect(((head >> 16) & 0xffff) != word >> PTR_BITS, 0))
    bench_check_failed("%s: block %p carries tag %#llx, its slot expected serial %#llx (low 16 bits)",
                       what, p, (unsigned long long)head, (unsigned long long)(word >> PTR_BITS));
  size_t size = (size_t)(head & 0xffff) + 1;
  if (__builtin_expect(size < MIN_SIZE, 0))
    bench_check_failed("%s: block %p carries tag %#llx, size %zu impossible", what, p,
                       (unsigned long long)head, size);
  bench_check_stamp(p, size, head, what);
  c->frees++;
  c->bytes_freed += size;
  free(p);
}

static void *worker_main(void *arg) {
  struct worker *w = arg;
  uint64_t rng = bench_seed(w->seq + 1); /* seed 0 belongs to the fill */
  struct counts c = {0, 0, 0, 0};
  for (uint64_t i = 0; i < w->ops; i++) {
    uint64_t slot = bench_below(&rng, g_slots);
    uint64_t word = make_block(g_slots + w->first_op + i, &rng, &c);
    uint64_t old = atomic_exchange_explicit(&g_table[slot], word, memory_order_acq_rel);
    check_and_free(old, "exchange", &c);
  }
  w->c = c;
  atomic_store_explicit(&w->done, 1, memory_order_release);
  sem_post(&g_done_sem);
  return NULL;
}

static void start_worker(struct worker *w, uint64_t seq, uint64_t first_op, uint64_t ops) {
  w->seq = seq;
  w->first_op = first_op;
  w->ops = ops;
  atomic_store_explicit(&w->done, 0, memory_order_relaxed);
  w->active = 1;
  int rc = pthread_create(&w->tid, NULL, worker_main, w);
  if (rc) {
    fprintf(stderr, "bench_churn: pthread_create: %s\n", strerror(rc));
    fflush(stderr);
    _exit(BENCH_EXIT_NULL);
  }
}

static void add_counts(struct counts *into, const struct counts *c) {
  into->allocs += c->allocs;
  into->frees += c->frees;
  into->bytes_alloc += c->bytes_alloc;
  into->bytes_freed += c->bytes_freed;
}

int main(int argc, char **argv) {
  uint64_t threads = DEFAULT_THREADS, ops = DEFAULT_OPS, slots = DEFAULT_SLOTS, lifetime = 0;
  int opt;
  while ((opt = getopt(argc, argv, "t:n:m:l:")) != -1) {
    uint64_t *dst;
    switch (opt) {
    case 't': dst = &threads; break;
    case 'n': dst = &ops; break;
    case 'm': dst = &slots; break;
    case 'l': dst = &lifetime; break;
    default: usage();
    }
    if (bench_parse_u64(optarg, dst) != 0)
      usage();
  }
  if (optind != argc || threads < 1 || threads > MAX_THREADS || ops < 1 || slots < 1 ||
      slots > (1ull << 32) || ops > MAX_SERIAL - slots)
    usage();
  if (lifetime == 0)
    lifetime = ops / (threads * 8) ? ops / (threads * 8) : 1;
  uint64_t nworkers = ops / lifetime + (ops % lifetime != 0);

  g_slots = slots;
  g_table = bench_malloc(slots * sizeof *g_table);
  struct worker *lanes = calloc(threads, sizeof *lanes);
  if (!lanes)
    bench_null(threads * sizeof *lanes);
  if (sem_init(&g_done_sem, 0, 0) != 0) {
    perror("bench_churn: sem_init");
    return BENCH_EXIT_NULL;
  }

  struct counts total = {0, 0, 0, 0};
  uint64_t rng = bench_seed(0);
  for (uint64_t s = 0; s < slots; s++)
    atomic_init(&g_table[s], make_block(s, &rng, &total));

  double t0 = bench_now();
  uint64_t started = 0, finished = 0, next_op = 0;
  for (uint64_t l = 0; l < threads && started < nworkers; l++) {
    uint64_t n = ops - next_op < lifetime ? ops - next_op : lifetime;
    start_worker(&lanes[l], started++, next_op, n);
    next_op += n;
  }
  /* One post per finished worker, so each wake finds at least one
   * finished lane not yet joined; the main thread sleeps meanwhile. */
  while (finished < started) {
    while (sem_wait(&g_done_sem) != 0) {
      if (errno != EINTR) {
        perror("bench_churn: sem_wait");
        return BENCH_EXIT_NULL;
      }
    }
    uint64_t l = 0;
    while (l < threads && !(lanes[l].active && atomic_load_explicit(&lanes[l].done, memory_order_acquire)))
      l++;
    if (l == threads)
      bench_check_failed("a worker signalled completion but none had finished");
    pthread_join(lanes[l].tid, NULL);
    lanes[l].active = 0;
    if (lanes[l].c.allocs != lanes[l].ops || lanes[l].c.frees != lanes[l].ops)
      bench_check_failed("worker %llu did %llu allocations and %llu frees, expected %llu each",
                         (unsigned long long)lanes[l].seq, (unsigned long long)lanes[l].c.allocs,
                         (unsigned long long)lanes[l].c.frees, (unsigned long long)lanes[l].ops);
    add_counts(&total, &lanes[l].c);
    finished++;
    if (started < nworkers) {
      uint64_t n = ops - next_op < lifetime ? ops - next_op : lifetime;
      start_worker(&lanes[l], started++, next_op, n);
      next_op += n;
    }
  }
  double wall = bench_now() - t0;

  if (started != nworkers || next_op != ops)
    bench_check_failed("started %llu workers for %llu ops, expected %llu for %llu",
                       (unsigned long long)started, (unsigned long long)next_op,
                       (unsigned long long)nworkers, (unsigned long long)ops);
  for (uint64_t s = 0; s < slots; s++)
    check_and_free(atomic_load_explicit(&g_table[s], memory_order_relaxed), "final sweep", &total);
  if (total.allocs != slots + ops || total.frees != total.allocs ||
      total.bytes_freed != total.bytes_alloc)
    bench_check_failed("%llu allocations (%llu bytes) against %llu frees (%llu bytes); expected %llu",
                       (unsigned long long)total.allocs, (unsigned long long)total.bytes_alloc,
                       (unsigned long long)total.frees, (unsigned long long)total.bytes_freed,
                       (unsigned long long)(slots + ops));

  free(g_table);
  free(lanes);
  sem_destroy(&g_done_sem);
  if (wall <= 0)
    wall = 1e-9;
  bench_result("workload=churn threads=%llu ops=%llu workers=%llu seconds=%.4f mops=%.3f",
               (unsigned long long)threads, (unsigned long long)ops, (unsigned long long)started, wall,
               (double)ops / wall / 1e6);
  return 0;
}
