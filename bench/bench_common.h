/* What every benchmark workload shares: clocks, a fast random generator,
 * block stamping and checking, memory figures from /proc, and the one
 * output line the runner reads.
 *
 * A workload is an ordinary program that allocates through malloc/free,
 * so whatever allocator the process has (the C library's or one put in
 * with LD_PRELOAD) is what it measures.  Its contract with the runner:
 *
 *   - the last line on stdout starting "RESULT " holds the figures as
 *     key=value pairs (keys are lower-case identifiers, values numbers);
 *   - exit status 0: success; 1: malloc returned NULL; 2: bad usage;
 *     3: a self-check failed (a block lost, overwritten or mixed up), in
 *     which case the figures mean nothing and the runner says so.
 *
 * Workloads are built with -fno-builtin-malloc -fno-builtin-free so the
 * compiler keeps every call.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BENCH_EXIT_NULL 1
#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_CHECK 3

#define BENCH_UNUSED __attribute__((unused))

static BENCH_UNUSED double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* User plus system CPU time of the whole process, all threads. */
static BENCH_UNUSED double bench_cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* xorshift64*: small, fast, good enough to pick sizes and slots.  Each
 * thread keeps its own state; a zero state is replaced by a constant. */
static inline uint64_t bench_rand(uint64_t *state) {
  uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* Uniform in [0, n) without a division (Lemire's multiply-shift). */
static inline uint64_t bench_below(uint64_t *state, uint64_t n) {
  return (uint64_t)(((unsigned __int128)bench_rand(state) * n) >> 64);
}

/* A seed that differs per thread index but is the same from run to run,
 * so every allocator sees the same sequence of requests. */
static inline uint64_t bench_seed(uint64_t index) {
  uint64_t z = (index + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static BENCH_UNUSED __attribute__((noreturn, format(printf, 1, 2))) void
bench_check_failed(const char *fmt, ...) {
  va_list ap;
  fputs("SELF-CHECK FAILED: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(BENCH_EXIT_CHECK);
}

static BENCH_UNUSED __attribute__((noreturn)) void bench_null(size_t size) {
  fprintf(stderr, "malloc(%zu) returned NULL: %s\n", size, strerror(errno));
  fflush(stderr);
  _exit(BENCH_EXIT_NULL);
}

static inline void *bench_malloc(size_t size) {
  void *p = malloc(size);
  if (__builtin_expect(p == NULL, 0))
    bench_null(size);
  return p;
}

/* Stamps a block of SIZE bytes (SIZE >= 8) with TAG: the first word holds
 * the tag and, when there is room, the last word holds its complement.
 * Touching both ends makes the allocator's pages real and catches a block
 * handed out twice or overlapping another. */
static inline void bench_stamp(void *p, size_t size, uint64_t tag) {
  memcpy(p, &tag, 8);
  if (size >= 16) {
    uint64_t inv = ~tag;
    memcpy((char *)p + size - 8, &inv, 8);
  }
}

/* Returns nonzero when the block still carries TAG at both ends. */
static inline int bench_stamp_ok(const void *p, size_t size, uint64_t tag) {
  uint64_t head, tail;
  memcpy(&head, p, 8);
  if (head != tag)
    return 0;
  if (size >= 16) {
    memcpy(&tail, (const char *)p + size - 8, 8);
    if (tail != ~tag)
      return 0;
  }
  return 1;
}

static inline void bench_check_stamp(const void *p, size_t size, uint64_t tag, const char *what) {
  if (__builtin_expect(!bench_stamp_ok(p, size, tag), 0))
    bench_check_failed("%s: block %p of %zu bytes lost its stamp %#llx", what, p, size,
                       (unsigned long long)tag);
}

/* Big blocks are used as a program would use a buffer: every page gets
 * written once, so the allocator's choice between handing back warm pages
 * and mapping fresh ones (a page fault each) shows in the figure.  Word 0
 * and the last word hold the stamp (bench_stamp); every further 4 KiB page
 * of the address space that the block covers gets one word, the tag mixed
 * with the page's index, in the middle of the page.
 *
 * The word sits at the same place in its page whatever the block's own
 * alignment.  A word at the block's offset would put it at a page's first
 * or last line for a page-aligned block and mid-page for a block that
 * starts mid-page; on the Intel host of docs/benchmarks.md a store to line
 * 0, 1 or 63 of every page in turn costs twice a store to another line, so
 * the figure would have measured where each allocator starts its blocks
 * rather than the warmth of their pages.  SIZE must be at least 16. */
#define BENCH_PAGE 4096u

static inline uint64_t bench_page_word(uint64_t tag, size_t page) {
  return tag ^ ((uint64_t)page * 0x9e3779b97f4a7c15ull);
}

/* The start of the page that holds the block's first byte. */
static inline uintptr_t bench_first_page(const void *p) {
  return (uintptr_t)p & ~(uintptr_t)(BENCH_PAGE - 1);
}

/* Where page K's word lives: the middle of the Kth page after the first. */
static inline uint64_t *bench_page_word_at(const void *p, size_t k) {
  return (uint64_t *)(bench_first_page(p) + k * BENCH_PAGE + BENCH_PAGE / 2);
}

/* Pages 1 .. n-1 carry a word; the last such word ends before the tail
 * stamp's word, and the pages before the first and after the last word are
 * the ones the stamps touch. */
static inline size_t bench_page_words(const void *p, size_t size) {
  uintptr_t first_page = bench_first_page(p);
  uintptr_t last_word = (uintptr_t)p + size - 16;
  if (last_word < first_page + BENCH_PAGE + BENCH_PAGE / 2)
    return 1;
  return (last_word - first_page - BENCH_PAGE / 2) / BENCH_PAGE + 1;
}

static inline void bench_touch_pages(void *p, size_t size, uint64_t tag) {
  const size_t n = bench_page_words(p, size);
  for (size_t k = 1; k < n; k++)
    *(volatile uint64_t *)bench_page_word_at(p, k) = bench_page_word(tag, k);
  bench_stamp(p, size, tag);
}

/* Checks the stamp and SAMPLES page words spread over the block (all of
 * them if it has fewer), so reading back costs little beside the writes. */
static inline void bench_check_pages(const void *p, size_t size, uint64_t tag, size_t samples,
                                     const char *what) {
  bench_check_stamp(p, size, tag, what);
  const size_t n = bench_page_words(p, size);
  if (n < 2)
    return;
  const size_t step = (n - 1) / samples ? (n - 1) / samples : 1;
  for (size_t k = 1; k < n; k += step) {
    uint64_t w = *(const volatile uint64_t *)bench_page_word_at(p, k);
    if (__builtin_expect(w != bench_page_word(tag, k), 0))
      bench_check_failed("%s: block %p of %zu bytes, page %zu holds %#llx, expected %#llx", what, p,
                         size, k, (unsigned long long)w,
                         (unsigned long long)bench_page_word(tag, k));
  }
}

/* Resident set now, in bytes (/proc/self/statm), or 0 if unreadable. */
static BENCH_UNUSED uint64_t bench_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (!f)
    return 0;
  if (fscanf(f, "%llu %llu", &size, &resident) != 2)
    resident = 0;
  fclose(f);
  return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Peak resident set so far, in bytes (VmHWM), or 0 if unreadable. */
static BENCH_UNUSED uint64_t bench_peak_rss_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kib = 0;
  if (!f)
    return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %llu kB", &kib) == 1)
      break;
  fclose(f);
  return (uint64_t)kib * 1024;
}

/* Parses a count or size with an optional K/M/G suffix (powers of 1024
 * for sizes, so "64K" is 65536; "1M" as a count is 1048576 too). */
static BENCH_UNUSED int bench_parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s)
    return -1;
  switch (*end) {
  case 'k': case 'K': v <<= 10; end++; break;
  case 'm': case 'M': v <<= 20; end++; break;
  case 'g': case 'G': v <<= 30; end++; break;
  default: break;
  }
  if (*end && strcmp(end, "B") != 0 && strcmp(end, "iB") != 0)
    return -1;
  *out = (uint64_t)v;
  return 0;
}

/* Prints the RESULT line: "RESULT " followed by the caller's key=value
 * pairs, then flushes, since the runner reads it after exit. */
static BENCH_UNUSED __attribute__((format(printf, 1, 2))) void bench_result(const char *fmt, ...) {
  va_list ap;
  fputs("RESULT ", stdout);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

#endif
