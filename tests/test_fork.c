/* fork() in a threaded process.  Worker threads allocate and free across
 * every tier, handing blocks to each other, while the main thread forks
 * repeatedly.  Each child, which inherits the pool in whatever state the
 * workers left it at the instant of the fork:
 *   - allocates, checks and frees a block in every tier (1 B .. 64 MiB),
 *     through malloc, calloc and realloc;
 *   - verifies and frees blocks the parent allocated before the fork, both
 *     the main thread's and blocks published by the worker threads (whose
 *     owners do not exist in the child);
 *   - starts a thread that allocates and frees, and exchanges blocks with it;
 *   - exits with status 0 when every check passed, 1 otherwise.
 * The parent waits for each child with a deadline: a child that deadlocks is
 * killed and reported, it does not hang the suite.
 *
 * Environment: KP_TEST_SCALE (factor like 0.1 or percent like 10%; default
 * 1; the number of forks is 20 x scale, at least 5), KP_FORK_TIMEOUT (seconds
 * a child may take, default 120), KP_TEST_SEED.  Last output line:
 * "N passed, N failed"; exit status 1 on any failure. */
#include "stress_common.h"

#include <signal.h>
#include <sys/wait.h>

#if defined(__SANITIZE_THREAD__)
#define KP_FORK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KP_FORK_TSAN 1
#endif
#endif

#ifdef KP_FORK_TSAN
/* ThreadSanitizer refuses by default to start threads in the child of a
 * multi-threaded fork; starting one there is part of what this test checks. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}
#endif

#define NWORKERS 3
#define NPUB 64

static st_queue w_q[NWORKERS];
static atomic_int w_stop;
static atomic_int w_done;

/* Blocks the workers publish for children to free.  State 0 empty, 1 being
 * written or taken back by a worker, 2 published.  In the child there are no
 * other threads, so a published slot can be taken without any protocol. */
static atomic_int pub_state[NPUB];
static st_blk pub_blk[NPUB];

/* The main thread's blocks from before each fork, across tiers. */
static const size_t parent_sizes[] = {1, 8, 24, 100, 1024, 4096, 16384, 40000, 65536, 300000,
                                      1 << 20, 5 << 20, 40 << 20};
#define NPARENT (sizeof parent_sizes / sizeof parent_sizes[0])
static st_blk parent_blk[NPARENT];

static void w_drain(int id, size_t max)
{
    st_blk b;
    for (size_t k = 0; k < max && st_queue_try_pop(&w_q[id], &b); k++)
        st_release(&b, "worker free received");
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    st_rng r = st_rng_for(40 + (uint64_t)id);
    st_set own;
    st_set_init(&own, 256);
    while (!atomic_load_explicit(&w_stop, memory_order_relaxed)) {
        st_blk b;
        if (st_alloc(&r, &b, st_pick_size(&r, ST_PICK_ALL), "worker alloc")) {
            if (st_below(&r, 2) == 0 && st_queue_try_push(&w_q[(id + 1) % NWORKERS], &b)) {
                /* handed to the next worker, which frees it */
            } else {
                if (own.n == own.cap) {
                    st_blk o = st_set_take(&own, st_below(&r, own.n));
                    st_release(&o, "worker free own");
                }
                st_set_add(&own, &b);
            }
        }
        if (own.n && st_below(&r, 3) == 0) {
            st_blk o = st_set_take(&own, st_below(&r, own.n));
            if (st_below(&r, 10) == 0) {
                st_resize(&r, &o, st_pick_resize(&r, o.n, ST_PICK_NO_HUGE), "worker realloc");
                if (o.p)
                    st_set_add(&own, &o);
            } else {
                st_release(&o, "worker free own");
            }
        }
        if (own.n && st_below(&r, 16) == 0) {
            /* publish one block, or take a published one back and free it */
            size_t s = st_below(&r, NPUB);
            int expect = 0;
            if (atomic_compare_exchange_strong(&pub_state[s], &expect, 1)) {
                pub_blk[s] = st_set_take(&own, st_below(&r, own.n));
                atomic_store_explicit(&pub_state[s], 2, memory_order_release);
            } else if (expect == 2 && atomic_compare_exchange_strong(&pub_state[s], &expect, 1)) {
                st_blk o = pub_blk[s];
                atomic_store_explicit(&pub_state[s], 0, memory_order_release);
                st_release(&o, "worker free published");
            }
        }
        w_drain(id, 32);
    }
    atomic_fetch_add(&w_done, 1);
    while (atomic_load(&w_done) < NWORKERS) {
        w_drain(id, SIZE_MAX);
        st_sleep_ms(1);
    }
    w_drain(id, SIZE_MAX);
    st_set_release_all(&own, "worker final free");
    st_set_destroy(&own);
    st_flush();
    return NULL;
}

/* ------------------------------------------------------------------ */
/* The child's side. */

static const size_t tier_sizes[] = {1, 1024, 16384, 65536, 1 << 20, 8 << 20, 64 << 20};
#define NTIERS (sizeof tier_sizes / sizeof tier_sizes[0])

