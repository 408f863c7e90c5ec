/* Producer/consumer handoff: a pipeline in which every block is allocated
 * by one thread and freed by another.  N producer threads each allocate
 * BLOCKS blocks of SIZE bytes, stamp them and pass them, 32 pointers per
 * batch, through a bounded single-producer single-consumer ring to their
 * own consumer thread, which checks each block and frees it.  So 2N threads
 * run and every free is a cross-thread free.  At most 64 batches sit in a
 * ring at once (fewer for big blocks), so the allocator sees a steady
 * stream rather than allocate-everything-then-free-everything.
 *
 *   bench_handoff [-t N] [-s SIZE] [-n BLOCKS] [-P]
 *
 * N producers (and N consumers), default 1; SIZE in bytes (K/M/G suffix
 * allowed, at least 8), default 64; BLOCKS per producer, default 6M.
 * Producer i runs on the (2i)th CPU the process may use and consumer i on
 * the (2i+1)th, wrapping round, so a pair sits on different cores when
 * there are two or more; left to the scheduler, a pair sometimes shares
 * one core and sometimes not, and the figure swings by 2-3x from run to
 * run.  -P leaves placement to the scheduler.
 *
 * RESULT keys:
 *   workload=handoff
 *   threads  N, the number of producers (2N threads run)
 *   size     block size in bytes
 *   frees    blocks freed over all consumers (= N * BLOCKS)
 *   seconds  wall time of the measured phase, first thread start to last
 *            thread end (lower is better)
 *   mfrees   millions of frees per second of wall time (higher is better)
 *
 * Every block carries a tag (producer << 40 | sequence) at its head and
 * the tag's complement at its tail; each consumer expects its producer's
 * tags in order, so a block lost, duplicated, reordered or overwritten
 * fails the self-check (exit 3).
 */
#include "bench_threads.h"


#define BATCH 32        /* pointers per batch */
#define RING 64         /* batch slots per ring (power of two) */
#define SPIN_TRIES 256  /* polls before yielding */
#define YIELD_SECONDS 2e-3 /* yielding before sleeping on the futex */
#define MAX_PRODUCERS 256
#define IN_FLIGHT_BYTES (8u << 20) /* per ring, caps the ring for big blocks */

struct batch {
  uint32_t n; /* 0 marks the end of the stream */
  void *p[BATCH];
};

/* Producer-written and consumer-written words live on separate lines so
 * the two sides only share a line when one reads the other's progress. */
struct ring {
  _Alignas(64) atomic_uint head;   /* batches published */
  atomic_uint prod_sleeping;
  atomic_uint prod_wake_at;        /* tail the sleeping producer waits for */
  atomic_uint ended;               /* the producer has published its last batch */
  _Alignas(64) atomic_uint tail;   /* batches consumed */
  atomic_uint cons_sleeping;
  atomic_uint cons_wake_at;        /* head the sleeping consumer waits for */
  _Alignas(64) struct batch slot[RING];
};

struct worker {
  _Alignas(64) pthread_t tid;
  unsigned index;
  struct ring *ring;
  uint64_t count;  /* blocks allocated (producer) or freed (consumer) */
  double start, end;
};

static size_t g_size = 64;
static uint64_t g_blocks = 6u << 20;
static unsigned g_cap = RING; /* batches allowed in a ring at once */
static pthread_barrier_t g_barrier;

/* Waits until *WORD has moved past OLD; once asleep, until it reaches
 * TARGET or *ENDED (if given) is set.  Spinning suits a dedicated core;
 * yielding hands the core to a thread that can make progress when threads
 * outnumber cores.  Only a wait that outlasts YIELD_SECONDS sleeps on the
 * futex: a wake-up can cost milliseconds on a virtual machine, so sleeping
 * early would measure the scheduler instead of the allocator.  Sleeping
 * until a target half a ring away makes each wake-up worth half a ring of
 * work.  The other side stores its counter (after ENDED, at the end) and
 * then reads the sleeping flag, all seq_cst, so a wake-up cannot be lost. */
