/* A model of a server: worker threads handle requests, each of which
 * allocates a handful of request-sized objects, passes a few to other
 * workers, keeps a few in a long-lived cache that all workers share, and
 * frees the rest before the next request.  Workers retire after a number
 * of requests and a new thread takes each one's place, as in a server
 * that recycles its worker threads.  It models no particular program:
 * the proportions below are round figures, chosen so that most frees are
 * local and short-lived, some are cross-thread, and some free objects that
 * a thread long since gone allocated.
 *
 * One request, on worker lane i of THREADS:
 *   1. check and free the objects other workers passed to lane i;
 *   2. allocate 4 .. 32 objects (uniform) of 8 B .. 2 KiB, skewed to small
 *      sizes (the power of two is the smaller of two uniform draws from
 *      8 B .. 1 KiB, so 8-16 B is fifteen times as likely as 1-2 KiB;
 *      mean about 140 B), stamp each;
 *   3. of those, pass 1 in 8 to another lane's mailbox (to lane i itself
 *      with one thread), put 1 in 32 into the shared cache, replacing a
 *      random entry, which is checked and freed (random eviction);
 *   4. look up 2 random cache entries: take one, check it, put it back;
 *   5. check and free the rest, last allocated first.
 *
 * Mailboxes: each lane has a lock-free stack of notes (pointer and tag),
 * onto which senders push with a compare-exchange and which the lane's
 * worker takes whole with one exchange, so nothing is ever popped singly
 * and there is no ABA.  Notes come from memory the workload maps itself,
 * never from the allocator under test; a lane keeps the notes it has read
 * and writes its own with them.  A mailbox is unbounded, so no object is
 * ever held back or freed elsewhere when a reader is descheduled or
 * between two workers: the mix of frees is the same whatever the
 * allocator's speed.  The cache is a table of atomic words: insertion is
 * one exchange, a lookup an exchange with 0 and a compare-exchange back
 * (if another worker filled the slot meanwhile, the looked-up object is
 * freed).  So the workload's own structures add no lock for the
 * allocator's to hide behind.  The main thread fills the cache before the
 * clock starts, and checks and frees what is left at the end.
 *
 *   bench_server [-t THREADS] [-n REQUESTS] [-c CACHE_SLOTS] [-l LIFETIME]
 *
 * Defaults: 2 threads, 256K requests over all workers, 128K cache slots,
 * LIFETIME (requests per worker before it retires) REQUESTS / (THREADS *
 * 8).  Counts take K/M/G suffixes (powers of 1024).
 *
 * RESULT keys:
 *   workload=server threads requests workers
 *   objects      objects allocated during the run (each freed once)
 *   seconds      wall time of the run, thread starts and exits included
 *   mops         millions of objects allocated (and freed) per second of
 *                wall time (higher is better)
 *   kreqs        thousands of requests per second (higher is better)
 *   passed_pct   objects freed by another worker than the one that made
 *                them, through a mailbox, as a percentage of objects
 *   evicted_pct  objects freed on eviction from the cache, percentage
 *   peak_rss_mib peak resident set (MiB)
 *   notes        mailbox notes ever in use at once, at most (32 bytes
 *                each, the workload's own memory, in the RSS too)
 *
 * Every object carries the tag serial << 16 | (size - 1) at its head and
 * its complement at its tail; mailbox entries carry the tag and cache
 * slots 16 bits of the serial, so an object lost, freed twice, handed out
 * twice or overwritten fails the self-check (exit 3), as does any
 * mismatch between objects allocated and freed.
 */
#include "bench_threads.h"

#include <semaphore.h>

#define MAX_THREADS 64
#define MAX_NOTES (8u << 20) /* notes in flight or spare, over all lanes */
#define MIN_OBJECTS 4
#define MAX_OBJECTS 32
#define PASS_IN_64 8  /* 1 in 8 objects passed to another lane */
#define CACHE_IN_64 2 /* 1 in 32 objects put into the cache */
#define LOOKUPS 2
#define PTR_BITS 48
#define PTR_MASK ((1ull << PTR_BITS) - 1)
#define SERIAL_WORKER_SHIFT 30 /* serial = worker << 30 | object count */

struct note {
  struct note *next;
  void *p;
  uint64_t tag;
  uint64_t pad;
};

struct counts {
  uint64_t allocs, frees, sent, received, evicted;
  uint64_t bytes_alloc, bytes_freed;
};

