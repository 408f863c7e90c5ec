/* Large-block handoff: one thread allocates big buffers, another frees
 * them, as when a reader thread fills buffers that a worker thread
 * consumes and releases.  Each of N producers allocates blocks of SIZE
 * bytes (typically 256 KiB .. 8 MiB), writes one word in every page (the
 * first touch of a fresh page is a page fault, so an allocator that hands
 * back warm pages gains here what a program using its buffers would
 * gain), stamps both ends and passes the block through a bounded ring to
 * its own consumer, which checks it and frees it.  Every free is a
 * cross-thread free of a block in the 32 KiB - 64 MiB band.
 *
 *   bench_large_handoff [-t N] [-s SIZE] [-d DEPTH] [SECONDS | -n BLOCKS] [-P]
 *
 * N producer/consumer pairs, default 1; SIZE in bytes (K/M/G suffix),
 * default 1 MiB, at least 16; DEPTH blocks at most in a ring (1 .. 64,
 * default 8).  Producers run for SECONDS of wall time (default 0.2) or,
 * with -n, allocate BLOCKS blocks each.  Producer i runs on the (2i)th CPU
 * the process may use and consumer i on the (2i+1)th, wrapping round, as
 * in bench_handoff; -P leaves placement to the scheduler.
 *
 * RESULT keys:
 *   workload=large_handoff
 *   threads  N, the number of pairs (2N threads run)
 *   size     block size in bytes
 *   depth    ring capacity in blocks
 *   blocks   blocks allocated and freed over all pairs
 *   seconds  wall time of the measured phase, first start to last end
 *   kpairs   thousands of blocks allocated and freed per second of wall
 *            time (higher is better)
 *   gib_s    GiB of blocks passed per second (higher is better)
 *
 * Every block carries the tag (pair << 40 | sequence) at its head, its
 * complement at its tail and tag-derived words in its pages; a consumer
 * expects its producer's tags in order and checks the ends and 16 pages
 * of each block, so a block lost, reordered, handed out twice or
 * overlapping another fails the self-check (exit 3).
 */
#include "bench_threads.h"

#define MAX_PAIRS 256
#define MAX_DEPTH 64 /* ring slots; a power of two */
#define SPIN_TRIES 256
#define CHECK_PAGES 16

/* Producer-written and consumer-written words on separate lines. */
struct ring {
  _Alignas(64) atomic_uint head; /* blocks published */
  _Alignas(64) atomic_uint tail; /* blocks taken */
  _Alignas(64) void *slot[MAX_DEPTH];
};

struct worker {
  _Alignas(64) pthread_t tid;
  unsigned index;
  struct ring *ring;
  uint64_t count; /* blocks allocated (producer) or freed (consumer) */
  double start, end;
};

static size_t g_size = 1u << 20;
static unsigned g_depth = 8;
static uint64_t g_blocks;      /* 0: run until g_stop */
static atomic_int g_stop;
static pthread_barrier_t g_barrier;

/* Two threads on two cores spin briefly; past that the other side is
 * probably not running, so give it the core. */
static void wait_change(atomic_uint *word, unsigned old) {
  for (int i = 0; i < SPIN_TRIES; i++) {
    if (atomic_load_explicit(word, memory_order_acquire) != old)
      return;
    bench_cpu_relax();
  }
  while (atomic_load_explicit(word, memory_order_acquire) == old)
    sched_yield();
}

static void *producer(void *arg) {
  struct worker *w = arg;
  struct ring *q = w->ring;
  const uint64_t base = (uint64_t)w->index << 40;
  uint64_t seq = 0;
  unsigned head = 0, tail_seen = 0;

  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  for (;;) {
    int last = g_blocks ? seq == g_blocks
                        : atomic_load_explicit(&g_stop, memory_order_relaxed) != 0;
    while (head - tail_seen >= g_depth) {
      tail_seen = atomic_load_explicit(&q->tail, memory_order_acquire);
      if (head - tail_seen >= g_depth)
        wait_change(&q->tail, tail_seen);
    }
    void *p = NULL; /* NULL ends the stream */
    if (!last) {
      p = bench_malloc(g_size);
      bench_touch_pages(p, g_size, base | seq);
      seq++;
    }
    q->slot[head % MAX_DEPTH] = p;
    head++;
    atomic_store_explicit(&q->head, head, memory_order_release);
    if (last)
      break;
  }
  w->end = bench_now();
  w->count = seq;
  return NULL;
}

