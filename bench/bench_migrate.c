/* Objects migrating between threads: each object is handed from thread to
 * thread at random and freed wherever it happens to be, as with messages
 * or tasks in a work-passing system.
 *
 * T threads each start with 256 objects of random size (16..1024 bytes)
 * and send each one to a random thread (possibly itself).  A thread that
 * receives an object checks it; that is one hop.  With probability 1/4 it
 * frees the object and allocates a replacement of a new random size, then
 * sends the object (old or new) on to a random thread.  Objects travel in
 * batches of up to 32 pointers through a preallocated inbox per thread;
 * each thread keeps one outgoing batch per destination and flushes it when
 * full or when it has nothing else to do.  Once HOPS hops have been done
 * over all threads, every object received is freed, and the run ends when
 * no object is left.
 *
 *   bench_migrate [-t T] [-n HOPS] [-P]
 *
 * T threads, default 2 (T = 1 sends every object to itself); HOPS over all
 * threads, default 24M (K/M/G suffix allowed).  Thread i runs on the ith
 * CPU the process may use, wrapping round, so that placement does not
 * change from run to run; -P leaves placement to the scheduler.
 *
 * RESULT keys:
 *   workload=migrate
 *   threads  T
 *   hops     hops done over all threads: HOPS, or a few hundred fewer
 *            when the last objects were freed while a thread still held
 *            a share of the budget it had claimed
 *   allocs   allocations over all threads, the initial objects included;
 *            frees are checked to be equal
 *   seconds  wall time of the measured phase, from the first thread's
 *            start to the last thread's end (the main figure; lower is
 *            better)
 *   mhops    millions of hops per second of wall time (higher is better)
 *
 * Every object holds its tag in its first 8 bytes: the allocating thread
 * (bits 56..63), the size (bits 40..55) and a per-thread sequence number
 * (bits 0..39); its last 8 bytes hold the tag's complement.  A tag that
 * names no thread or an impossible size, a bad tail, or totals of blocks
 * or tags allocated and freed that differ fail the self-check (exit 3).
 */
#include "bench_threads.h"

#include <limits.h>

#define POPULATION 256     /* objects each thread starts with */
#define BATCH 32           /* pointers per outgoing batch and per inbox read */
#define MIN_SIZE 16
#define MAX_SIZE 1024
#define REPLACE_ONE_IN 4   /* a hop frees and replaces the object 1 time in 4 */
#define CLAIM 256          /* hops taken from the shared budget at once */
#define SPIN_TRIES 256     /* polls before yielding */
#define YIELD_SECONDS 2e-3 /* yielding before sleeping on the futex */
#define MAX_THREADS 255

/* Many senders, one receiver.  A sender reserves a run of slots with one
 * fetch_add and fills them; the receiver takes slots in order while they
 * are non-NULL.  The ring holds at least as many slots as there are
 * objects, so a reserved slot is always already empty and a send never
 * waits for the receiver: no cycle of full inboxes can deadlock. */
struct inbox {
  _Alignas(64) atomic_uint_fast64_t tail; /* slots reserved by senders */
  _Alignas(64) atomic_uint wake_seq;      /* futex word */
  atomic_uint sleeping;
  _Atomic(void *) *slot;
};

struct worker {
  _Alignas(64) pthread_t tid;
  unsigned index;
  uint64_t rng;
  uint64_t head;      /* next inbox slot to read */
  uint64_t seq;       /* tags issued */
  uint64_t allowance; /* hops claimed but not yet done */
  uint64_t dead;      /* frees not yet subtracted from g_live */
  uint64_t allocs, frees, hops;
  uint64_t tags_allocated, tags_freed; /* sums, mod 2^64 */
  void **out;         /* g_threads batches of BATCH pointers */
  uint32_t *out_n;
  double start, end;
};

