/* What the threaded workloads share: waiting (pause, futex), memory for
 * their own transport and bookkeeping that the allocator under test never
 * sees, and starting a thread pinned to a CPU.
 */
#ifndef BENCH_THREADS_H
#define BENCH_THREADS_H

#include "bench_common.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static inline void bench_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  __asm__ volatile("" ::: "memory");
#endif
}

/* Sleeps while *WORD still holds VAL (or returns at once if it does not). */
static BENCH_UNUSED void bench_futex_wait(atomic_uint *word, unsigned val) {
  syscall(SYS_futex, (void *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

/* Wakes up to COUNT threads sleeping on WORD. */
static BENCH_UNUSED void bench_futex_wake(atomic_uint *word, int count) {
  syscall(SYS_futex, (void *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

/* Zeroed memory straight from mmap, for a workload's own rings and
 * bookkeeping: the allocator under test neither serves nor counts it. */
static BENCH_UNUSED void *bench_map_zeroed(size_t bytes, const char *who) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "%s: mmap(%zu): %s\n", who, bytes, strerror(errno));
    exit(BENCH_EXIT_NULL);
  }
  return p;
}

/* Starts a thread on CPU slot SLOT of the allowed set CPUS (wrapping
 * round), or anywhere if CPUS is NULL; a refused pin only loses
 * determinism, so the thread then runs unpinned. */
static BENCH_UNUSED int bench_start_thread(pthread_t *tid, void *(*fn)(void *), void *arg,
                                           const cpu_set_t *cpus, unsigned slot) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (cpus) {
    unsigned count = (unsigned)CPU_COUNT(cpus), want = slot % count, seen = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
      if (!CPU_ISSET(c, cpus))
        continue;
      if (seen++ == want) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        break;
      }
    }
  }
  int rc = pthread_create(tid, &attr, fn, arg);
  if (rc && cpus)
    rc = pthread_create(tid, NULL, fn, arg);
  pthread_attr_destroy(&attr);
  return rc;
}

#endif
