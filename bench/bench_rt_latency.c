/* Free latency: the distribution of single free() calls, each timed with
 * clock_gettime around it, in the two places where a free can enter the
 * kernel:
 *
 *   big  blocks above 256 MiB (beyond any recycle cache): each round
 *        allocates one, writes a word in each MiB of it, and frees it
 *        (timed);
 *   xt   32-byte blocks freed by a thread that did not allocate them: a
 *        producer thread allocates a batch of blocks, the measuring
 *        thread frees them one by one (timed).
 *
 * Under kamepoolalloc (found by its exported kame_pool_set_realtime_thread)
 * the rounds alternate between arms, so load changes fall on all of them:
 * "default" (the thread unmarked), "rt" (marked KAME_RT_DEFER; in the big
 * band kame_pool_rt_drain() runs after each timed free, untimed, as a
 * control loop would drain once per cycle) and, in the xt band, "strict"
 * (KAME_RT_STRICT).  Under any other allocator only "default" runs.
 * Interferer threads meanwhile allocate and free blocks of random sizes
 * (16 B .. 1 MiB) without pause.
 *
 *   bench_rt_latency -m big|xt [-n SAMPLES] [-i INTERFERERS] [-c FILE]
 *
 * SAMPLES per arm (default 300 big, 200000 xt); INTERFERERS default 1.
 * -c FILE writes every arm's sorted samples as "arm ns" lines (for a CDF).
 *
 * RESULT keys (nanoseconds; lower is better; arms that did not run are
 * absent):
 *   workload=rt_latency  band (0 big, 1 xt)  samples (per arm)
 *   p50_ns p99_ns p999_ns max_ns                 default arm
 *   rt_p50_ns rt_p99_ns rt_p999_ns rt_max_ns     rt arm
 *   st_p50_ns st_p99_ns st_p999_ns st_max_ns     strict arm (xt)
 */
#include "bench_threads.h"

#include <dlfcn.h>

#define BIG_SIZE ((size_t)300 << 20)
#define XT_SIZE 32
#define XT_BATCH 4096
#define MAX_INTERFERERS 16

enum { ARM_DEFAULT, ARM_RT, ARM_STRICT, ARMS };
static const char *const arm_name[ARMS] = {"default", "rt", "strict"};
static const char *const arm_prefix[ARMS] = {"", "rt_", "st_"};

static int (*set_rt)(int);
static size_t (*rt_drain)(void);

static atomic_int stop;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *interferer(void *arg) {
  uint64_t rng = bench_seed((uint64_t)(uintptr_t)arg);
  void *slot[64] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    unsigned i = (unsigned)bench_below(&rng, 64);
    free(slot[i]);
    size_t size = (size_t)16 << bench_below(&rng, 17); /* 16 B .. 1 MiB */
    slot[i] = malloc(size);
    if (slot[i] == NULL) exit(BENCH_EXIT_NULL);
    *(volatile char *)slot[i] = 1;
  }
  for (unsigned i = 0; i < 64; i++) free(slot[i]);
  return NULL;
}

/* ---- the cross-thread band: a producer fills batches ---------------------- */

static void *xt_blocks[XT_BATCH];
static atomic_uint xt_filled, xt_taken; /* batches produced, batches freed */