/* Allocates one block of every tier size with malloc or calloc, fills and
 * verifies them, grows one through realloc, and frees them all. */
static void tier_round(st_rng *r, const char *who)
{
    st_blk b[NTIERS];
    for (size_t i = 0; i < NTIERS; i++) {
        size_t n = tier_sizes[i];
        int use_calloc = (i + st_below(r, 2)) & 1;
        void *p = use_calloc ? kame_pool_calloc(1, n) : kame_pool_malloc(n);
        b[i].p = NULL;
        if (!st_check_shape(p, n, 1, who))
            continue;
        if (use_calloc) {
            size_t z = st_zero_walk(p, n);
            ST_CHECK(z == SIZE_MAX, "%s: calloc(1, %zu) = %p has byte %zu non-zero", who, n, p, z);
        }
        b[i].p = p;
        b[i].n = n;
        b[i].seed = st_next(r);
        st_fill(&b[i]);
    }
    for (size_t i = 0; i < NTIERS; i++)
        if (b[i].p)
            st_verify(&b[i], who);
    /* realloc a small block up through the tiers and back */
    if (b[0].p) {
        static const size_t steps[] = {100, 5000, 100000, 6 << 20, 40 << 20, 3000, 16};
        for (size_t k = 0; k < sizeof steps / sizeof steps[0] && b[0].p; k++)
            st_resize(r, &b[0], steps[k], who);
    }
    for (size_t i = 0; i < NTIERS; i++) {
        if (b[i].p) {
            st_verify(&b[i], who);
            kame_pool_free(b[i].p);
        }
    }
}

typedef struct {
    st_blk from_main; /* freed by the child thread */
    st_blk to_main;   /* allocated by the child thread, freed by main */
    int iter;
} child_thread_arg;

static void *child_thread(void *arg)
{
    child_thread_arg *a = arg;
    st_rng r = st_rng_for(7000 + (uint64_t)a->iter);
    tier_round(&r, "child thread tiers");
    if (a->from_main.p) {
        st_verify(&a->from_main, "child thread receives");
        kame_pool_free(a->from_main.p);
    }
    /* a little churn of small blocks */
    st_blk ring[64];
    memset(ring, 0, sizeof ring);
    for (int i = 0; i < 4000; i++) {
        st_blk *s = &ring[st_below(&r, 64)];
        if (s->p) {
            st_verify(s, "child thread churn");
            kame_pool_free(s->p);
            s->p = NULL;
        }
        size_t n = st_pick_small(&r);
        void *p = kame_pool_malloc(n);
        if (st_check_shape(p, n, 1, "child thread churn")) {
            s->p = p;
            s->n = n;
            s->seed = st_next(&r);
            st_fill(s);
        }
    }
    for (int i = 0; i < 64; i++)
        if (ring[i].p) {
            st_verify(&ring[i], "child thread churn");
            kame_pool_free(ring[i].p);
        }
    void *p = kame_pool_malloc(3000);
    a->to_main.p = NULL;
    if (st_check_shape(p, 3000, 1, "child thread hand-back")) {
        a->to_main = (st_blk){p, 3000, st_next(&r), 0};
        st_fill(&a->to_main);
    }
    return NULL;
}

static void child_main(int iter)
{
    static char prefix[32];
    snprintf(prefix, sizeof prefix, "[child %d] ", iter);
    st_fail_prefix = prefix;
    /* count only the child's own failures */
    atomic_store(&st_failed_total, 0);
    atomic_store(&st_fail_messages, 0);
    st_registry_on = 0; /* its locks may have been held by a worker at the fork */
    st_big_cap = SIZE_MAX; /* the child's blocks are its own; the workers' budget is moot */
    st_rng r = st_rng_for(5000 + (uint64_t)iter);

    tier_round(&r, "child main tiers");

    /* The parent's main-thread blocks are intact copies; free every other
     * one, realloc some of the rest. */
    for (size_t i = 0; i < NPARENT; i++) {
        if (!parent_blk[i].p)
            continue;
        st_verify(&parent_blk[i], "child sees parent block");
        if ((i + (size_t)iter) & 1) {
            kame_pool_free(parent_blk[i].p);
            parent_blk[i].p = NULL;
        } else if (i % 3 == 0) {
            st_resize(&r, &parent_blk[i], parent_blk[i].n * 2 + 1, "child reallocs parent block");
        }
    }
    /* Blocks the workers published: their owners do not exist here. */
    int taken = 0;
    for (int s = 0; s < NPUB; s++) {
        if (atomic_load_explicit(&pub_state[s], memory_order_acquire) != 2)
            continue;
        st_verify(&pub_blk[s], "child sees worker block");
        if ((s + iter) % 3 != 0) {
            kame_pool_free(pub_blk[s].p);
            taken++;
        }
    }

    tier_round(&r, "child main tiers after frees");

    child_thread_arg ta;
    memset(&ta, 0, sizeof ta);
    ta.iter = iter;
    void *p = kame_pool_malloc(777);
    if (st_check_shape(p, 777, 1, "child main for thread")) {
        ta.from_main = (st_blk){p, 777, st_next(&r), 0};
        st_fill(&ta.from_main);
    }
    pthread_t t;
    int rc = pthread_create(&t, NULL, child_thread, &ta);
    ST_CHECK(rc == 0, "pthread_create in child: %s", strerror(rc));
    if (rc == 0) {
        pthread_join(t, NULL);
        if (ta.to_main.p) {
            st_verify(&ta.to_main, "child main receives from its thread");
            kame_pool_free(ta.to_main.p);
        }
    }
    /* memory of the exited thread is usable again */
    tier_round(&r, "child main tiers after thread exit");
    for (size_t i = 0; i < NPARENT; i++)
        if (parent_blk[i].p) {
            st_verify(&parent_blk[i], "child frees the rest of the parent blocks");
            kame_pool_free(parent_blk[i].p);
        }

    unsigned long f = st_failures();
    if (f) {
        char buf[96];
        int n = snprintf(buf, sizeof buf, "[child %d] %lu failed checks (%d worker blocks freed)\n",
                         iter, f, taken);
        st_write_line(buf, (size_t)n);
    }
    _exit(f ? 1 : 0);
}

