/* The pool put into an unmodified program with LD_PRELOAD.  This program is
 * not linked against the library; ctest runs it with
 * LD_PRELOAD=libkamepoolalloc.so.  It checks that the pool took over the
 * malloc family, that pointers it never allocated (glibc's own, from
 * before main) pass through its free/realloc safely, and that dlopen,
 * threads, errno and fork behave as in any program.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_pass, g_fail;

#define CHECK(name, cond, fmt, ...)                                                  \
  do {                                                                               \
    if (cond) {                                                                      \
      g_pass++;                                                                      \
    } else {                                                                         \
      g_fail++;                                                                      \
      fprintf(stderr, "FAIL %s (%s:%d): %s; " fmt "\n", name, __FILE__, __LINE__,    \
              #cond, __VA_ARGS__);                                                   \
    }                                                                                \
  } while (0)

/* Fills p[0..n) with a pattern derived from seed, and checks it back. */
static void fill(void *p, size_t n, unsigned seed) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(seed + i * 131u);
}

static size_t first_bad(const void *p, size_t n, unsigned seed) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(seed + i * 131u))
      return i;
  return (size_t)-1;
}

/* ---- allocated before main ------------------------------------------- */

static char *g_early_str;
static void *g_early_block;
static void *g_early_big;

__attribute__((constructor)) static void early_alloc(void) {
  g_early_str = strdup("allocated by a constructor before main");
  g_early_block = malloc(300);
  if (g_early_block)
    fill(g_early_block, 300, 7);
  g_early_big = malloc(200000);
  if (g_early_big)
    fill(g_early_big, 200000, 9);
}

static void test_early(void) {
  CHECK("early strdup", g_early_str && strcmp(g_early_str, "allocated by a constructor before main") == 0,
        "str=%p", (void *)g_early_str);
  CHECK("early block content", g_early_block && first_bad(g_early_block, 300, 7) == (size_t)-1,
        "p=%p", g_early_block);
  CHECK("early big content", g_early_big && first_bad(g_early_big, 200000, 9) == (size_t)-1,
        "p=%p", g_early_big);
  g_early_big = realloc(g_early_big, 400000);
  CHECK("early big realloc keeps content",
        g_early_big && first_bad(g_early_big, 200000, 9) == (size_t)-1, "p=%p", g_early_big);
  free(g_early_str);
  free(g_early_block);
  free(g_early_big);
}

/* ---- the pool serves malloc ------------------------------------------- */

static void test_takeover(void) {
  void *sym = dlsym(RTLD_DEFAULT, "kame_pool_malloc_usable_size");
  CHECK("pool loaded", sym != NULL, "dlsym(kame_pool_malloc_usable_size)=%p (is LD_PRELOAD set?)", sym);

  void *p = malloc(4096);
  CHECK("malloc(4096) non-NULL", p != NULL, "p=%p", p);
  CHECK("malloc(4096) is 4096-aligned", ((uintptr_t)p & 4095) == 0, "p=%p", p);
  size_t us = malloc_usable_size(p);
  CHECK("malloc_usable_size(malloc(4096)) == 4096", us == 4096, "usable=%zu", us);
  free(p);

  /* malloc must resolve to the pool's definition, not glibc's. */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void *libc_malloc = libc ? dlsym(libc, "malloc") : NULL;
  void *global_malloc = dlsym(RTLD_DEFAULT, "malloc");
  CHECK("malloc interposed", global_malloc != NULL && global_malloc != libc_malloc,
        "RTLD_DEFAULT malloc=%p libc malloc=%p", global_malloc, libc_malloc);

  void *a = NULL;
  int rc = posix_memalign(&a, 65536, 1000);
  CHECK("posix_memalign 64K", rc == 0 && a && ((uintptr_t)a & 65535) == 0, "rc=%d p=%p", rc, a);
  free(a);
  a = aligned_alloc(1 << 20, 1 << 20);
  CHECK("aligned_alloc 1M", a && ((uintptr_t)a & ((1u << 20) - 1)) == 0, "p=%p", a);
  free(a);
  unsigned char *c = calloc(1000, 100);
  size_t nz = 0;
  for (size_t i = 0; c && i < 100000; i++)
    nz += c[i] != 0;
  CHECK("calloc zeroed", c && nz == 0, "p=%p nonzero bytes=%zu", (void *)c, nz);
  free(c);
  if (libc)
    dlclose(libc);
}