static void wait_move(atomic_uint *word, unsigned old, unsigned target, atomic_uint *sleeping,
                      atomic_uint *wake_at, atomic_uint *ended) {
  for (int i = 0; i < SPIN_TRIES; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != old)
      return;
    bench_cpu_relax();
  }
  double give_up = bench_now() + YIELD_SECONDS;
  for (unsigned i = 1;; i++) {
    sched_yield();
    if (atomic_load_explicit(word, memory_order_acquire) != old)
      return;
    if (i % 8 == 0 && bench_now() > give_up)
      break;
  }
  atomic_store(wake_at, target);
  atomic_store(sleeping, 1);
  for (;;) {
    unsigned now = atomic_load(word);
    if ((int)(now - target) >= 0 || (ended && atomic_load(ended)))
      break;
    bench_futex_wait(word, now);
  }
  atomic_store(sleeping, 0);
}

/* Makes a progress counter visible, then wakes the other side if it is
 * asleep and the counter has reached what it waits for (or FORCE, at the
 * end of the stream, when the sleeper checks the ended flag instead). */
static inline void advance(atomic_uint *word, unsigned val, atomic_uint *their_sleeping,
                           atomic_uint *their_wake_at, int force) {
  atomic_store(word, val);
  if (atomic_load(their_sleeping) &&
      (force || (int)(val - atomic_load_explicit(their_wake_at, memory_order_relaxed)) >= 0))
    bench_futex_wake(word, 1);
}

static void *producer(void *arg) {
  struct worker *w = arg;
  struct ring *q = w->ring;
  const uint64_t base = (uint64_t)w->index << 40;
  const size_t size = g_size;
  uint64_t seq = 0;
  unsigned head = 0, tail_seen = 0;

  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  for (;;) {
    while (head - tail_seen >= g_cap) {
      tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire);
      if (head - tail_seen >= g_cap)
        wait_move(&q->tail, tail_seen, tail_seen + (g_cap + 1) / 2, &q->prod_sleeping,
                  &q->prod_wake_at, NULL);
    }
    struct batch *b = &q->slot[head & (RING - 1)];
    uint32_t n = g_blocks - seq < BATCH ? (uint32_t)(g_blocks - seq) : BATCH;
    for (uint32_t i = 0; i < n; i++) {
      void *p = bench_malloc(size);
      bench_stamp(p, size, base | seq);
      seq++;
      b->p[i] = p;
    }
    b->n = n;
    head++;
    if (n == 0)
      atomic_store(&q->ended, 1);
    advance(&q->head, head, &q->cons_sleeping, &q->cons_wake_at, n == 0);
    if (n == 0)
      break; /* the empty batch just published tells the consumer to stop */
  }
  w->end = bench_now();
  w->count = seq;
  return NULL;
}

static void *consumer(void *arg) {
  struct worker *w = arg;
  struct ring *q = w->ring;
  const uint64_t base = (uint64_t)w->index << 40;
  const size_t size = g_size;
  uint64_t seq = 0;
  unsigned tail = 0, head_seen = 0;

  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  for (;;) {
    while (head_seen == tail) {
      head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
      if (head_seen == tail)
        wait_move(&q->head, tail, tail + (g_cap + 1) / 2, &q->cons_sleeping, &q->cons_wake_at,
                  &q->ended);
    }
    struct batch *b = &q->slot[tail & (RING - 1)];
    uint32_t n = b->n;
    if (n > BATCH)
      bench_check_failed("consumer %u: batch of %u pointers", w->index, n);
    for (uint32_t i = 0; i < n; i++) {
      void *p = b->p[i];
      bench_check_stamp(p, size, base | seq, "handoff consumer");
      seq++;
      free(p);
    }
    tail++;
    advance(&q->tail, tail, &q->prod_sleeping, &q->prod_wake_at, 0);
    if (n == 0)
      break;
  }
  w->end = bench_now();
  w->count = seq;
  return NULL;
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_handoff [-t N] [-s SIZE] [-n BLOCKS] [-P]\n");
  exit(BENCH_EXIT_USAGE);
}