static unsigned g_threads = 2;
static uint64_t g_hops = 24u << 20;
static uint64_t g_mask; /* inbox slots - 1 */
static struct inbox *g_inbox;
static struct worker *g_worker;
static pthread_barrier_t g_barrier;
static _Alignas(64) atomic_int_fast64_t g_budget; /* hops not yet claimed */
static _Alignas(64) atomic_int_fast64_t g_live;   /* objects not yet freed for good */
static _Alignas(64) atomic_int g_done;

static void *new_object(struct worker *w) {
  size_t size = MIN_SIZE + (size_t)bench_below(&w->rng, MAX_SIZE - MIN_SIZE + 1);
  void *p = bench_malloc(size);
  uint64_t tag = ((uint64_t)w->index << 56) | ((uint64_t)size << 40) | w->seq++;
  bench_stamp(p, size, tag);
  w->allocs++;
  w->tags_allocated += tag;
  return p;
}

/* Checks an object that just arrived and returns its tag. */
static inline uint64_t check_object(const void *p) {
  uint64_t tag;
  memcpy(&tag, p, 8);
  size_t size = (size_t)(tag >> 40) & 0xffff;
  if (__builtin_expect((tag >> 56) >= g_threads || size < MIN_SIZE || size > MAX_SIZE, 0))
    bench_check_failed("object %p carries an impossible tag %#llx", p, (unsigned long long)tag);
  bench_check_stamp(p, size, tag, "migrate");
  return tag;
}

static inline void drop_object(struct worker *w, void *p, uint64_t tag) {
  free(p);
  w->frees++;
  w->tags_freed += tag;
}

static void push(struct inbox *q, void *const *ptrs, uint32_t n) {
  uint64_t pos = atomic_fetch_add_explicit(&q->tail, n, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++) {
    _Atomic(void *) *s = &q->slot[(pos + i) & g_mask];
    /* Empty by the capacity argument; this only waits for the receiver's
     * clearing store to become visible. */
    while (atomic_load_explicit(s, memory_order_acquire) != NULL)
      bench_cpu_relax();
    atomic_store_explicit(s, ptrs[i], memory_order_release);
  }
  /* Every change to the sleeping flag is a read-modify-write, so either
   * this reads the receiver's 1 and wakes it, or the receiver's exchange
   * reads after this one and so sees the slots just filled. */
  if (atomic_fetch_or(&q->sleeping, 0)) {
    atomic_fetch_add(&q->wake_seq, 1);
    bench_futex_wake(&q->wake_seq, 1);
  }
}

static inline void send(struct worker *w, unsigned dest, void *p) {
  void **b = w->out + (size_t)dest * BATCH;
  b[w->out_n[dest]++] = p;
  if (w->out_n[dest] == BATCH) {
    push(&g_inbox[dest], b, BATCH);
    w->out_n[dest] = 0;
  }
}

/* Sends every partial batch; returns nonzero if anything went. */
static int flush_all(struct worker *w) {
  int sent = 0;
  for (unsigned d = 0; d < g_threads; d++) {
    if (w->out_n[d]) {
      push(&g_inbox[d], w->out + (size_t)d * BATCH, w->out_n[d]);
      w->out_n[d] = 0;
      sent = 1;
    }
  }
  return sent;
}

static inline int inbox_ready(const struct worker *w) {
  return atomic_load_explicit(&g_inbox[w->index].slot[w->head & g_mask], memory_order_acquire) !=
         NULL;
}

static uint32_t pop(struct worker *w, void **buf) {
  _Atomic(void *) *slot = g_inbox[w->index].slot;
  uint32_t n = 0;
  while (n < BATCH) {
    _Atomic(void *) *s = &slot[w->head & g_mask];
    void *p = atomic_load_explicit(s, memory_order_acquire);
    if (!p)
      break;
    atomic_store_explicit(s, NULL, memory_order_relaxed);
    w->head++;
    buf[n++] = p;
  }
  return n;
}

