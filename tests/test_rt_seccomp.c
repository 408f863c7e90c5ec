/* A realtime thread's frees make no system call, proven by the kernel: a
 * child process's thread, after prewarm, runs a section of frees of every
 * tier (its own blocks and other threads', small, dedicated, large, huge,
 * and blocks above the recycle cache's top), with allocations of the
 * prewarmed sizes between them, under a seccomp filter that kills the
 * process on any memory-management call (mmap, munmap, mremap, madvise,
 * mprotect, brk, mlock, munlock, mincore) or on futex (the pool takes no
 * lock).  A second arm allows only write and exit_group: no system call
 * at all.  The same section without the realtime mark must be killed
 * (SIGSYS), so the filter is known to bite. */
#include "check.h"

#include <kame_pool.h>
#ifdef __GLIBC__
#include <execinfo.h> /* the backtrace of a denied call (glibc) */
#endif
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#if defined(__x86_64__)
#define KP_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define KP_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

enum { FILTER_MEMORY, FILTER_ALL };

/* KP_SECCOMP_TRAP=1: a denied call raises SIGSYS in the thread instead of
 * killing the process, and the handler prints the call and a backtrace
 * (to find which path made it). */
static unsigned deny_action = SECCOMP_RET_KILL_PROCESS;

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "denied system call %d\n", si->si_syscall);
    (void)!write(2, buf, (size_t)n);
#ifdef __GLIBC__
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
#endif
    _exit(5);
}

/* Installs the filter on the calling thread only. */
static int install_filter(int kind)
{
#ifdef KP_AUDIT_ARCH
    static const int denied[] = {
        SYS_mmap, SYS_munmap, SYS_mremap, SYS_madvise, SYS_mprotect,
#ifdef SYS_brk
        SYS_brk,
#endif
        SYS_mlock, SYS_munlock, SYS_mlock2, SYS_mincore, SYS_futex,
    };
    struct sock_filter prog[64];
    unsigned n = 0;
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, KP_AUDIT_ARCH, 1, 0);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny_action);
    prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    if (kind == FILTER_MEMORY) {
        for (unsigned i = 0; i < sizeof denied / sizeof denied[0]; i++) {
            prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1);
            prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny_action);
        }
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    } else {
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 2, 0);
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 1, 0);
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, deny_action);
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    struct sock_fprog fprog = {(unsigned short)n, prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog);
#else
    (void)kind;
    return -1;
#endif
}

static void say(const char *s) { (void)!write(2, s, strlen(s)); }

static void touch(void *p, size_t n)
{
    for (size_t off = 0; off < n; off += 4096)
        ((volatile char *)p)[off] = 1;
}

/* The blocks the section frees.  `foreign_*` come from other threads: a
 * thread that stays alive (its chunks are owned: batched remote frees)
 * and one that has exited (its chunks are detached). */
typedef struct {
    size_t size;
    unsigned count;
} kind_t;

static const kind_t own_kinds[] = {
    {64, 6000},          /* several chunks: the section empties them */
    {28000, 80},         /* the largest small class */
    {100 * KiB, 12},     /* dedicated, past the cache's per-slot depth */
    {1 * MiB, 8},        /* dedicated, 4 units */
    {3 * MiB, 6},        /* dedicated, 12 units */
    {8 * MiB, 6},        /* large */
    {40 * MiB, 2},       /* huge, within the cache's top */
    {100 * MiB, 2},      /* above the cache's top */
    {300 * MiB, 1},      /* the > 256 MiB band */
};
static const kind_t foreign_kinds[] = {
    {48, 3000}, {28000, 40}, {200 * KiB, 6}, {2 * MiB, 4}, {8 * MiB, 2}, {40 * MiB, 1}, {300 * MiB, 1},
};
#define NKINDS(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_BLOCKS 20000

static void *own[MAX_BLOCKS], *alive_blocks[MAX_BLOCKS / 2], *gone_blocks[MAX_BLOCKS / 2];
static unsigned own_n, alive_n, gone_n;

static unsigned alloc_kinds(const kind_t *kinds, unsigned nk, void **out)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nk; i++)
        for (unsigned j = 0; j < kinds[i].count; j++) {
            void *p = kame_pool_malloc(kinds[i].size);
            if (p == NULL) {
                say("allocation failed\n");
                _exit(2);
            }
            touch(p, kinds[i].size < 64 * KiB ? kinds[i].size : 4096);
            out[n++] = p;
        }
    return n;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static int allocated;

