/* Long-lived threads with mixed sizes and some frees handed to another
 * thread, as in a pipeline where most objects die where they were made
 * and a few are passed on.  Each of THREADS threads keeps WORKING_SET
 * slots, all filled before the clock starts, and repeats: pick a random
 * slot, check and free its block, allocate a new one of random size and
 * put it there.  Sizes are 8 B .. 16 KiB, spread evenly over the eleven
 * powers of two (so most requests are small), each uniform within its
 * power of two.  REMOTE_PERCENT of the frees go instead to thread
 * (i + 1) % THREADS in batches of 32 through preallocated rings; that
 * thread checks and frees them when it next looks at its inbox (every 32
 * operations).  With one thread the batches come back to the sender.
 * A sender owns 16 batches; with all of them in transit it drains its
 * own inbox and waits, so at most 512 blocks per thread are in flight.
 *
 *   bench_mixed [-t THREADS] [-n OPS_PER_THREAD] [-r REMOTE_PERCENT] [-w WORKING_SET]
 *
 * Defaults: 2 threads, 2M operations per thread, 10 % remote, 2048 slots.
 * Counts take K/M/G suffixes (powers of 1024).  The last line of output:
 *
 *   RESULT workload=mixed threads=T ops=N remote_frees=F cpu_seconds=C
 *          seconds=S mops_per_cpu_s=R mops=W peak_rss_mib=M
 *
 *   ops             malloc+free pairs over all threads (THREADS * OPS)
 *   remote_frees    of those frees, how many went through an inbox (to
 *                   the next thread; with one thread, back to itself)
 *   cpu_seconds     user+system CPU time of the process over the measured
 *                   phase (lower is better)
 *   seconds         wall time of the measured phase
 *   mops_per_cpu_s  millions of pairs per CPU-second; the main figure,
 *                   since with more threads than cores wall time mostly
 *                   measures the scheduler (higher is better)
 *   mops            millions of pairs per wall second (higher is better)
 *   peak_rss_mib    peak resident set of the process, MiB (lower is better)
 *
 * Exit status: 0 success, 1 malloc returned NULL (or a thread could not
 * be started), 2 bad usage, 3 a self-check failed.
 */
#include "bench_threads.h"

#define DEFAULT_THREADS 2
#define DEFAULT_OPS (2ull << 20)
#define DEFAULT_REMOTE 10
#define DEFAULT_WORKING_SET 2048
#define MAX_THREADS 1024
#define MAX_SIZE 16384
#define BATCH_ENTRIES 32
#define DRAIN_EVERY 32    /* operations between looks at the inbox */
#define SENDER_BATCHES 16 /* batches each sender owns; also ring capacity */
#define SPINS_BEFORE_YIELD 64
#define YIELDS_BEFORE_SLEEP 8
#define NAP_NS 50000

/* Tags are serial << 16 | (size - 1), so a block's size travels with its
 * tag; serials are thread << 36 | count, unique over the run. */
#define SERIAL_THREAD_SHIFT 36

struct entry {
  void *p;
  uint64_t tag;
};

struct batch {
  uint32_t count;
  struct entry e[BATCH_ENTRIES];
};

/* Single producer, single consumer; head and tail only grow. */
struct ring {
  _Alignas(64) atomic_size_t head;
  _Alignas(64) atomic_size_t tail;
  _Alignas(64) struct batch *slot[SENDER_BATCHES];
};

struct thread {
  /* Rings of the link from this thread to the next one: full batches go
   * out on `out`, the next thread hands them back empty on `back`. */
  struct ring out;
  struct ring back;
  _Alignas(64) atomic_int done_sending;
  _Alignas(64) pthread_t tid;
  unsigned index;
  struct batch *batches; /* SENDER_BATCHES of them, owned by this thread */
  struct batch *cur;     /* being filled */
  uint64_t allocs, local_frees, remote_sent, remote_freed, final_frees;
  uint64_t measured_allocs;
};

static struct thread *g_threads;
static unsigned g_nthreads;
static uint64_t g_ops, g_remote_pct, g_ws;
static pthread_barrier_t g_ready, g_go, g_finished;

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_mixed [-t THREADS] [-n OPS_PER_THREAD] [-r REMOTE_PERCENT] [-w WORKING_SET]\n");
  exit(BENCH_EXIT_USAGE);
}

static void ring_push(struct ring *r, struct batch *b) {
  size_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  /* Each sender owns exactly as many batches as a ring holds, so a
   * push never finds it full unless a batch was duplicated. */
  if (t - atomic_load_explicit(&r->head, memory_order_acquire) >= SENDER_BATCHES)
    bench_check_failed("transport ring overflow");
  r->slot[t % SENDER_BATCHES] = b;
  atomic_store_explicit(&r->tail, t + 1, memory_order_release);
}

static struct batch *ring_pop(struct ring *r) {
  size_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  if (h == atomic_load_explicit(&r->tail, memory_order_acquire))
    return NULL;
  struct batch *b = r->slot[h % SENDER_BATCHES];
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
  return b;
}