/* Takes up to CLAIM hops from the shared budget. */
static int claim(struct worker *w) {
  int_fast64_t left = atomic_load_explicit(&g_budget, memory_order_relaxed);
  while (left > 0) {
    int_fast64_t take = left < CLAIM ? left : CLAIM;
    if (atomic_compare_exchange_weak_explicit(&g_budget, &left, left - take,
                                              memory_order_relaxed, memory_order_relaxed)) {
      w->allowance = (uint64_t)take;
      return 1;
    }
  }
  return 0;
}

/* Subtracts this thread's frees from the live count; whoever takes it to
 * zero ends the run and wakes every sleeper. */
static void settle_dead(struct worker *w) {
  if (!w->dead)
    return;
  int_fast64_t before = atomic_fetch_sub(&g_live, (int_fast64_t)w->dead);
  if (before < (int_fast64_t)w->dead)
    bench_check_failed("live object count went below zero");
  if (before == (int_fast64_t)w->dead) {
    atomic_store(&g_done, 1);
    for (unsigned t = 0; t < g_threads; t++) {
      atomic_fetch_add(&g_inbox[t].wake_seq, 1);
      bench_futex_wake(&g_inbox[t].wake_seq, INT_MAX);
    }
  }
  w->dead = 0;
}

/* Called with nothing to receive and nothing to send.  Spins, then yields,
 * and sleeps only after YIELD_SECONDS: a wake-up can cost milliseconds on a
 * virtual machine, and sleeping early would measure the scheduler instead
 * of the allocator.  Before sleeping, unused hops go back to the budget so
 * that busy threads can do them. */
static void idle_wait(struct worker *w) {
  for (int i = 0; i < SPIN_TRIES; i++) {
    if (inbox_ready(w) || atomic_load_explicit(&g_done, memory_order_relaxed))
      return;
    bench_cpu_relax();
  }
  double give_up = bench_now() + YIELD_SECONDS;
  for (unsigned i = 1;; i++) {
    sched_yield();
    if (inbox_ready(w) || atomic_load_explicit(&g_done, memory_order_relaxed))
      return;
    if (i % 8 == 0 && bench_now() > give_up)
      break;
  }
  if (w->allowance) {
    atomic_fetch_add(&g_budget, (int_fast64_t)w->allowance);
    w->allowance = 0;
  }
  struct inbox *q = &g_inbox[w->index];
  unsigned seq = atomic_load(&q->wake_seq);
  atomic_exchange(&q->sleeping, 1);
  if (!inbox_ready(w) && !atomic_load(&g_done))
    bench_futex_wait(&q->wake_seq, seq);
  atomic_exchange(&q->sleeping, 0);
}

static inline void hop(struct worker *w, void *p) {
  uint64_t tag = check_object(p);
  if (!w->allowance && !claim(w)) {
    /* The budget is spent: this object's journey ends here. */
    drop_object(w, p, tag);
    w->dead++;
    return;
  }
  w->allowance--;
  w->hops++;
  if (bench_below(&w->rng, REPLACE_ONE_IN) == 0) {
    drop_object(w, p, tag);
    p = new_object(w);
  }
  send(w, (unsigned)bench_below(&w->rng, g_threads), p);
}

static void *run(void *arg) {
  struct worker *w = arg;
  void *buf[BATCH];

  pthread_barrier_wait(&g_barrier);
  w->start = bench_now();
  for (int i = 0; i < POPULATION; i++)
    send(w, (unsigned)bench_below(&w->rng, g_threads), new_object(w));
  for (;;) {
    uint32_t n = pop(w, buf);
    if (n) {
      for (uint32_t i = 0; i < n; i++)
        hop(w, buf[i]);
      settle_dead(w);
      continue;
    }
    if (flush_all(w))
      continue;
    settle_dead(w);
    if (atomic_load(&g_done))
      break;
    idle_wait(w);
  }
  w->end = bench_now();
  return NULL;
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_migrate [-t T] [-n HOPS] [-P]\n");
  exit(BENCH_EXIT_USAGE);
}