/* ---- glibc's own pointers reach the pool's free/realloc ---------------- */

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);

static void test_foreign(void) {
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK("dlopen libc.so.6 NOLOAD", libc != NULL, "dlerror=%s", libc ? "" : dlerror());
  if (!libc)
    return;
  /* dlsym with libc's handle looks in libc itself, past the preload. */
  malloc_fn sys_malloc = (malloc_fn)dlsym(libc, "malloc");
  calloc_fn sys_calloc = (calloc_fn)dlsym(libc, "calloc");
  memalign_fn sys_memalign = (memalign_fn)dlsym(libc, "memalign");
  CHECK("glibc malloc found", sys_malloc && sys_calloc && sys_memalign, "malloc=%p", (void *)sys_malloc);
  if (!sys_malloc || !sys_calloc || !sys_memalign) {
    dlclose(libc);
    return;
  }

  static const size_t sizes[] = {1, 24, 100, 1000, 5000, 40000, 300000, 5u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    /* plain free */
    void *p = sys_malloc(n);
    CHECK("glibc malloc", p != NULL, "n=%zu", n);
    if (!p)
      continue;
    fill(p, n, (unsigned)i);
    size_t us = malloc_usable_size(p);
    CHECK("malloc_usable_size(glibc ptr) >= n", us >= n, "n=%zu usable=%zu", n, us);
    free(p);

    /* realloc growing, then shrinking, content kept */
    p = sys_malloc(n);
    fill(p, n, (unsigned)i + 1);
    void *q = realloc(p, n * 3 + 17);
    CHECK("realloc(glibc ptr) grow", q != NULL, "n=%zu", n);
    if (q) {
      size_t bad = first_bad(q, n, (unsigned)i + 1);
      CHECK("realloc(glibc ptr) grow keeps content", bad == (size_t)-1, "n=%zu first bad byte=%zu", n, bad);
      CHECK("usable after grow", malloc_usable_size(q) >= n * 3 + 17, "usable=%zu", malloc_usable_size(q));
      free(q);
    }
    p = sys_malloc(n);
    fill(p, n, (unsigned)i + 2);
    size_t half = n / 2 ? n / 2 : 1;
    q = realloc(p, half);
    CHECK("realloc(glibc ptr) shrink", q != NULL, "n=%zu", n);
    if (q) {
      size_t bad = first_bad(q, half, (unsigned)i + 2);
      CHECK("realloc(glibc ptr) shrink keeps content", bad == (size_t)-1, "n=%zu first bad byte=%zu", n, bad);
      free(q);
    }
  }

  /* realloc(glibc ptr, 0) frees it and returns NULL */
  void *z = sys_malloc(64);
  errno = 0;
  void *zr = realloc(z, 0);
  CHECK("realloc(glibc ptr, 0) == NULL", zr == NULL, "got %p", zr);
  free(zr);

  void *c = sys_calloc(10, 1000);
  CHECK("glibc calloc freed by pool", c != NULL, "p=%p", c);
  free(c);
  void *m = sys_memalign(4096, 10000);
  CHECK("glibc memalign ptr", m && ((uintptr_t)m & 4095) == 0, "p=%p", m);
  if (m) {
    CHECK("usable(glibc memalign ptr)", malloc_usable_size(m) >= 10000, "usable=%zu", malloc_usable_size(m));
    free(m);
  }
  dlclose(libc);
}

/* ---- dlopen / dlsym ----------------------------------------------------- */

