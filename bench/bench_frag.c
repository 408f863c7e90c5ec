/* Fragmentation and memory return, one thread.
 *
 * Models a program that builds a large population of small objects, drops
 * most of them, then grows a population of another size: the classic case
 * where an allocator that keeps sizes apart cannot reuse the space the first
 * population left behind, because each of its pages still holds a few
 * survivors.
 *
 *   phase 1  allocate N blocks of SIZE_A bytes, stamp each;
 *   phase 2  free a random 90 % of them (exactly N*9/10, chosen from a
 *            fixed seed), checking each before it goes;
 *   phase 3  allocate blocks of SIZE_B until as many bytes are allocated
 *            as phase 2 freed, stamp each.
 * Then every live block is checked, memory is measured before and after
 * malloc_trim(0), everything is freed (checked) and memory measured again.
 *
 * Defaults: SIZE_A 48, SIZE_B 256, N such that phase 1 holds 256 MiB.
 * 48 and 256 are exact size classes in every common segregated allocator
 * (so rounding does not blur the figure) and no scheme puts them in one
 * class; 256 B also fits in a hole of five coalesced 48-byte chunks, so an
 * allocator that merges free neighbours can reuse the holes.  Blocks are
 * kept on lists threaded through the blocks themselves, so the program's
 * own bookkeeping adds nothing to the resident set; sizes must therefore be
 * at least 24 bytes (head stamp, link, tail stamp).
 *
 * malloc_trim is glibc's; an allocator put in with LD_PRELOAD that defines
 * it (kamepoolalloc does) replaces it, for others glibc's runs on its own
 * idle heap and does nothing useful or harmful.
 *
 *   bench_frag [-n BLOCKS] [-a SIZE_A] [-b SIZE_B] [-s SEED]
 *
 * RESULT keys:
 *   workload=frag threads=1 blocks=N size_a=bytes size_b=bytes
 *   live_mib       payload held at the end of phase 3 (MiB)
 *   rss_full_mib   resident set after phase 1 (MiB)
 *   rss_end_mib    resident set after phase 3 (MiB)
 *   rss_trim_mib   resident set after phase 3 and malloc_trim(0) (MiB)
 *   rss_freed_mib  resident set after freeing all and malloc_trim(0) (MiB)
 *   peak_rss_mib   peak resident set of the run (MiB)
 *   seconds        wall time of phases 1-3 (s)
 *   blowup         rss_trim / live (ratio; 1 is perfect, lower is better)
 */
#include "bench_common.h"

#include <getopt.h>
#include <malloc.h>

#define MIB (1024.0 * 1024.0)
#define SALT_A 0x6a09e667f3bcc908ull
#define SALT_B 0xbb67ae8584caa73bull

/* Block layout: word 0 and the last word are the stamp (bench_stamp), word
 * 1 links to the next block of the same population. */
#define LINK_OFF 8
#define MIN_SIZE 24

static size_t g_size_a = 48, g_size_b = 256;

/* The tag depends on the block's address, so a block handed out twice or
 * overlapping another shows up as a foreign stamp. */
static inline uint64_t tag_of(const void *p, uint64_t salt) {
  return bench_seed((uint64_t)(uintptr_t)p ^ salt);
}

static inline void *next_of(const void *p) {
  void *n;
  memcpy(&n, (const char *)p + LINK_OFF, sizeof n);
  return n;
}

static inline void set_next(void *p, void *n) { memcpy((char *)p + LINK_OFF, &n, sizeof n); }

/* Walks a population, checking every block; returns how many it holds. */
static uint64_t verify_list(void *head, size_t size, uint64_t salt, const char *what) {
  uint64_t n = 0;
  for (void *p = head; p; p = next_of(p)) {
    bench_check_stamp(p, size, tag_of(p, salt), what);
    n++;
  }
  return n;
}

static void free_list(void *head, size_t size, uint64_t salt, uint64_t expect, const char *what) {
  uint64_t n = 0;
  while (head) {
    void *next;
    bench_check_stamp(head, size, tag_of(head, salt), what);
    next = next_of(head);
    free(head);
    head = next;
    n++;
  }
  if (n != expect)
    bench_check_failed("%s: freed %llu blocks, expected %llu", what, (unsigned long long)n,
                       (unsigned long long)expect);
}

static __attribute__((noreturn)) void usage(void) {
  fprintf(stderr, "usage: bench_frag [-n BLOCKS] [-a SIZE_A] [-b SIZE_B] [-s SEED]\n"
                  "  sizes %d B to 1 GiB; BLOCKS >= 1 (default: 256 MiB / SIZE_A)\n",
          MIN_SIZE);
  exit(BENCH_EXIT_USAGE);
}