int main(int argc, char **argv) {
  uint64_t v;
  int opt, pin = 1;
  while ((opt = getopt(argc, argv, "t:n:P")) != -1) {
    switch (opt) {
    case 't':
      if (bench_parse_u64(optarg, &v) || v < 1 || v > MAX_THREADS)
        usage();
      g_threads = (unsigned)v;
      break;
    case 'n':
      /* Sequence numbers have 40 bits; a hop allocates at most once. */
      if (bench_parse_u64(optarg, &v) || v < 1 || v >= (1ull << 39))
        usage();
      g_hops = v;
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

  const unsigned T = g_threads;
  uint64_t slots = 1;
  while (slots < (uint64_t)T * POPULATION)
    slots <<= 1;
  g_mask = slots - 1;
  g_inbox = bench_map_zeroed(sizeof(struct inbox) * T, "bench_migrate");
  g_worker = bench_map_zeroed(sizeof(struct worker) * T, "bench_migrate");
  for (unsigned t = 0; t < T; t++) {
    g_inbox[t].slot = bench_map_zeroed(sizeof(void *) * slots, "bench_migrate");
    g_worker[t].index = t;
    g_worker[t].rng = bench_seed(t);
    g_worker[t].out = bench_map_zeroed(sizeof(void *) * BATCH * T, "bench_migrate");
    g_worker[t].out_n = bench_map_zeroed(sizeof(uint32_t) * T, "bench_migrate");
  }
  atomic_store(&g_budget, (int_fast64_t)g_hops);
  atomic_store(&g_live, (int_fast64_t)T * POPULATION);

  cpu_set_t allowed;
  if (pin && (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 1))
    pin = 0;
  pthread_barrier_init(&g_barrier, NULL, T);
  for (unsigned t = 0; t < T; t++) {
    int rc = bench_start_thread(&g_worker[t].tid, run, &g_worker[t], pin ? &allowed : NULL, t);
    if (rc) {
      fprintf(stderr, "bench_migrate: pthread_create: %s\n", strerror(rc));
      return 1;
    }
  }

  uint64_t allocs = 0, frees = 0, hops = 0, held = 0, tags_allocated = 0, tags_freed = 0;
  double start = 0, end = 0;
  for (unsigned t = 0; t < T; t++) {
    struct worker *w = &g_worker[t];
    pthread_join(w->tid, NULL);
    allocs += w->allocs;
    frees += w->frees;
    hops += w->hops;
    held += w->allowance;
    tags_allocated += w->tags_allocated;
    tags_freed += w->tags_freed;
    if (t == 0 || w->start < start)
      start = w->start;
    if (t == 0 || w->end > end)
      end = w->end;
    for (unsigned d = 0; d < T; d++)
      if (w->out_n[d])
        bench_check_failed("thread %u ended with %u objects unsent", t, w->out_n[d]);
    if (atomic_load(&g_inbox[t].tail) != w->head || inbox_ready(w))
      bench_check_failed("thread %u ended with objects in its inbox", t);
  }
  pthread_barrier_destroy(&g_barrier);
  if (allocs != frees || tags_allocated != tags_freed)
    bench_check_failed("%llu objects allocated, %llu freed (tag sums %#llx, %#llx)",
                       (unsigned long long)allocs, (unsigned long long)frees,
                       (unsigned long long)tags_allocated, (unsigned long long)tags_freed);
  int_fast64_t left = atomic_load(&g_budget);
  if (atomic_load(&g_live) != 0 || left < 0 || hops + held + (uint64_t)left != g_hops)
    bench_check_failed("%llu hops done, %llu held and %lld left of %llu",
                       (unsigned long long)hops, (unsigned long long)held, (long long)left,
                       (unsigned long long)g_hops);

  double wall = end - start;
  if (wall <= 0)
    wall = 1e-9;
  bench_result("workload=migrate threads=%u hops=%llu allocs=%llu seconds=%.4f mhops=%.3f", T,
               (unsigned long long)hops, (unsigned long long)allocs, wall,
               (double)hops / wall / 1e6);
  return 0;
}