struct lane {
  _Alignas(64) _Atomic(struct note *) inbox; /* pushed by any worker */
  _Alignas(64) pthread_t tid;
  unsigned index;
  uint64_t worker; /* number of the worker on the lane, from 1 */
  uint64_t requests;
  struct note *spare; /* notes read, for the lane's own sends */
  struct counts c;
  atomic_int done;
  int active;
};

static unsigned g_lanes;
static struct lane *g_lane;
static struct note *g_notes; /* MAX_NOTES of them, handed out in order */
static atomic_uint g_notes_used;
static _Atomic uint64_t *g_cache;
static uint64_t g_cache_slots;
static sem_t g_done_sem;

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_server [-t THREADS] [-n REQUESTS] [-c CACHE_SLOTS] [-l LIFETIME]\n");
  exit(BENCH_EXIT_USAGE);
}

static inline size_t tag_size(uint64_t tag) { return (size_t)(tag & 0xffff) + 1; }

static size_t pick_size(uint64_t *rng) {
  uint64_t a = bench_below(rng, 8), b = bench_below(rng, 8);
  uint64_t base = 8ull << (a < b ? a : b); /* 8 B .. 1 KiB */
  return (size_t)(base + bench_below(rng, base));
}

static void *make_object(uint64_t serial, uint64_t *rng, uint64_t *tag, struct counts *c) {
  size_t size = pick_size(rng);
  void *p = bench_malloc(size);
  if (__builtin_expect((uint64_t)(uintptr_t)p & ~PTR_MASK, 0))
    bench_check_failed("object %p lies above 2^48; cache slots cannot hold it", p);
  *tag = serial << 16 | (uint64_t)(size - 1);
  bench_stamp(p, size, *tag);
  c->allocs++;
  c->bytes_alloc += size;
  return p;
}

static void check_and_free(void *p, uint64_t tag, const char *what, struct counts *c) {
  size_t size = tag_size(tag);
  bench_check_stamp(p, size, tag, what);
  free(p);
  c->frees++;
  c->bytes_freed += size;
}

static inline uint64_t cache_word(void *p, uint64_t tag) {
  return (uint64_t)(uintptr_t)p | ((tag >> 16) & 0xffff) << PTR_BITS;
}

/* The tag of the object a cache word names, checked against the word. */
static uint64_t cache_tag(uint64_t word, const char *what) {
  void *p = (void *)(uintptr_t)(word & PTR_MASK);
  uint64_t tag;
  memcpy(&tag, p, 8);
  if (__builtin_expect(((tag >> 16) & 0xffff) != word >> PTR_BITS, 0))
    bench_check_failed("%s: object %p carries tag %#llx, its cache slot expected serial %#llx "
                       "(low 16 bits)",
                       what, p, (unsigned long long)tag, (unsigned long long)(word >> PTR_BITS));
  if (__builtin_expect(tag_size(tag) > 2048, 0))
    bench_check_failed("%s: object %p carries tag %#llx, an impossible size", what, p,
                       (unsigned long long)tag);
  return tag;
}

static void cache_free(uint64_t word, const char *what, struct counts *c) {
  uint64_t tag = cache_tag(word, what);
  check_and_free((void *)(uintptr_t)(word & PTR_MASK), tag, what, c);
}

/* Frees what other lanes passed to lane ME since its last look. */
static void drain_mailbox(struct lane *me, struct counts *c) {
  struct note *n = atomic_exchange_explicit(&me->inbox, NULL, memory_order_acquire);
  while (n) {
    struct note *next = n->next;
    check_and_free(n->p, n->tag, "mailbox", c);
    c->received++;
    n->next = me->spare;
    me->spare = n;
    n = next;
  }
}

static void pass(struct lane *me, struct lane *to, void *p, uint64_t tag, struct counts *c) {
  struct note *n = me->spare;
  if (n) {
    me->spare = n->next;
  } else {
    unsigned i = atomic_fetch_add_explicit(&g_notes_used, 1, memory_order_relaxed);
    if (i >= MAX_NOTES) {
      fprintf(stderr, "bench_server: more than %u objects in the mailboxes\n", MAX_NOTES);
      fflush(stderr);
      _exit(BENCH_EXIT_NULL);
    }
    n = &g_notes[i];
  }
  n->p = p;
  n->tag = tag;
  struct note *head = atomic_load_explicit(&to->inbox, memory_order_relaxed);
  do
    n->next = head;
  while (!atomic_compare_exchange_weak_explicit(&to->inbox, &head, n, memory_order_release,
                                                memory_order_relaxed));
  c->sent++;
}