/* Waiting must cost little CPU, since CPU time is the main figure and a
 * peer may be descheduled for a whole time slice: spin a little, yield a
 * few times, then sleep in short naps. */
struct backoff {
  unsigned spins, yields;
};

static void backoff_wait(struct backoff *w) {
  if (w->spins < SPINS_BEFORE_YIELD) {
    w->spins++;
    bench_cpu_relax();
  } else if (w->yields < YIELDS_BEFORE_SLEEP) {
    w->yields++;
    sched_yield();
  } else {
    struct timespec nap = {0, NAP_NS};
    nanosleep(&nap, NULL);
  }
}

static inline size_t tag_size(uint64_t tag) { return (size_t)(tag & 0xffff) + 1; }

static size_t pick_size(uint64_t *rng) {
  uint64_t base = 8ull << bench_below(rng, 11); /* 8 B .. 8 KiB */
  uint64_t size = base + bench_below(rng, base);
  return (size_t)(size > MAX_SIZE ? MAX_SIZE : size);
}

/* Frees every block in the batches the previous thread sent here and
 * hands the empty batches back. */
static void drain_inbox(struct thread *self) {
  struct thread *from = &g_threads[(self->index + g_nthreads - 1) % g_nthreads];
  struct batch *b;
  while ((b = ring_pop(&from->out)) != NULL) {
    if (b->count > BATCH_ENTRIES)
      bench_check_failed("batch of %u entries received", b->count);
    for (uint32_t k = 0; k < b->count; k++) {
      bench_check_stamp(b->e[k].p, tag_size(b->e[k].tag), b->e[k].tag, "remote free");
      free(b->e[k].p);
    }
    self->remote_freed += b->count;
    b->count = 0;
    ring_push(&from->back, b);
  }
}

static void send_remote(struct thread *self, void *p, uint64_t tag) {
  struct batch *b = self->cur;
  b->e[b->count].p = p;
  b->e[b->count].tag = tag;
  self->remote_sent++;
  if (++b->count < BATCH_ENTRIES)
    return;
  ring_push(&self->out, b);
  /* Wait for an empty batch, draining our own inbox meanwhile: the next
   * thread may itself be waiting on us. */
  struct backoff w = {0, 0};
  while ((self->cur = ring_pop(&self->back)) == NULL) {
    drain_inbox(self);
    backoff_wait(&w);
  }
}

static void *thread_main(void *arg) {
  struct thread *self = arg;
  uint64_t rng = bench_seed(self->index);
  uint64_t serial = (uint64_t)self->index << SERIAL_THREAD_SHIFT;
  void **ptrs = bench_malloc(g_ws * sizeof *ptrs);
  uint64_t *tags = bench_malloc(g_ws * sizeof *tags);

  for (uint64_t s = 0; s < g_ws; s++) {
    size_t size = pick_size(&rng);
    ptrs[s] = bench_malloc(size);
    tags[s] = serial++ << 16 | (uint64_t)(size - 1);
    bench_stamp(ptrs[s], size, tags[s]);
    self->allocs++;
  }
  pthread_barrier_wait(&g_ready);
  pthread_barrier_wait(&g_go);

  uint64_t allocs = 0, local_frees = 0;
  for (uint64_t i = 0; i < g_ops; i++) {
    if (i % DRAIN_EVERY == 0)
      drain_inbox(self);
    uint64_t s = bench_below(&rng, g_ws);
    if (ptrs[s]) {
      bench_check_stamp(ptrs[s], tag_size(tags[s]), tags[s], "free");
      if (bench_below(&rng, 100) < g_remote_pct) {
        send_remote(self, ptrs[s], tags[s]);
      } else {
        free(ptrs[s]);
        local_frees++;
      }
    }
    size_t size = pick_size(&rng);
    ptrs[s] = bench_malloc(size);
    tags[s] = serial++ << 16 | (uint64_t)(size - 1);
    bench_stamp(ptrs[s], size, tags[s]);
    allocs++;
  }

  /* Send what is left, then keep draining until the thread that sends
   * to us has sent its last batch. */
  if (self->cur->count)
    ring_push(&self->out, self->cur);
  self->cur = NULL;
  atomic_store_explicit(&self->done_sending, 1, memory_order_release);
  struct thread *from = &g_threads[(self->index + g_nthreads - 1) % g_nthreads];
  struct backoff w = {0, 0};
  for (;;) {
    drain_inbox(self);
    if (atomic_load_explicit(&from->done_sending, memory_order_acquire)) {
      drain_inbox(self);
      break;
    }
    backoff_wait(&w);
  }
  self->allocs += allocs;
  self->measured_allocs = allocs;
  self->local_frees = local_frees;
  pthread_barrier_wait(&g_finished);

  for (uint64_t s = 0; s < g_ws; s++) {
    if (!ptrs[s])
      continue;
    bench_check_stamp(ptrs[s], tag_size(tags[s]), tags[s], "final free");
    free(ptrs[s]);
    self->final_frees++;
  }
  free(ptrs);
  free(tags);
  return NULL;
}