/* ------------------------------------------------------------------ */

static double child_timeout(void)
{
    const char *s = getenv("KP_FORK_TIMEOUT");
    double v = s && *s ? strtod(s, NULL) : 120.0;
    return v > 0 ? v : 120.0;
}

/* Waits for a child with a deadline; returns its wait status, or -1 after
 * killing a child that did not finish. */
static int wait_child(pid_t pid, double timeout)
{
    double deadline = st_now() + timeout;
    for (;;) {
        int status = 0;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return status;
        if (w < 0 && errno != EINTR) {
            int waitpid_ok = 0;
            ST_CHECK(waitpid_ok, "waitpid(%d): %s", (int)pid, strerror(errno));
            return -1;
        }
        if (st_now() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        st_sleep_ms(5);
    }
}

int main(void)
{
    double scale = st_scale();
    st_watchdog("test_fork", scale);
    size_t nforks = st_scaled(20, scale, 5);
    double timeout = child_timeout();
    st_registry_init();
    setvbuf(stdout, NULL, _IOLBF, 0);
    st_note("test_fork: scale %.3g, %zu forks, child timeout %.0f s", scale, nforks, timeout);

    st_rng r = st_rng_for(1);
    for (size_t i = 0; i < NPARENT; i++)
        if (!st_alloc(&r, &parent_blk[i], parent_sizes[i], "parent block"))
            parent_blk[i].p = NULL;

    pthread_t t[NWORKERS];
    for (int i = 0; i < NWORKERS; i++)
        st_queue_init(&w_q[i], 128);
    for (int i = 0; i < NWORKERS; i++)
        st_thread_start(&t[i], worker, (void *)(intptr_t)i);

    int deadlocked = 0;
    for (size_t k = 0; k < nforks; k++) {
        st_sleep_ms(20 + (unsigned)st_below(&r, 30)); /* let the workers get going */
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            child_main((int)k);
        ST_CHECK(pid > 0, "fork %zu: %s", k, strerror(errno));
        if (pid < 0)
            break;
        int status = wait_child(pid, timeout);
        int child_finished = status != -1;
        ST_CHECK(child_finished, "child %zu (pid %d) did not exit within %.0f s (deadlock?); killed",
                 k, (int)pid, timeout);
        if (!child_finished) {
            deadlocked++;
        } else {
            int child_not_killed = !WIFSIGNALED(status);
            ST_CHECK(child_not_killed, "child %zu (pid %d) died of signal %d (%s)", k, (int)pid,
                     WIFSIGNALED(status) ? WTERMSIG(status) : 0,
                     WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "");
            if (child_not_killed)
                ST_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                         "child %zu (pid %d) exited with status %d (its failures are above)", k,
                         (int)pid, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        /* The child's frees must not show in the parent. */
        for (size_t i = 0; i < NPARENT; i++)
            if (parent_blk[i].p)
                st_verify(&parent_blk[i], "parent block after child");
        /* Replace a couple of the parent's blocks so children see different
         * states. */
        for (int j = 0; j < 2; j++) {
            size_t i = st_below(&r, NPARENT);
            if (parent_blk[i].p)
                st_release(&parent_blk[i], "parent replace");
            if (!st_alloc(&r, &parent_blk[i], parent_sizes[i], "parent replace"))
                parent_blk[i].p = NULL;
        }
        if (deadlocked >= 3)
            break; /* no point waiting out more timeouts */
    }

    atomic_store(&w_stop, 1);
    for (int i = 0; i < NWORKERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NWORKERS; i++)
        st_queue_destroy(&w_q[i]);
    for (int s = 0; s < NPUB; s++)
        if (atomic_load(&pub_state[s]) == 2)
            st_release(&pub_blk[s], "parent free published");
    for (size_t i = 0; i < NPARENT; i++)
        if (parent_blk[i].p)
            st_release(&parent_blk[i], "parent final free");
    ST_CHECK(atomic_load(&st_big_live) == 0, "big-block budget not back to 0: %zu",
             atomic_load(&st_big_live));
    return st_finish("test_fork");
}
