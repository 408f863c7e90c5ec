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
#include <malloc.h>
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

#if BROKEN_MODE == BROKEN_OVERLAP
static _Atomic(void *) last;

/* A block that may be handed out twice is never given back to the C
 * library: both holders free it, and the second free (or one holder's
 * write after the other's free) would corrupt the C library's heap and
 * could crash the program before its self-check saw the overlap, which is
 * what this mode is for.  So such a block is first kept, in an open
 * addressing set that free looks in. */
#define KEPT_SLOTS 65536
static _Atomic(void *) kept[KEPT_SLOTS];

static size_t kept_hash(void *p) { return ((size_t)p >> 4) * 0x9E3779B1u % KEPT_SLOTS; }

static int keep(void *p) {
  size_t i = kept_hash(p);
  for (size_t probes = 0; probes < KEPT_SLOTS; probes++, i = (i + 1) % KEPT_SLOTS) {
    void *empty = NULL;
    if (atomic_compare_exchange_strong(&kept[i], &empty, p))
      return 1;
  }
  return 0; /* full: this block is not handed out again */
}

static int is_kept(void *p) {
  size_t i = kept_hash(p);
  for (size_t probes = 0; probes < KEPT_SLOTS; probes++, i = (i + 1) % KEPT_SLOTS) {
    void *e = atomic_load(&kept[i]);
    if (e == p)
      return 1;
    if (e == NULL)
      return 0;
  }
  return 0;
}
#endif

void *malloc(size_t size) {
  unsigned long n = atomic_fetch_add(&calls, 1) + 1;
  if (n > BROKEN_AFTER && n % 1000 == 0) {
#if BROKEN_MODE == BROKEN_OVERLAP
    /* Only where the request fits: a longer one written past the block's
     * end would corrupt the C library's heap, and the program could die
     * of that before its self-check saw the overlap.  A block too short
     * waits for a later misbehaving call. */
    void *again = atomic_exchange(&last, NULL);
    if (again && malloc_usable_size(again) >= size)
      return again;
    if (again)
      atomic_store(&last, again);
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
#if BROKEN_MODE == BROKEN_OVERLAP
  /* The block before each misbehaving call is the one it hands out again. */
  if (p && n >= BROKEN_AFTER && n % 1000 == 999 && keep(p))
    atomic_store(&last, p);
#endif
  return p;
}

void free(void *p) {
#if BROKEN_MODE == BROKEN_OVERLAP
  if (p && is_kept(p))
    return;
#endif
  __libc_free(p);
}