static size_t parse_size(const char *s) {
  uint64_t v;
  if (bench_parse_u64(s, &v) || v < MIN_SIZE || v > (1ull << 30))
    usage();
  return (size_t)v;
}

int main(int argc, char **argv) {
  uint64_t nblocks = 0, seed = 1;
  int opt;

  while ((opt = getopt(argc, argv, "n:a:b:s:")) != -1) {
    switch (opt) {
    case 'n':
      if (bench_parse_u64(optarg, &nblocks) || nblocks == 0)
        usage();
      break;
    case 'a': g_size_a = parse_size(optarg); break;
    case 'b': g_size_b = parse_size(optarg); break;
    case 's':
      if (bench_parse_u64(optarg, &seed))
        usage();
      break;
    default: usage();
    }
  }
  if (optind != argc)
    usage();
  if (nblocks == 0)
    nblocks = (256ull << 20) / g_size_a;
  /* A bound well past any real machine keeps the byte counts exact. */
  if (nblocks > (1ull << 40) / g_size_a)
    usage();

  const size_t a = g_size_a, b = g_size_b;
  /* What parse_size guarantees; keeps the compiler's range checks quiet. */
  if (a < MIN_SIZE || b < MIN_SIZE)
    __builtin_unreachable();
  uint64_t rng = bench_seed(seed);
  void *list_a = NULL, *list_b = NULL;
  double t0 = bench_now();

  /* Phase 1: the first population, kept in allocation order. */
  void **link = &list_a;
  for (uint64_t i = 0; i < nblocks; i++) {
    void *p = bench_malloc(a);
    bench_stamp(p, a, tag_of(p, SALT_A));
    set_next(p, NULL);
    *link = p;
    link = (void **)((char *)p + LINK_OFF);
  }
  uint64_t rss_full = bench_rss_bytes();

  /* Phase 2: selection sampling frees exactly nfree of the N blocks, each
   * with equal chance, in one pass over the list. */
  const uint64_t nfree = nblocks * 9 / 10;
  uint64_t remaining = nblocks, want = nfree;
  link = &list_a;
  while (*link) {
    void *p = *link;
    if (remaining == 0)
      bench_check_failed("phase 2: more than %llu blocks on the list",
                         (unsigned long long)nblocks);
    bench_check_stamp(p, a, tag_of(p, SALT_A), "phase 2");
    if (bench_below(&rng, remaining) < want) {
      *link = next_of(p);
      free(p);
      want--;
    } else {
      link = (void **)((char *)p + LINK_OFF);
    }
    remaining--;
  }
  if (remaining != 0 || want != 0)
    bench_check_failed("phase 2: list held %llu of %llu blocks",
                       (unsigned long long)(nblocks - remaining), (unsigned long long)nblocks);

  /* Phase 3: the second population, as many bytes as were freed. */
  const uint64_t freed_bytes = nfree * a;
  uint64_t nb = 0, allocated = 0;
  while (allocated < freed_bytes) {
    void *p = bench_malloc(b);
    bench_stamp(p, b, tag_of(p, SALT_B));
    set_next(p, list_b);
    list_b = p;
    allocated += b;
    nb++;
  }
  double seconds = bench_now() - t0;

  const uint64_t survivors = nblocks - nfree;
  uint64_t n;
  if ((n = verify_list(list_a, a, SALT_A, "end, first population")) != survivors)
    bench_check_failed("end: %llu first-population blocks, expected %llu",
                       (unsigned long long)n, (unsigned long long)survivors);
  if ((n = verify_list(list_b, b, SALT_B, "end, second population")) != nb)
    bench_check_failed("end: %llu second-population blocks, expected %llu",
                       (unsigned long long)n, (unsigned long long)nb);
  const uint64_t live = survivors * a + nb * b;

  uint64_t rss_end = bench_rss_bytes();
  malloc_trim(0);
  uint64_t rss_trim = bench_rss_bytes();
  uint64_t peak = bench_peak_rss_bytes();

  free_list(list_a, a, SALT_A, survivors, "free, first population");
  free_list(list_b, b, SALT_B, nb, "free, second population");
  malloc_trim(0);
  uint64_t rss_freed = bench_rss_bytes();

  bench_result("workload=frag threads=1 blocks=%llu size_a=%zu size_b=%zu live_mib=%.1f "
               "rss_full_mib=%.1f rss_end_mib=%.1f rss_trim_mib=%.1f rss_freed_mib=%.1f "
               "peak_rss_mib=%.1f seconds=%.4f blowup=%.2f",
               (unsigned long long)nblocks, a, b, (double)live / MIB, (double)rss_full / MIB,
               (double)rss_end / MIB, (double)rss_trim / MIB, (double)rss_freed / MIB,
               (double)peak / MIB, seconds, live ? (double)rss_trim / (double)live : 0.0);
  return 0;
}
