/* The system allocator on Linux (glibc and musl), for pointers the pool
 * did not allocate and for requests past the pool's byte ceiling.
 *
 * Without the override, the system allocator is simply the C library's
 * malloc.  With it, `malloc` is ours, so the next definition in the
 * lookup order (the C library's) is found with dlsym(RTLD_NEXT) the first
 * time it is needed; both C libraries answer that for a preloaded or
 * linked shared library.  dlsym may allocate; those allocations are
 * served by the pool, so the lookup never needs itself.  Only interfaces
 * both C libraries have are used (aligned_alloc, malloc_usable_size).
 * Aligned requests go to aligned_alloc, not posix_memalign or memalign:
 * musl implements those two by calling aligned_alloc by its public name,
 * which is the pool's, and the fallback would call itself.
 *
 * In a statically linked musl program whose malloc is the pool's, there
 * is no other allocator (musl's static dlsym finds nothing): requests
 * past the ceiling fail with ENOMEM and the C library never hands the
 * program a pointer of its own allocator to free. */
#include "internal.h"

#include <malloc.h>
#include <stdlib.h>

#ifdef KP_OVERRIDE
#include <dlfcn.h>

typedef struct {
  void *(*malloc)(size_t);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void (*free)(void *);
  size_t (*usable_size)(void *);
} kp_sys_table;

static kp_sys_table sys;
static _Atomic int sys_state; /* 0: not looked up, 1: being looked up, 2: done */

static void sys_lookup(kp_sys_table *t) {
  t->malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  t->calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  t->realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  t->aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  t->free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  t->usable_size = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
}

/* One thread fills the shared table; one that finds it being filled looks
 * the functions up into `local` instead of waiting. */
static KP_THREAD_LOCAL int in_lookup;

static const kp_sys_table *sys_get(kp_sys_table *local) {
  int state = kp_load_acquire(&sys_state);
  if (state == 2) return &sys;
  if (in_lookup) {
    /* dlsym allocated, and the pool sent that to us (past its ceiling):
     * that request fails rather than recursing. */
    *local = (kp_sys_table){0};
    return local;
  }
  in_lookup = 1;
  const kp_sys_table *t = local;
  if (state == 0 && atomic_compare_exchange_strong(&sys_state, &state, 1)) {
    sys_lookup(&sys);
    kp_store_release(&sys_state, 2);
    t = &sys;
  } else {
    sys_lookup(local);
  }
  in_lookup = 0;
  return t;
}

/* Looked up once the C library is initialised, so that later uses (a
 * foreign free, say) do not pay for dlsym. */
__attribute__((constructor)) static void sys_lookup_early(void) {
  kp_sys_table local;
  sys_get(&local);
}

void *kp_sys_malloc(size_t size) {
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  return t->malloc ? t->malloc(size) : NULL;
}
void *kp_sys_calloc(size_t count, size_t size) {
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  return t->calloc ? t->calloc(count, size) : NULL;
}
void *kp_sys_realloc(void *p, size_t size) {
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  return t->realloc ? t->realloc(p, size) : NULL;
}
void *kp_sys_memalign(size_t align, size_t size) {
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  return t->aligned_alloc ? t->aligned_alloc(align, size) : NULL;
}
void kp_sys_free(void *p) {
  int saved = errno;
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  if (t->free) t->free(p);
  errno = saved;
}
size_t kp_sys_usable_size(void *p) {
  kp_sys_table local;
  const kp_sys_table *t = sys_get(&local);
  return t->usable_size ? t->usable_size(p) : 0;
}

#else

void *kp_sys_malloc(size_t size) { return malloc(size); }
void *kp_sys_calloc(size_t count, size_t size) { return calloc(count, size); }
void *kp_sys_realloc(void *p, size_t size) { return realloc(p, size); }
void *kp_sys_memalign(size_t align, size_t size) {
  void *p = NULL;
  int saved = errno;
  int rc = posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size);
  errno = saved;
  return rc == 0 ? p : NULL;
}
void kp_sys_free(void *p) {
  int saved = errno;
  free(p);
  errno = saved;
}
size_t kp_sys_usable_size(void *p) { return malloc_usable_size(p); }

#endif