static void test_dl(void) {
  for (int round = 0; round < 3; round++) {
    void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    CHECK("dlopen libm.so.6", h != NULL, "dlerror=%s", h ? "" : dlerror());
    if (!h)
      return;
    double (*cosp)(double) = (double (*)(double))dlsym(h, "cos");
    CHECK("dlsym cos", cosp != NULL, "dlerror=%s", cosp ? "" : dlerror());
    if (cosp)
      CHECK("cos(0) == 1", cosp(0.0) == 1.0, "cos(0)=%g", cosp(0.0));
    int cr = dlclose(h);
    CHECK("dlclose libm", cr == 0, "rc=%d", cr);
  }
  /* A failing dlopen allocates its error message inside ld.so/libc. */
  void *bad = dlopen("libdoes-not-exist-kp.so.9", RTLD_NOW);
  const char *err = dlerror();
  CHECK("dlopen missing lib fails with a message", bad == NULL && err && *err, "h=%p err=%s", bad,
        err ? err : "(null)");
  void *none = dlsym(RTLD_DEFAULT, "no_such_symbol_kp_xyz");
  err = dlerror();
  CHECK("dlsym missing symbol", none == NULL && err != NULL, "sym=%p", none);
}

/* ---- threads ------------------------------------------------------------ */

#define NKEEP 64

struct thread_out {
  void *keep[NKEEP];
  size_t size[NKEEP];
  int errors;
};

static pthread_key_t g_key;

static void key_destructor(void *p) {
  /* Runs at thread exit, late in the thread's life. */
  free(p);
}

static size_t thread_size(unsigned seed, int i) {
  static const size_t base[] = {8, 48, 200, 1024, 4096, 30000, 100000, 1u << 20};
  return base[(seed + (unsigned)i) % 8] + (size_t)i;
}

static void *thread_body(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  struct thread_out *out = malloc(sizeof *out);
  if (!out)
    return NULL;
  out->errors = 0;
  void *tmp[256];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 256; i++) {
      size_t n = thread_size(seed, i) % 70000 + 1;
      tmp[i] = malloc(n);
      if (!tmp[i]) {
        out->errors++;
        continue;
      }
      fill(tmp[i], n < 64 ? n : 64, seed + (unsigned)i);
    }
    for (int i = 0; i < 256; i++) {
      size_t n = thread_size(seed, i) % 70000 + 1;
      if (tmp[i] && first_bad(tmp[i], n < 64 ? n : 64, seed + (unsigned)i) != (size_t)-1)
        out->errors++;
      free(tmp[i]);
    }
  }
  /* Blocks that outlive this thread, freed by main after the join. */
  for (int i = 0; i < NKEEP; i++) {
    out->size[i] = thread_size(seed, i);
    out->keep[i] = malloc(out->size[i]);
    if (out->keep[i])
      fill(out->keep[i], out->size[i], seed * 3 + (unsigned)i);
    else
      out->errors++;
  }
  pthread_setspecific(g_key, malloc(1000));
  return out;
}

static void test_threads(void) {
  CHECK("pthread_key_create", pthread_key_create(&g_key, key_destructor) == 0, "%s", "");
  for (int wave = 0; wave < 5; wave++) {
    enum { N = 6 };
    pthread_t t[N];
    int created = 0;
    for (int i = 0; i < N; i++) {
      int rc = pthread_create(&t[i], NULL, thread_body, (void *)(uintptr_t)(wave * N + i + 1));
      CHECK("pthread_create", rc == 0, "rc=%d", rc);
      if (rc == 0)
        created++;
      else
        break;
    }
    for (int i = 0; i < created; i++) {
      void *ret = NULL;
      pthread_join(t[i], &ret);
      struct thread_out *out = ret;
      CHECK("thread result", out != NULL, "wave=%d thread=%d", wave, i);
      if (!out)
        continue;
      CHECK("thread saw no allocation error", out->errors == 0, "wave=%d thread=%d errors=%d", wave, i,
            out->errors);
      unsigned seed = (unsigned)(wave * N + i + 1);
      int bad = 0;
      for (int k = 0; k < NKEEP; k++) {
        if (out->keep[k] && first_bad(out->keep[k], out->size[k], seed * 3 + (unsigned)k) != (size_t)-1)
          bad++;
        free(out->keep[k]);
      }
      CHECK("blocks of an exited thread intact", bad == 0, "wave=%d thread=%d corrupted=%d", wave, i, bad);
      free(out);
    }
  }
  pthread_key_delete(g_key);
}