static void *worker_main(void *arg) {
  struct lane *l = arg;
  uint64_t rng = bench_seed(l->worker);
  uint64_t serial = l->worker << SERIAL_WORKER_SHIFT;
  struct counts c = {0};
  void *keep[MAX_OBJECTS];
  uint64_t keep_tag[MAX_OBJECTS];

  for (uint64_t q = 0; q < l->requests; q++) {
    drain_mailbox(l, &c);
    unsigned n = MIN_OBJECTS + (unsigned)bench_below(&rng, MAX_OBJECTS - MIN_OBJECTS + 1), kept = 0;
    for (unsigned k = 0; k < n; k++) {
      uint64_t tag;
      void *p = make_object(serial++, &rng, &tag, &c);
      uint64_t r = bench_below(&rng, 64);
      if (r < PASS_IN_64) {
        unsigned to = g_lanes == 1 ? l->index
                                   : (l->index + 1 + (unsigned)bench_below(&rng, g_lanes - 1)) %
                                         g_lanes;
        pass(l, &g_lane[to], p, tag, &c);
      } else if (r < PASS_IN_64 + CACHE_IN_64) {
        uint64_t slot = bench_below(&rng, g_cache_slots);
        uint64_t old = atomic_exchange_explicit(&g_cache[slot], cache_word(p, tag),
                                                memory_order_acq_rel);
        if (old) {
          cache_free(old, "eviction", &c);
          c.evicted++;
        }
      } else {
        keep[kept] = p;
        keep_tag[kept++] = tag;
      }
    }
    for (unsigned k = 0; k < LOOKUPS; k++) {
      uint64_t slot = bench_below(&rng, g_cache_slots);
      uint64_t word = atomic_exchange_explicit(&g_cache[slot], 0, memory_order_acq_rel);
      if (!word)
        continue; /* another worker holds it for a lookup */
      uint64_t tag = cache_tag(word, "lookup");
      bench_check_stamp((void *)(uintptr_t)(word & PTR_MASK), tag_size(tag), tag, "lookup");
      uint64_t empty = 0;
      if (!atomic_compare_exchange_strong_explicit(&g_cache[slot], &empty, word,
                                                   memory_order_acq_rel, memory_order_acquire)) {
        cache_free(word, "lookup", &c);
        c.evicted++;
      }
    }
    while (kept > 0) {
      kept--;
      check_and_free(keep[kept], keep_tag[kept], "request end", &c);
    }
  }
  l->c = c;
  atomic_store_explicit(&l->done, 1, memory_order_release);
  sem_post(&g_done_sem);
  return NULL;
}

static void start_worker(struct lane *l, uint64_t worker, uint64_t requests) {
  l->worker = worker;
  l->requests = requests;
  atomic_store_explicit(&l->done, 0, memory_order_relaxed);
  l->active = 1;
  int rc = pthread_create(&l->tid, NULL, worker_main, l);
  if (rc) {
    fprintf(stderr, "bench_server: pthread_create: %s\n", strerror(rc));
    fflush(stderr);
    _exit(BENCH_EXIT_NULL);
  }
}

static void add_counts(struct counts *into, const struct counts *c) {
  into->allocs += c->allocs;
  into->frees += c->frees;
  into->sent += c->sent;
  into->received += c->received;
  into->evicted += c->evicted;
  into->bytes_alloc += c->bytes_alloc;
  into->bytes_freed += c->bytes_freed;
}