int main(int argc, char **argv) {
  uint64_t threads = DEFAULT_THREADS;
  g_ops = DEFAULT_OPS;
  g_remote_pct = DEFAULT_REMOTE;
  g_ws = DEFAULT_WORKING_SET;
  int opt;
  while ((opt = getopt(argc, argv, "t:n:r:w:")) != -1) {
    uint64_t *dst;
    switch (opt) {
    case 't': dst = &threads; break;
    case 'n': dst = &g_ops; break;
    case 'r': dst = &g_remote_pct; break;
    case 'w': dst = &g_ws; break;
    default: usage();
    }
    if (bench_parse_u64(optarg, dst) != 0)
      usage();
  }
  if (optind != argc || threads < 1 || threads > MAX_THREADS || g_ops < 1 ||
      g_remote_pct > 100 || g_ws < 1 || g_ws > (1ull << 28) ||
      g_ops > (1ull << SERIAL_THREAD_SHIFT) - 1 - g_ws)
    usage();
  g_nthreads = (unsigned)threads;

  g_threads = aligned_alloc(64, threads * sizeof *g_threads);
  if (!g_threads)
    bench_null(threads * sizeof *g_threads);
  memset(g_threads, 0, threads * sizeof *g_threads);
  for (unsigned i = 0; i < g_nthreads; i++) {
    struct thread *t = &g_threads[i];
    t->index = i;
    t->batches = bench_malloc(SENDER_BATCHES * sizeof *t->batches);
    atomic_init(&t->out.head, 0);
    atomic_init(&t->out.tail, 0);
    atomic_init(&t->back.head, 0);
    atomic_init(&t->back.tail, 0);
    atomic_init(&t->done_sending, 0);
    t->cur = &t->batches[0];
    t->cur->count = 0;
    for (unsigned b = 1; b < SENDER_BATCHES; b++) {
      t->batches[b].count = 0;
      ring_push(&t->back, &t->batches[b]);
    }
  }
  pthread_barrier_init(&g_ready, NULL, g_nthreads + 1);
  pthread_barrier_init(&g_go, NULL, g_nthreads + 1);
  pthread_barrier_init(&g_finished, NULL, g_nthreads + 1);
  for (unsigned i = 0; i < g_nthreads; i++) {
    int rc = pthread_create(&g_threads[i].tid, NULL, thread_main, &g_threads[i]);
    if (rc) {
      fprintf(stderr, "bench_mixed: pthread_create: %s\n", strerror(rc));
      return BENCH_EXIT_NULL;
    }
  }

  /* The clocks are read while every thread is parked between the two
   * start barriers, after their working sets are filled. */
  pthread_barrier_wait(&g_ready);
  double cpu0 = bench_cpu_seconds();
  double t0 = bench_now();
  pthread_barrier_wait(&g_go);
  pthread_barrier_wait(&g_finished);
  double wall = bench_now() - t0;
  double cpu = bench_cpu_seconds() - cpu0;
  double peak_mib = (double)bench_peak_rss_bytes() / (1024.0 * 1024.0);

  uint64_t allocs = 0, frees = 0, sent = 0, received = 0, measured = 0;
  for (unsigned i = 0; i < g_nthreads; i++) {
    struct thread *t = &g_threads[i];
    pthread_join(t->tid, NULL);
    allocs += t->allocs;
    frees += t->local_frees + t->remote_freed + t->final_frees;
    sent += t->remote_sent;
    received += t->remote_freed;
    measured += t->measured_allocs;
    if (atomic_load(&t->out.head) != atomic_load(&t->out.tail))
      bench_check_failed("thread %u left batches in flight", i);
  }
  uint64_t ops = threads * g_ops;
  if (measured != ops || allocs != ops + threads * g_ws || frees != allocs || sent != received)
    bench_check_failed("%llu allocations (%llu measured, %llu expected) against %llu frees; "
                       "%llu sent to other threads, %llu freed there",
                       (unsigned long long)allocs, (unsigned long long)measured,
                       (unsigned long long)ops, (unsigned long long)frees,
                       (unsigned long long)sent, (unsigned long long)received);

  for (unsigned i = 0; i < g_nthreads; i++)
    free(g_threads[i].batches);
  free(g_threads);
  pthread_barrier_destroy(&g_ready);
  pthread_barrier_destroy(&g_go);
  pthread_barrier_destroy(&g_finished);
  if (wall <= 0)
    wall = 1e-9;
  if (cpu <= 0)
    cpu = 1e-9;
  bench_result("workload=mixed threads=%llu ops=%llu remote_frees=%llu cpu_seconds=%.4f seconds=%.4f "
               "mops_per_cpu_s=%.3f mops=%.3f peak_rss_mib=%.1f",
               (unsigned long long)threads, (unsigned long long)ops, (unsigned long long)sent, cpu,
               wall, (double)ops / cpu / 1e6, (double)ops / wall / 1e6, peak_mib);
  return 0;
}
