/* Memory return when the thread that allocated is alive but idle.
 *
 * Thread A (the owner) allocates MIB MiB of small blocks and hands them
 * all to thread B, which checks and frees every one while A waits,
 * blocked, doing nothing: a worker that built a large structure, passed it
 * on and went quiet, or a thread pool whose threads sleep between bursts.
 * Then B calls malloc_trim(0), then A does, then A exits.  The main thread
 * only gives the orders and reads the resident set after each phase.  An
 * allocator whose per-thread state keeps freed memory until its owner next
 * allocates holds on to all of it while A sleeps; one whose trim reaches
 * only the calling thread's memory does not help until A itself trims.
 *
 *   bench_idle_owner [-m MIB] [-a MIN] [-b MAX]
 *
 * Defaults: 512 MiB of blocks whose sizes spread evenly over the powers of
 * two from MIN = 32 B to MAX = 256 B (exclusive; powers of two, MIN at
 * least 32), uniform within each.  The blocks form a list threaded through
 * themselves, so the program keeps no bookkeeping of its own in the heap.
 * malloc_trim is glibc's unless the allocator put in with LD_PRELOAD
 * defines it (kamepoolalloc does); glibc's then trims its own idle heap,
 * harmlessly.
 *
 * RESULT keys (sizes in MiB):
 *   workload=idle_owner threads=2 blocks
 *   live_mib            bytes A allocated: the live set before the frees
 *   rss_base_mib        resident set before A allocates (both threads up)
 *   rss_full_mib        after A has allocated everything
 *   rss_freed_mib       after B has freed everything, A idle
 *   rss_trim_other_mib  then after malloc_trim(0) called by B
 *   rss_trim_owner_mib  then after malloc_trim(0) called by A
 *   rss_exit_mib        then after A has exited
 *   held_mib            rss_trim_other - rss_base: what the process still
 *                       holds after the frees and one trim, beyond what it
 *                       held before it allocated (lower is better)
 *   alloc_seconds, free_seconds   wall time of A's allocations, B's frees
 *
 * Each block carries the tag (sequence << 16 | (size - 1)) at its head and
 * its complement at its tail, and the next block's address after the tag;
 * B expects the sequence in order, so a block lost, handed out twice or
 * overwritten fails the self-check (exit 3).
 */
#include "bench_threads.h"

#include <malloc.h>
#include <semaphore.h>

#define MIB (1024.0 * 1024.0)
#define LINK_OFF 8
#define MIN_SIZE 32

enum order { ALLOCATE, FREE, TRIM, QUIT };

struct actor {
  pthread_t tid;
  sem_t go;
  enum order order;
};

static struct actor g_owner, g_freer;
static sem_t g_done;
static uint64_t g_bytes, g_blocks, g_live;
static unsigned g_min_log, g_octaves;
static void *g_list;
static double g_alloc_seconds, g_free_seconds;

static inline void *next_of(const void *p) {
  void *n;
  memcpy(&n, (const char *)p + LINK_OFF, sizeof n);
  return n;
}

static void allocate_all(void) {
  uint64_t rng = bench_seed(1), seq = 0, live = 0;
  void *head = NULL, **link = &head;
  double t0 = bench_now();
  while (live < g_bytes) {
    uint64_t base = 1ull << (g_min_log + bench_below(&rng, g_octaves));
    size_t size = (size_t)(base + bench_below(&rng, base));
    void *p = bench_malloc(size);
    bench_stamp(p, size, seq++ << 16 | (uint64_t)(size - 1));
    memset((char *)p + LINK_OFF, 0, sizeof(void *));
    *link = p;
    link = (void **)((char *)p + LINK_OFF);
    live += size;
  }
  g_alloc_seconds = bench_now() - t0;
  g_list = head;
  g_blocks = seq;
  g_live = live;
}

static void free_all(void) {
  uint64_t seq = 0, bytes = 0;
  double t0 = bench_now();
  for (void *p = g_list; p;) {
    uint64_t tag;
    memcpy(&tag, p, 8);
    size_t size = (size_t)(tag & 0xffff) + 1;
    if (__builtin_expect(tag >> 16 != seq, 0))
      bench_check_failed("block %p carries tag %#llx, expected sequence %llu", p,
                         (unsigned long long)tag, (unsigned long long)seq);
    bench_check_stamp(p, size, tag, "free");
    void *next = next_of(p);
    free(p);
    bytes += size;
    seq++;
    p = next;
  }
  g_free_seconds = bench_now() - t0;
  g_list = NULL;
  if (seq != g_blocks || bytes != g_live)
    bench_check_failed("freed %llu blocks (%llu bytes), %llu (%llu bytes) were allocated",
                       (unsigned long long)seq, (unsigned long long)bytes,
                       (unsigned long long)g_blocks, (unsigned long long)g_live);
}