/* ---- errno ------------------------------------------------------------- */

static void test_errno(void) {
  static const size_t sizes[] = {0, 1, 100, 4096, 50000, 1u << 20, 6u << 20, 40u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = malloc(sizes[i]);
    CHECK("malloc for errno test", p != NULL, "n=%zu", sizes[i]);
    errno = 4321;
    free(p);
    CHECK("free preserves errno", errno == 4321, "n=%zu errno=%d", sizes[i], errno);
  }
  errno = 4321;
  free(NULL);
  CHECK("free(NULL) preserves errno", errno == 4321, "errno=%d", errno);

  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  malloc_fn sys_malloc = libc ? (malloc_fn)dlsym(libc, "malloc") : NULL;
  if (sys_malloc) {
    void *p = sys_malloc(100);
    errno = 4321;
    free(p);
    CHECK("free(glibc ptr) preserves errno", errno == 4321, "errno=%d", errno);
  }
  if (libc)
    dlclose(libc);

  /* volatile: the size must reach malloc at run time, unchecked. */
  volatile size_t too_big = SIZE_MAX;
  errno = 0;
  void *huge = malloc(too_big);
  CHECK("malloc(SIZE_MAX) fails with ENOMEM", huge == NULL && errno == ENOMEM, "p=%p errno=%d", huge, errno);
}

/* ---- fork ---------------------------------------------------------------- */

static atomic_int g_churn_stop;

static void *churn(void *arg) {
  (void)arg;
  unsigned i = 0;
  while (!atomic_load_explicit(&g_churn_stop, memory_order_relaxed)) {
    void *p = malloc(16 + (i * 7919u) % 100000);
    free(p);
    i++;
  }
  return NULL;
}

static void test_fork(void) {
  /* Another thread is in the middle of malloc/free while we fork, so a
   * lock or list it holds must come out usable in the child. */
  pthread_t t;
  int rc = pthread_create(&t, NULL, churn, NULL);
  CHECK("churn thread", rc == 0, "rc=%d", rc);
  void *parent_block = malloc(5000);
  if (parent_block)
    fill(parent_block, 5000, 77);
  for (int round = 0; round < 10; round++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30); /* a deadlock in the child becomes a SIGALRM failure */
      int bad = 0;
      if (parent_block && first_bad(parent_block, 5000, 77) != (size_t)-1)
        bad |= 1;
      free(parent_block);
      for (int i = 0; i < 2000; i++) {
        size_t n = 1 + (size_t)(i * 2654435761u) % 300000;
        char *p = malloc(n);
        if (!p) {
          bad |= 2;
          break;
        }
        p[0] = 1;
        p[n - 1] = 2;
        free(p);
      }
      /* The child can also start threads of its own. */
      pthread_t ct;
      if (pthread_create(&ct, NULL, thread_body, (void *)(uintptr_t)999) == 0) {
        void *ret = NULL;
        pthread_join(ct, &ret);
        struct thread_out *out = ret;
        if (!out || out->errors)
          bad |= 4;
        if (out) {
          for (int k = 0; k < NKEEP; k++)
            free(out->keep[k]);
          free(out);
        }
      } else {
        bad |= 8;
      }
      _exit(bad);
    }
    CHECK("fork", pid > 0, "pid=%d errno=%d", (int)pid, errno);
    if (pid < 0)
      break;
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK("child exited normally", WIFEXITED(status),
          "round=%d signal=%d", round, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (WIFEXITED(status))
      CHECK("child allocations fine", WEXITSTATUS(status) == 0,
            "round=%d child status=%d (1 inherited block, 2 malloc NULL, 4 thread, 8 pthread_create)",
            round, WEXITSTATUS(status));
  }
  atomic_store(&g_churn_stop, 1);
  if (rc == 0)
    pthread_join(t, NULL);
  CHECK("parent block intact after forks", parent_block && first_bad(parent_block, 5000, 77) == (size_t)-1,
        "p=%p", parent_block);
  free(parent_block);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_takeover();
  test_early();
  test_foreign();
  test_dl();
  test_threads();
  test_errno();
  test_fork();
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