int main(int argc, char **argv) {
  uint64_t v, threads = 1;
  int opt, pin = 1;
  while ((opt = getopt(argc, argv, "t:s:n:P")) != -1) {
    switch (opt) {
    case 't':
      if (bench_parse_u64(optarg, &v) || v < 1 || v > MAX_PRODUCERS)
        usage();
      threads = v;
      break;
    case 's':
      if (bench_parse_u64(optarg, &v) || v < 8 || v > (1ull << 32))
        usage();
      g_size = (size_t)v;
      break;
    case 'n':
      if (bench_parse_u64(optarg, &v) || v < 1 || v >= (1ull << 40))
        usage();
      g_blocks = v;
      break;
    case 'P':
      pin = 0;
      break;
    default:
      usage();
    }
  }
  if (optind != argc)
    usage();

  uint64_t cap = IN_FLIGHT_BYTES / ((uint64_t)g_size * BATCH);
  g_cap = cap < 2 ? 2 : cap > RING ? RING : (unsigned)cap;

  unsigned n = (unsigned)threads;
  struct ring *rings = bench_map_zeroed(sizeof(struct ring) * n, "bench_handoff");
  struct worker *prod = bench_map_zeroed(sizeof(struct worker) * n, "bench_handoff");
  struct worker *cons = bench_map_zeroed(sizeof(struct worker) * n, "bench_handoff");
  cpu_set_t allowed;
  if (pin && (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 1))
    pin = 0;
  pthread_barrier_init(&g_barrier, NULL, 2 * n);
  for (unsigned i = 0; i < n; i++) {
    prod[i].index = cons[i].index = i;
    prod[i].ring = cons[i].ring = &rings[i];
    int rc = bench_start_thread(&cons[i].tid, consumer, &cons[i], pin ? &allowed : NULL, 2 * i + 1);
    if (rc == 0)
      rc = bench_start_thread(&prod[i].tid, producer, &prod[i], pin ? &allowed : NULL, 2 * i);
    if (rc) {
      fprintf(stderr, "bench_handoff: pthread_create: %s\n", strerror(rc));
      return 1;
    }
  }

  uint64_t allocs = 0, frees = 0;
  double start = 0, end = 0;
  for (unsigned i = 0; i < n; i++) {
    pthread_join(prod[i].tid, NULL);
    pthread_join(cons[i].tid, NULL);
    if (prod[i].count != g_blocks || cons[i].count != g_blocks)
      bench_check_failed("pair %u: %llu allocated, %llu freed, %llu expected", i,
                         (unsigned long long)prod[i].count, (unsigned long long)cons[i].count,
                         (unsigned long long)g_blocks);
    allocs += prod[i].count;
    frees += cons[i].count;
    struct worker *both[2] = {&prod[i], &cons[i]};
    for (int k = 0; k < 2; k++) {
      if ((i == 0 && k == 0) || both[k]->start < start)
        start = both[k]->start;
      if ((i == 0 && k == 0) || both[k]->end > end)
        end = both[k]->end;
    }
  }
  if (allocs != frees || frees != g_blocks * n)
    bench_check_failed("%llu blocks allocated, %llu freed", (unsigned long long)allocs,
                       (unsigned long long)frees);
  pthread_barrier_destroy(&g_barrier);

  double wall = end - start;
  if (wall <= 0)
    wall = 1e-9;
  bench_result("workload=handoff threads=%u size=%zu frees=%llu seconds=%.4f mfrees=%.3f", n,
               g_size, (unsigned long long)frees, wall, (double)frees / wall / 1e6);
  return 0;
}
