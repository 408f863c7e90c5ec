/* A deliberately broken allocator for testing the benchmark runner: put in
 * with LD_PRELOAD, it serves malloc from the C library's allocator and, once
 * BROKEN_AFTER calls have gone by, misbehaves in the way chosen when it was
 * compiled (-DBROKEN_MODE=...):
 *
 *   BROKEN_OVERLAP  hands out the previous, still live block a second time
 *   BROKEN_CRASH    dies of SIGSEGV
 *   BROKEN_HANG     never returns
 *   BROKEN_NULL     returns NULL
 *
 * The runner must show each as such (a failed self-check, a crash, a
 * timeout, a NULL from malloc) and never as a figure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <unistd.h>

#define BROKEN_OVERLAP 1
#define BROKEN_CRASH 2
#define BROKEN_HANG 3
#define BROKEN_NULL 4

#ifndef BROKEN_MODE
#error "compile with -DBROKEN_MODE=BROKEN_OVERLAP, _CRASH, _HANG or _NULL"
#endif
#define BROKEN_AFTER 20000

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

static atomic_ulong calls;
static _Atomic(void *) last;

void *malloc(size_t size) {
  unsigned long n = atomic_fetch_add(&calls, 1) + 1;
  if (n > BROKEN_AFTER && n % 1000 == 0) {
#if BROKEN_MODE == BROKEN_OVERLAP
    void *again = atomic_load(&last);
    if (again)
      return again;
#elif BROKEN_MODE == BROKEN_CRASH
    raise(SIGSEGV);
#elif BROKEN_MODE == BROKEN_HANG
    for (;;)
      pause();
#elif BROKEN_MODE == BROKEN_NULL
    errno = ENOMEM;
    return NULL;
#endif
  }
  void *p = __libc_malloc(size);
  atomic_store(&last, p);
  return p;
}

void free(void *p) {
  /* A freed block is no longer live: it must not be handed out again. */
  void *expected = p;
  if (p)
    atomic_compare_exchange_strong(&last, &expected, NULL);
  __libc_free(p);
}