int main(int argc, char **argv) {
  uint64_t threads = 2, requests = 256u << 10, slots = 128u << 10, lifetime = 0;
  int opt;
  while ((opt = getopt(argc, argv, "t:n:c:l:")) != -1) {
    uint64_t *dst;
    switch (opt) {
    case 't': dst = &threads; break;
    case 'n': dst = &requests; break;
    case 'c': dst = &slots; break;
    case 'l': dst = &lifetime; break;
    default: usage();
    }
    if (bench_parse_u64(optarg, dst) != 0)
      usage();
  }
  if (optind != argc || threads < 1 || threads > MAX_THREADS || requests < 1 || slots < 1 ||
      slots > (1ull << 30) || requests > (1ull << 40))
    usage();
  if (lifetime == 0)
    lifetime = requests / (threads * 8) ? requests / (threads * 8) : 1;
  /* Each worker's serials must fit below the next worker's. */
  if (lifetime > ((1ull << SERIAL_WORKER_SHIFT) - 1) / MAX_OBJECTS)
    usage();
  uint64_t nworkers = requests / lifetime + (requests % lifetime != 0);
  if (nworkers >= (1ull << (PTR_BITS - SERIAL_WORKER_SHIFT)) - 1)
    usage();

  g_lanes = (unsigned)threads;
  /* Address space only: pages become resident as notes are first used. */
  g_notes = mmap(NULL, sizeof(struct note) * (size_t)MAX_NOTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (g_notes == MAP_FAILED) {
    perror("bench_server: mmap");
    return BENCH_EXIT_NULL;
  }
  g_cache_slots = slots;
  g_cache = bench_map_zeroed(slots * sizeof *g_cache, "bench_server");
  struct lane *lanes = bench_map_zeroed(sizeof(struct lane) * threads, "bench_server");
  g_lane = lanes;
  if (sem_init(&g_done_sem, 0, 0) != 0) {
    perror("bench_server: sem_init");
    return BENCH_EXIT_NULL;
  }

  /* The fill is worker 0's work: its serials and its seed. */
  struct counts total = {0};
  uint64_t rng = bench_seed(0);
  for (uint64_t s = 0; s < slots; s++) {
    uint64_t tag;
    void *p = make_object(s, &rng, &tag, &total);
    atomic_init(&g_cache[s], cache_word(p, tag));
  }
  const uint64_t fill = total.allocs;

  double t0 = bench_now();
  uint64_t started = 0, finished = 0, assigned = 0;
  for (unsigned l = 0; l < g_lanes; l++)
    lanes[l].index = l;
  for (unsigned l = 0; l < g_lanes && started < nworkers; l++) {
    uint64_t n = requests - assigned < lifetime ? requests - assigned : lifetime;
    start_worker(&lanes[l], ++started, n);
    assigned += n;
  }
  /* One post per finished worker, as in bench_churn. */
  while (finished < started) {
    while (sem_wait(&g_done_sem) != 0) {
      if (errno != EINTR) {
        perror("bench_server: sem_wait");
        return BENCH_EXIT_NULL;
      }
    }
    unsigned l = 0;
    while (l < g_lanes &&
           !(lanes[l].active && atomic_load_explicit(&lanes[l].done, memory_order_acquire)))
      l++;
    if (l == g_lanes)
      bench_check_failed("a worker signalled completion but none had finished");
    pthread_join(lanes[l].tid, NULL);
    lanes[l].active = 0;
    add_counts(&total, &lanes[l].c);
    finished++;
    if (started < nworkers) {
      uint64_t n = requests - assigned < lifetime ? requests - assigned : lifetime;
      start_worker(&lanes[l], ++started, n);
      assigned += n;
    }
  }
  double wall = bench_now() - t0;
  uint64_t peak = bench_peak_rss_bytes();

  if (started != nworkers || assigned != requests)
    bench_check_failed("started %llu workers for %llu requests, expected %llu for %llu",
                       (unsigned long long)started, (unsigned long long)assigned,
                       (unsigned long long)nworkers, (unsigned long long)requests);
  const uint64_t objects = total.allocs - fill;
  for (unsigned r = 0; r < g_lanes; r++)
    drain_mailbox(&lanes[r], &total);
  for (uint64_t s = 0; s < slots; s++) {
    uint64_t word = atomic_load_explicit(&g_cache[s], memory_order_relaxed);
    if (!word)
      bench_check_failed("cache slot %llu empty at the end", (unsigned long long)s);
    cache_free(word, "final sweep", &total);
  }
  if (total.frees != total.allocs || total.bytes_freed != total.bytes_alloc ||
      total.sent != total.received)
    bench_check_failed("%llu objects allocated (%llu bytes), %llu freed (%llu bytes); "
                       "%llu passed, %llu received",
                       (unsigned long long)total.allocs, (unsigned long long)total.bytes_alloc,
                       (unsigned long long)total.frees, (unsigned long long)total.bytes_freed,
                       (unsigned long long)total.sent, (unsigned long long)total.received);
  sem_destroy(&g_done_sem);

  if (wall <= 0)
    wall = 1e-9;
  bench_result("workload=server threads=%u requests=%llu workers=%llu objects=%llu seconds=%.4f "
               "mops=%.3f kreqs=%.2f passed_pct=%.2f evicted_pct=%.2f peak_rss_mib=%.1f notes=%u",
               g_lanes, (unsigned long long)requests, (unsigned long long)started,
               (unsigned long long)objects, wall, (double)objects / wall / 1e6,
               (double)requests / wall / 1e3, 100.0 * (double)total.sent / (double)objects,
               100.0 * (double)total.evicted / (double)objects, 
               (double)peak / (1024.0 * 1024.0), atomic_load(&g_notes_used));
  return 0;
}