static void *consumer(void *arg) {
  struct worker *w = arg;
  struct ring *q = w->ring;
  const uint64_t base = (uint64_t)w->index << 40;
  uint64_t seq = 0;
  unsigned tail = 0, head_seen = 0;

  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  for (;;) {
    while (head_seen == tail) {
      head_seen = atomic_load_explicit(&q->head, memory_order_acquire);
      if (head_seen == tail)
        wait_change(&q->head, tail);
    }
    void *p = q->slot[tail % MAX_DEPTH];
    tail++;
    atomic_store_explicit(&q->tail, tail, memory_order_release);
    if (!p)
      break;
    bench_check_pages(p, g_size, base | seq, CHECK_PAGES, "large_handoff consumer");
    seq++;
    free(p);
  }
  w->end = bench_now();
  w->count = seq;
  return NULL;
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_large_handoff [-t N] [-s SIZE] [-d DEPTH] [SECONDS | -n BLOCKS] [-P]\n");
  exit(BENCH_EXIT_USAGE);
}

int main(int argc, char **argv) {
  uint64_t v, threads = 1;
  double seconds = 0.2;
  int opt, pin = 1;
  while ((opt = getopt(argc, argv, "t:s:d:n:P")) != -1) {
    switch (opt) {
    case 't':
      if (bench_parse_u64(optarg, &v) || v < 1 || v > MAX_PAIRS)
        usage();
      threads = v;
      break;
    case 's':
      if (bench_parse_u64(optarg, &v) || v < 16 || v > (1ull << 34))
        usage();
      g_size = (size_t)v;
      break;
    case 'd':
      if (bench_parse_u64(optarg, &v) || v < 1 || v > MAX_DEPTH)
        usage();
      g_depth = (unsigned)v;
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
  if (optind < argc) {
    if (g_blocks || optind + 1 != argc)
      usage();
    seconds = strtod(argv[optind], NULL);
    if (!(seconds > 0))
      usage();
  }

  unsigned n = (unsigned)threads;
  struct ring *rings = bench_map_zeroed(sizeof(struct ring) * n, "bench_large_handoff");
  struct worker *prod = bench_map_zeroed(sizeof(struct worker) * n, "bench_large_handoff");
  struct worker *cons = bench_map_zeroed(sizeof(struct worker) * n, "bench_large_handoff");
  cpu_set_t allowed;
  if (pin && (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 1))
    pin = 0;
  /* The main thread joins the barrier, so the time limit starts with the
   * workers. */
  pthread_barrier_init(&g_barrier, NULL, 2 * n + 1);
  for (unsigned i = 0; i < n; i++) {
    prod[i].index = cons[i].index = i;
    prod[i].ring = cons[i].ring = &rings[i];
    int rc = bench_start_thread(&cons[i].tid, consumer, &cons[i], pin ? &allowed : NULL, 2 * i + 1);
    if (rc == 0)
      rc = bench_start_thread(&prod[i].tid, producer, &prod[i], pin ? &allowed : NULL, 2 * i);
    if (rc) {
      fprintf(stderr, "bench_large_handoff: pthread_create: %s\n", strerror(rc));
      return BENCH_EXIT_NULL;
    }
  }
  pthread_barrier_wait(&g_barrier);
  if (!g_blocks) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    atomic_store_explicit(&g_stop, 1, memory_order_relaxed);
  }

  uint64_t blocks = 0;
  double start = 0, end = 0;
  for (unsigned i = 0; i < n; i++) {
    pthread_join(prod[i].tid, NULL);
    pthread_join(cons[i].tid, NULL);
    if (prod[i].count != cons[i].count || (g_blocks && prod[i].count != g_blocks))
      bench_check_failed("pair %u: %llu allocated, %llu freed", i,
                         (unsigned long long)prod[i].count, (unsigned long long)cons[i].count);
    blocks += cons[i].count;
    struct worker *both[2] = {&prod[i], &cons[i]};
    for (int k = 0; k < 2; k++) {
      if ((i == 0 && k == 0) || both[k]->start < start)
        start = both[k]->start;
      if ((i == 0 && k == 0) || both[k]->end > end)
        end = both[k]->end;
    }
  }
  pthread_barrier_destroy(&g_barrier);

  double wall = end - start;
  if (wall <= 0)
    wall = 1e-9;
  bench_result("workload=large_handoff threads=%u size=%zu depth=%u blocks=%llu seconds=%.4f "
               "kpairs=%.4f gib_s=%.3f",
               n, g_size, g_depth, (unsigned long long)blocks, wall,
               (double)blocks / wall / 1e3,
               (double)blocks * (double)g_size / wall / (double)(1u << 30));
  return 0;
}