static void *producer(void *arg) {
  unsigned batches = (unsigned)(uintptr_t)arg;
  for (unsigned b = 0; b < batches; b++) {
    while (atomic_load_explicit(&xt_taken, memory_order_acquire) != b) bench_cpu_relax();
    for (unsigned i = 0; i < XT_BATCH; i++) {
      void *p = malloc(XT_SIZE);
      if (p == NULL) exit(BENCH_EXIT_NULL);
      *(volatile uint64_t *)p = ((uint64_t)b << 32) | i;
      xt_blocks[i] = p;
    }
    atomic_store_explicit(&xt_filled, b + 1, memory_order_release);
  }
  return NULL;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static uint32_t clamp_ns(uint64_t ns) { return ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns; }

int main(int argc, char **argv) {
  int band = -1;
  unsigned long samples = 0;
  unsigned interferers = 1;
  const char *cdf = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "m:n:i:c:")) != -1) {
    if (opt == 'm') band = strcmp(optarg, "big") == 0 ? 0 : strcmp(optarg, "xt") == 0 ? 1 : -1;
    else if (opt == 'n') samples = strtoul(optarg, NULL, 10);
    else if (opt == 'i') interferers = (unsigned)strtoul(optarg, NULL, 10);
    else if (opt == 'c') cdf = optarg;
    else band = -1;
  }
  if (band < 0 || interferers > MAX_INTERFERERS) {
    fprintf(stderr, "usage: bench_rt_latency -m big|xt [-n SAMPLES] [-i INTERFERERS] [-c FILE]\n");
    return BENCH_EXIT_USAGE;
  }
  if (samples == 0) samples = band == 0 ? 300 : 200000;
  set_rt = (int (*)(int))dlsym(RTLD_DEFAULT, "kame_pool_set_realtime_thread");
  rt_drain = (size_t(*)(void))dlsym(RTLD_DEFAULT, "kame_pool_rt_drain");
  unsigned arms = set_rt == NULL || rt_drain == NULL ? 1 : band == 0 ? 2 : 3;
  if (band == 1) samples = (samples + XT_BATCH - 1) / XT_BATCH * XT_BATCH;

  uint32_t *lat[ARMS];
  size_t count[ARMS] = {0};
  for (unsigned a = 0; a < arms; a++) lat[a] = bench_map_zeroed(samples * sizeof(uint32_t), "bench_rt_latency");

  pthread_t inter[MAX_INTERFERERS], prod;
  for (unsigned i = 0; i < interferers; i++) pthread_create(&inter[i], NULL, interferer, (void *)(uintptr_t)(i + 1));
  unsigned long rounds = band == 0 ? samples * arms : samples / XT_BATCH * arms;
  if (band == 1) pthread_create(&prod, NULL, producer, (void *)(uintptr_t)rounds);

  for (unsigned long r = 0; r < rounds; r++) {
    unsigned a = (unsigned)(r % arms);
    if (set_rt) set_rt(a == ARM_DEFAULT ? 0 : a == ARM_RT ? 1 : 2);
    if (band == 0) {
      char *p = malloc(BIG_SIZE);
      if (p == NULL) return BENCH_EXIT_NULL;
      for (size_t off = 0; off < BIG_SIZE; off += (size_t)1 << 20) p[off] = (char)off;
      uint64_t t0 = now_ns();
      free(p);
      uint64_t t1 = now_ns();
      lat[a][count[a]++] = clamp_ns(t1 - t0);
      if (a != ARM_DEFAULT) rt_drain(); /* the non-critical phase of the cycle */
    } else {
      while (atomic_load_explicit(&xt_filled, memory_order_acquire) != r + 1) bench_cpu_relax();
      for (unsigned i = 0; i < XT_BATCH; i++) {
        void *p = xt_blocks[i];
        if (*(volatile uint64_t *)p != (((uint64_t)r << 32) | i)) bench_check_failed("block %u of batch %lu overwritten", i, r);
        uint64_t t0 = now_ns();
        free(p);
        uint64_t t1 = now_ns();
        lat[a][count[a]++] = clamp_ns(t1 - t0);
      }
      atomic_store_explicit(&xt_taken, (unsigned)r + 1, memory_order_release);
    }
  }
  if (set_rt) set_rt(0);
  atomic_store(&stop, 1);
  if (band == 1) pthread_join(prod, NULL);
  for (unsigned i = 0; i < interferers; i++) pthread_join(inter[i], NULL);

  FILE *cf = cdf ? fopen(cdf, "w") : NULL;
  printf("RESULT workload=rt_latency band=%d samples=%lu interferers=%u", band, samples, interferers);
  for (unsigned a = 0; a < arms; a++) {
    size_t n = count[a];
    qsort(lat[a], n, sizeof(uint32_t), cmp_u32);
    printf(" %sp50_ns=%u %sp99_ns=%u %sp999_ns=%u %smax_ns=%u", arm_prefix[a], lat[a][n / 2], arm_prefix[a],
           lat[a][n * 99 / 100], arm_prefix[a], lat[a][n * 999 / 1000], arm_prefix[a], lat[a][n - 1]);
    if (cf)
      for (size_t i = 0; i < n; i++) fprintf(cf, "%s %u\n", arm_name[a], lat[a][i]);
  }
  printf("\n");
  if (cf) fclose(cf);
  return 0;
}