static void sem_wait_all(sem_t *s) {
  while (sem_wait(s) != 0) {
    if (errno != EINTR) {
      perror("bench_idle_owner: sem_wait");
      exit(BENCH_EXIT_NULL);
    }
  }
}

/* Both threads sleep on their semaphore between orders: idle, not
 * spinning, and making no allocator calls. */
static void *actor_main(void *arg) {
  struct actor *a = arg;
  for (;;) {
    sem_wait_all(&a->go);
    switch (a->order) {
    case ALLOCATE: allocate_all(); break;
    case FREE: free_all(); break;
    case TRIM: malloc_trim(0); break;
    case QUIT: return NULL;
    }
    sem_post(&g_done);
  }
}

/* Gives A or B an order and waits until it is carried out. */
static void order(struct actor *a, enum order o) {
  a->order = o;
  sem_post(&a->go);
  if (o != QUIT)
    sem_wait_all(&g_done);
}

static unsigned log2_exact(uint64_t v) {
  if (v == 0 || (v & (v - 1)))
    return 64;
  return (unsigned)__builtin_ctzll(v);
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_idle_owner [-m MIB] [-a MIN] [-b MAX]\n"
                  "  MIN and MAX powers of two, %d <= MIN < MAX <= 64K\n", MIN_SIZE);
  exit(BENCH_EXIT_USAGE);
}

int main(int argc, char **argv) {
  uint64_t mib = 512, min = 32, max = 256;
  int opt;
  while ((opt = getopt(argc, argv, "m:a:b:")) != -1) {
    uint64_t *dst;
    switch (opt) {
    case 'm': dst = &mib; break;
    case 'a': dst = &min; break;
    case 'b': dst = &max; break;
    default: usage();
    }
    if (bench_parse_u64(optarg, dst) != 0)
      usage();
  }
  g_min_log = log2_exact(min);
  unsigned max_log = log2_exact(max);
  if (optind != argc || mib < 1 || mib > (1u << 20) || min < MIN_SIZE || max_log > 16 ||
      g_min_log >= max_log)
    usage();
  g_octaves = max_log - g_min_log;
  g_bytes = mib << 20;

  if (sem_init(&g_done, 0, 0) || sem_init(&g_owner.go, 0, 0) || sem_init(&g_freer.go, 0, 0)) {
    perror("bench_idle_owner: sem_init");
    return BENCH_EXIT_NULL;
  }
  struct actor *both[2] = {&g_owner, &g_freer};
  for (int i = 0; i < 2; i++) {
    int rc = pthread_create(&both[i]->tid, NULL, actor_main, both[i]);
    if (rc) {
      fprintf(stderr, "bench_idle_owner: pthread_create: %s\n", strerror(rc));
      return BENCH_EXIT_NULL;
    }
  }

  uint64_t rss_base = bench_rss_bytes();
  order(&g_owner, ALLOCATE);
  uint64_t rss_full = bench_rss_bytes();
  order(&g_freer, FREE);
  uint64_t rss_freed = bench_rss_bytes();
  order(&g_freer, TRIM);
  uint64_t rss_trim_other = bench_rss_bytes();
  order(&g_owner, TRIM);
  uint64_t rss_trim_owner = bench_rss_bytes();
  order(&g_owner, QUIT);
  pthread_join(g_owner.tid, NULL);
  uint64_t rss_exit = bench_rss_bytes();
  order(&g_freer, QUIT);
  pthread_join(g_freer.tid, NULL);

  bench_result("workload=idle_owner threads=2 blocks=%llu live_mib=%.1f rss_base_mib=%.1f "
               "rss_full_mib=%.1f rss_freed_mib=%.1f rss_trim_other_mib=%.1f "
               "rss_trim_owner_mib=%.1f rss_exit_mib=%.1f held_mib=%.1f alloc_seconds=%.4f "
               "free_seconds=%.4f",
               (unsigned long long)g_blocks, (double)g_live / MIB, (double)rss_base / MIB,
               (double)rss_full / MIB, (double)rss_freed / MIB, (double)rss_trim_other / MIB,
               (double)rss_trim_owner / MIB, (double)rss_exit / MIB,
               ((double)rss_trim_other - (double)rss_base) / MIB, g_alloc_seconds, g_free_seconds);
  return 0;
}