static void *alive_thread(void *arg)
{
    (void)arg;
    alive_n = alloc_kinds(foreign_kinds, NKINDS(foreign_kinds), alive_blocks);
    pthread_mutex_lock(&lock);
    allocated = 1;
    pthread_cond_signal(&ready);
    pthread_mutex_unlock(&lock);
    for (;;) { /* stays alive (unfiltered) until the process ends */
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void *gone_thread(void *arg)
{
    (void)arg;
    gone_n = alloc_kinds(foreign_kinds, NKINDS(foreign_kinds), gone_blocks);
    return NULL;
}

/* Sizes the section allocates between its frees: prewarmed.  All of them
 * are chunks, which a release keeps in the pool's regions; a mapping size
 * would have to stay within the cache, which this section's frees keep
 * full. */
static const size_t warm_sizes[] = {32, 512, 4000, 64 * KiB, 1 * MiB};
static const unsigned warm_counts[] = {64, 16, 8, 4, 2};
#define NWARM (sizeof warm_sizes / sizeof warm_sizes[0])

/* The section: every free, with prewarmed allocations in between. */
static void section(void)
{
    void *w[NWARM];
    for (unsigned i = 0; i < own_n || i < alive_n || i < gone_n; i++) {
        if (i < own_n)
            kame_pool_free(own[own_n - 1 - i]);
        if (i < alive_n)
            kame_pool_free(alive_blocks[i]);
        if (i < gone_n)
            kame_pool_free(gone_blocks[gone_n - 1 - i]);
        if (i % 64 == 0) {
            for (unsigned k = 0; k < NWARM; k++) {
                w[k] = kame_pool_malloc(warm_sizes[k]);
                ((volatile char *)w[k])[0] = 1;
            }
            for (unsigned k = NWARM; k-- > 0;)
                kame_pool_free(w[k]);
        }
    }
}

/* The child: returns only by _exit. */
static void child(int mark, int filter)
{
    kame_pool_set_realtime_mode(1);
    /* A small cache: most frees release (purge or unmap) rather than cache. */
    kame_pool_set_large_cache_cap(16 * MiB);
    kame_pool_set_rt_pending_cap((size_t)4 << 30);
    kame_pool_set_rt_os_policy(KAME_RT_OS_COUNT);
    if (kame_pool_prewarm(warm_sizes, warm_counts, NWARM) != 0) {
        say("prewarm failed\n");
        _exit(2);
    }
    pthread_t a, g;
    pthread_create(&a, NULL, alive_thread, NULL);
    pthread_create(&g, NULL, gone_thread, NULL);
    pthread_join(g, NULL);
    pthread_mutex_lock(&lock);
    while (!allocated)
        pthread_cond_wait(&ready, &lock);
    pthread_mutex_unlock(&lock);
    own_n = alloc_kinds(own_kinds, NKINDS(own_kinds), own);
    unsigned long long viol = kame_pool_rt_violations(), forced = kame_pool_rt_forced_releases();
    if (mark)
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
    if (getenv("KP_SECCOMP_TRAP") != NULL) {
#ifdef __GLIBC__
        void *frames[4];
        backtrace(frames, 4); /* loads what backtrace needs, before the filter */
#endif
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigsys;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSYS, &sa, NULL);
        deny_action = SECCOMP_RET_TRAP;
    }
    if (install_filter(filter) != 0) {
        say("seccomp filter not installed\n");
        _exit(3);
    }
    section();
    int held = kame_pool_rt_violations() == viol && kame_pool_rt_forced_releases() == forced;
    say(held ? "section done, counters unchanged\n" : "section done, counters moved\n");
    /* The raw call: a sanitizer runtime's exit hooks make calls of their own. */
    syscall(SYS_exit_group, held ? 0 : 4);
    _exit(held ? 0 : 4);
}

static int run_arm(int mark, int filter, int *signal_out)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        child(mark, filter);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    *signal_out = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void)
{
#ifndef KP_AUDIT_ARCH
    fprintf(stderr, "test_rt_seccomp: no seccomp architecture constant for this target\n");
    return 77;
#endif
    int sig, rc = run_arm(1, FILTER_MEMORY, &sig);
    if (rc == 3) { /* the kernel (or a container's policy) refused the filter */
        fprintf(stderr, "test_rt_seccomp: cannot install a seccomp filter here: skipped\n");
        return 77;
    }
    CHECK("realtime section under a filter of memory calls and futex: survives") {
        EXPECTF(rc == 0, "exit %d, signal %d", rc, sig);
    }
    CHECK("realtime section under a filter of every call but write and exit: survives") {
        rc = run_arm(1, FILTER_ALL, &sig);
        EXPECTF(rc == 0, "exit %d, signal %d", rc, sig);
    }
    CHECK("the same section unmarked is killed by the filter (SIGSYS)") {
        rc = run_arm(0, FILTER_MEMORY, &sig);
        EXPECTF(rc == -1 && sig == SIGSYS, "exit %d, signal %d", rc, sig);
    }
    return kp_check_summary();
}
