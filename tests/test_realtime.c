/* The realtime API (docs/realtime.md): levels and their nesting, parking
 * and the pending cap, the OS policies, drain and trim, realtime mode,
 * prewarm, region reservation and pinning, huge-page advice, STRICT's
 * per-free publishing, and the counters. */
#include "check.h"

#include <kame_pool.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>


#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
/* Above the recycle cache's default top: its free always releases. */
#define BIG (80 * MiB)

static int resident(const void *p)
{
    unsigned char v = 0;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    if (mincore((void *)page, 4096, &v) != 0)
        return -1; /* not mapped */
    return v & 1;
}

static int mapped(const void *p)
{
    unsigned char v;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    return mincore((void *)page, 4096, &v) == 0;
}

static void touch(void *p, size_t n)
{
    for (size_t off = 0; off < n; off += 4096)
        ((volatile char *)p)[off] = 1;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* The value of a "Name:   N kB" line of /proc/self/status, in bytes. */
static size_t status_bytes(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t v = 0, n = strlen(name);
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long kb;
        if (strncmp(line, name, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%lu", &kb) == 1)
            v = (size_t)kb << 10;
    }
    fclose(f);
    return v;
}

/* The VmFlags of the mapping that holds p, from /proc/self/smaps. */
static int vm_flags(const void *p, char *out, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0, found = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long start, end;
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= start && (uintptr_t)p < end;
        } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, len, "%s", line + 8);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

static int has_flag(const char *flags, const char *flag)
{
    char buf[512];
    snprintf(buf, sizeof buf, " %s", flags);
    char want[8];
    snprintf(want, sizeof want, " %s", flag);
    for (char *s = strstr(buf, want); s != NULL; s = strstr(s + 1, want))
        if (s[strlen(want)] == ' ' || s[strlen(want)] == '\n' || s[strlen(want)] == '\0')
            return 1;
    return 0;
}

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

/* ---- levels ------------------------------------------------------------- */

static void *read_level(void *arg)
{
    *(int *)arg = kame_pool_get_realtime_thread();
    return NULL;
}

static int level_in_thread(void)
{
    pthread_t t;
    int level = -1;
    pthread_create(&t, NULL, read_level, &level);
    pthread_join(t, NULL);
    return level;
}

static void test_levels(void)
{
    CHECK("levels nest: set returns the previous mark, get the effective level") {
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_OFF);
        int outer = kame_pool_set_realtime_thread(KAME_RT_DEFER);
        EXPECT_INT_EQ(outer, KAME_RT_OFF);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_DEFER);
        int inner = kame_pool_set_realtime_thread(KAME_RT_STRICT);
        EXPECT_INT_EQ(inner, KAME_RT_DEFER);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_STRICT);
        EXPECT_INT_EQ(level_in_thread(), KAME_RT_OFF); /* per thread */
        kame_pool_set_realtime_thread(inner);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_DEFER);
        kame_pool_set_realtime_thread(outer);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_OFF);
        kame_pool_set_realtime_thread(99);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_STRICT);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
    }
    CHECK("the process-wide default is a DEFER floor") {
        kame_pool_set_realtime_default(KAME_RT_STRICT);
        EXPECT_INT_EQ(kame_pool_get_realtime_default(), KAME_RT_DEFER);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_DEFER);
        EXPECT_INT_EQ(level_in_thread(), KAME_RT_DEFER);
        int prev = kame_pool_set_realtime_thread(KAME_RT_STRICT);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_STRICT);
        kame_pool_set_realtime_thread(prev);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_DEFER);
        /* Unmarked, but under the floor: a big free is parked. */
        char *p = kame_pool_malloc(BIG);
        size_t pending = kame_pool_rt_pending_bytes();
        kame_pool_free(p);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), pending + BIG);
        kame_pool_set_realtime_default(KAME_RT_OFF);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_OFF);
        EXPECT_U_GE(kame_pool_rt_drain(), BIG);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
    }
}

/* ---- parking, the cap, drain, trim ------------------------------------------ */

static void test_parking(void)
{
    CHECK("a realtime free parks a mapping; the drain unmaps it") {
        char *p = kame_pool_malloc(BIG);
        if (!EXPECT_NOT_NULL(p))
            continue;
        touch(p, BIG);
        size_t reserved = kame_pool_reserved_bytes();
        unsigned long long forced = kame_pool_rt_forced_releases();
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        kame_pool_free(p);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), BIG);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved); /* still mapped */
        EXPECT(mapped(p));
        EXPECT_U_EQ(kame_pool_rt_forced_releases(), forced);
        EXPECT_U_EQ(kame_pool_rt_drain(), BIG);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved - BIG);
        EXPECT(!mapped(p));
    }
    CHECK("without the mark the same free unmaps at once") {
        char *p = kame_pool_malloc(BIG);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kame_pool_free(p);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
        EXPECT(!mapped(p));
    }
    CHECK("past the pending cap a realtime free releases inline and counts") {
        kame_pool_set_rt_pending_cap(100 * MiB);
        EXPECT_U_EQ(kame_pool_get_rt_pending_cap(), 100 * MiB);
        char *a = kame_pool_malloc(BIG), *b = kame_pool_malloc(BIG);
        if (!EXPECT_NOT_NULL(a) || !EXPECT_NOT_NULL(b))
            continue;
        unsigned long long forced = kame_pool_rt_forced_releases();
        unsigned long long viol = kame_pool_rt_violations();
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        kame_pool_free(a);
        EXPECT_U_EQ(kame_pool_rt_forced_releases(), forced);
        kame_pool_free(b); /* 160 MiB > 100 MiB: forced */
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_U_EQ(kame_pool_rt_forced_releases(), forced + 1);
        EXPECT_U_EQ(kame_pool_rt_violations(), viol);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), BIG);
        EXPECT(mapped(a));
        EXPECT(!mapped(b));
        kame_pool_set_rt_pending_cap((size_t)1 << 30);
        EXPECT_U_EQ(kame_pool_rt_drain(), BIG);
        EXPECT(!mapped(a));
    }
    CHECK("trim settles parked mappings and the pages realtime frees kept") {
        size_t cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(0); /* every free releases */
        char *p = kame_pool_malloc(BIG), *d = kame_pool_malloc(MiB);
        if (!EXPECT_NOT_NULL(p) || !EXPECT_NOT_NULL(d))
            continue;
        touch(d, MiB);
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        kame_pool_free(p);
        kame_pool_free(d); /* the chunk is released, its pages kept */
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), BIG);
        EXPECT_INT_EQ(resident(d), 1);
        EXPECT_INT_EQ(resident(d + MiB / 2), 1);
        kame_pool_trim();
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
        EXPECT(!mapped(p));
        EXPECT_INT_EQ(resident(d), 0);
        EXPECT_INT_EQ(resident(d + MiB / 2), 0);
        /* And without the mark the release purges at once. */
        char *e = kame_pool_malloc(MiB);
        if (EXPECT_NOT_NULL(e)) {
            touch(e, MiB);
            kame_pool_free(e);
            EXPECT_INT_EQ(resident(e), 0);
        }
        kame_pool_set_large_cache_cap(cap);
    }
    CHECK("trim from a realtime thread settles too (the gate does not apply to it)") {
        char *p = kame_pool_malloc(BIG);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        kame_pool_free(p);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), BIG);
        kame_pool_trim();
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), 0);
        EXPECT_INT_EQ(kame_pool_get_realtime_thread(), KAME_RT_DEFER);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT(!mapped(p));
    }
    CHECK("a parked mapping freed again is caught as a double free") {
        kame_pool_set_check_level(0); /* report and ignore: no abort */
        char *p = kame_pool_malloc(BIG);
        if (!EXPECT_NOT_NULL(p))
            continue;
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        kame_pool_free(p);
        kame_pool_free(p); /* ignored at level 0, not parked twice */
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_U_EQ(kame_pool_rt_pending_bytes(), BIG);
        EXPECT_U_EQ(kame_pool_rt_drain(), BIG);
        kame_pool_set_check_level(1);
    }
}

/* ---- OS policies ------------------------------------------------------------ */

static void test_policies(void)
{
    CHECK("ALLOW (default) maps without counting") {
        EXPECT_INT_EQ(kame_pool_get_rt_os_policy(), KAME_RT_OS_ALLOW);
        unsigned long long viol = kame_pool_rt_violations();
        size_t reserved = kame_pool_reserved_bytes();
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        char *p = kame_pool_malloc(BIG);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_NOT_NULL(p);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved + BIG);
        EXPECT_U_EQ(kame_pool_rt_violations(), viol);
        kame_pool_free(p);
    }
    CHECK("COUNT maps and counts one violation per mapping") {
        kame_pool_set_rt_os_policy(KAME_RT_OS_COUNT);
        EXPECT_INT_EQ(kame_pool_get_rt_os_policy(), KAME_RT_OS_COUNT);
        unsigned long long viol = kame_pool_rt_violations();
        size_t reserved = kame_pool_reserved_bytes();
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        char *p = kame_pool_malloc(BIG);
        char *q = kame_pool_malloc(BIG);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_NOT_NULL(p);
        EXPECT_NOT_NULL(q);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved + 2 * BIG);
        EXPECT_U_EQ(kame_pool_rt_violations(), viol + 2);
        /* A request the cache serves needs no mapping: not counted. */
        char *s = kame_pool_malloc(2 * MiB);
        kame_pool_free(s);
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        s = kame_pool_malloc(2 * MiB);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        EXPECT_U_EQ(kame_pool_rt_violations(), viol + 2);
        kame_pool_free(s);
        kame_pool_free(p);
        kame_pool_free(q);
        kame_pool_set_rt_os_policy(KAME_RT_OS_ALLOW);
    }
    CHECK("FAIL counts and makes no mapping: the system allocator serves") {
        kame_pool_set_rt_os_policy(KAME_RT_OS_FAIL);
        unsigned long long viol = kame_pool_rt_violations();
        size_t reserved = kame_pool_reserved_bytes();
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        char *p = kame_pool_malloc(BIG);
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        if (EXPECT_NOT_NULL(p)) {
            EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved); /* not the pool's */
            EXPECT_U_EQ(kame_pool_rt_violations(), viol + 1);
            memset(p, 1, BIG);
            kame_pool_free(p);
        }
        kame_pool_set_rt_os_policy(KAME_RT_OS_ALLOW);
        EXPECT_INT_EQ(kame_pool_get_rt_os_policy(), KAME_RT_OS_ALLOW);
        kame_pool_set_rt_os_policy(17); /* unknown: ignored */
        EXPECT_INT_EQ(kame_pool_get_rt_os_policy(), KAME_RT_OS_ALLOW);
    }
    CHECK("FAIL refuses a new region: chunks come from the system allocator then") {
        static void *held[400];
        unsigned n = 0, refused = 0;
        kame_pool_set_rt_os_policy(KAME_RT_OS_FAIL);
        kame_pool_set_realtime_thread(KAME_RT_DEFER);
        /* 3 MiB blocks are chunks of 12 units: ten fill a region. */
        while (n < 400 && !refused) {
            unsigned long long viol = kame_pool_rt_violations();
            size_t reserved = kame_pool_reserved_bytes();
            held[n] = kame_pool_malloc(3 * MiB);
            if (held[n] == NULL)
                break;
            if (kame_pool_rt_violations() != viol) {
                refused = 1;
                EXPECT_U_EQ(kame_pool_rt_violations(), viol + 1);
                EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved); /* no region mapped */
                memset(held[n], 2, 3 * MiB);
            }
            n++;
        }
        kame_pool_set_realtime_thread(KAME_RT_OFF);
        kame_pool_set_rt_os_policy(KAME_RT_OS_ALLOW);
        EXPECTF(refused, "no refusal in %u blocks", n);
        while (n > 0)
            kame_pool_free(held[--n]);
        kame_pool_trim();
    }
    CHECK("ABORT reports and aborts") {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            signal(SIGABRT, SIG_DFL);
            kame_pool_set_rt_os_policy(KAME_RT_OS_ABORT);
            kame_pool_set_realtime_thread(KAME_RT_DEFER);
            void *p = kame_pool_malloc(BIG);
            _exit(p != NULL ? 0 : 3);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECT(WIFSIGNALED(status));
        if (WIFSIGNALED(status))
            EXPECT_INT_EQ(WTERMSIG(status), SIGABRT);
    }
}

/* ---- realtime mode ---------------------------------------------------------- */

/* Cache misses look at the drain clock: three blocks of sizes from `base`
 * up by `step`, 3 ms apart. */
static void miss_cache_thrice(size_t base, size_t step)
{
    for (int i = 0; i < 3; i++) {
        void *q = kame_pool_malloc(base + (size_t)i * step);
        sleep_ms(3);
        kame_pool_free(q);
    }
}

static void *thread_keep_block(void *arg)
{
    /* The second round finds the size in demand in the thread's cache,
     * which then keeps the block until the thread exits. */
    char *p = NULL;
    for (int round = 0; round < 2; round++) {
        p = kame_pool_malloc(2 * MiB);
        touch(p, 2 * MiB);
        kame_pool_free(p);
    }
    *(char **)arg = p;
    return NULL;
}

static void test_mode(void)
{
    CHECK("realtime mode silences the lazy drain") {
        kame_pool_trim();
        kame_pool_set_lazy_drain_interval_ms(1);
        for (int mode = 1; mode >= 0; mode--) {
            kame_pool_set_realtime_mode(mode);
            EXPECT_INT_EQ(kame_pool_get_realtime_mode(), mode);
            char *p = kame_pool_malloc(2 * MiB);
            if (!EXPECT_NOT_NULL(p))
                continue;
            touch(p, 2 * MiB);
            kame_pool_free(p); /* into this thread's cache */
            sleep_ms(30);
            miss_cache_thrice(3 * MiB, 256 * KiB);
            EXPECTF(resident(p) == mode, "mode %d: block resident %d", mode, resident(p));
            kame_pool_trim();
        }
        kame_pool_set_lazy_drain_interval_ms(10);
        EXPECT_U_EQ(kame_pool_get_lazy_drain_interval_ms(), 10); /* kept, not overwritten */
    }
    CHECK("realtime mode keeps an exiting thread's cache for other threads") {
        /* No drain tick while the thread runs: one between its second
         * malloc and free (a thread descheduled on a busy machine) would
         * find the size out of demand and send the block to the shared
         * cache, which the thread's exit does not reclaim. */
        kame_pool_set_lazy_drain_interval_ms(60000);
        for (int mode = 1; mode >= 0; mode--) {
            kame_pool_trim();
            kame_pool_set_realtime_mode(mode);
            char *p = NULL;
            pthread_t t;
            pthread_create(&t, NULL, thread_keep_block, &p);
            pthread_join(t, NULL);
            EXPECTF(resident(p) == mode, "mode %d: block resident %d", mode, resident(p));
            EXPECT_INT_EQ(kame_pool_get_thread_exit_reclaim(), 1); /* kept */
        }
        kame_pool_set_realtime_mode(0);
        kame_pool_set_lazy_drain_interval_ms(10);
    }
    CHECK("realtime mode: no thread's chunk release purges") {
        size_t cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(0);
        kame_pool_set_realtime_mode(1);
        char *d = kame_pool_malloc(MiB);
        if (EXPECT_NOT_NULL(d)) {
            touch(d, MiB);
            kame_pool_free(d);
            EXPECT_INT_EQ(resident(d), 1);
        }
        kame_pool_set_realtime_mode(0);
        kame_pool_trim();
        if (d != NULL)
            EXPECT_INT_EQ(resident(d), 0);
        kame_pool_set_large_cache_cap(cap);
    }
}

/* ---- prewarm ---------------------------------------------------------------- */

static const size_t warm_sizes[] = {48, 700, 8000, 100 * KiB, 1 * MiB, 6 * MiB};
static const unsigned warm_counts[] = {200, 60, 20, 8, 4, 2};
#define WARM_KINDS (sizeof warm_sizes / sizeof warm_sizes[0])
static void *warm_blocks[400];

/* Allocates the working set and writes every page of it; returns the
 * minor faults that took. */
static long run_working_set(const size_t *sizes, const unsigned *counts, unsigned kinds)
{
    long before = minor_faults();
    unsigned k = 0;
    for (unsigned i = 0; i < kinds; i++)
        for (unsigned j = 0; j < counts[i]; j++) {
            warm_blocks[k] = kame_pool_malloc(sizes[i]);
            if (warm_blocks[k] != NULL)
                touch(warm_blocks[k], sizes[i]);
            k++;
        }
    long faults = minor_faults() - before;
    while (k > 0)
        kame_pool_free(warm_blocks[--k]);
    return faults;
}

static void *prewarm_thread(void *arg)
{
    long *out = arg;
    memset(warm_blocks, 0, sizeof warm_blocks); /* the test's own memory, faulted in */
    kame_pool_set_rt_os_policy(KAME_RT_OS_COUNT);
    kame_pool_set_realtime_thread(KAME_RT_DEFER);
    unsigned long long viol = kame_pool_rt_violations();
    out[0] = kame_pool_prewarm(warm_sizes, warm_counts, WARM_KINDS);
    out[1] = (long)(kame_pool_rt_violations() - viol); /* prewarm is not the section */
    viol = kame_pool_rt_violations();
    out[2] = run_working_set(warm_sizes, warm_counts, WARM_KINDS);
    out[3] = (long)(kame_pool_rt_violations() - viol);
    out[4] = run_working_set(warm_sizes, warm_counts, WARM_KINDS);
    /* A working set that was not prewarmed faults: the measurement can
     * see faults. */
    static const size_t cold_sizes[] = {12 * MiB};
    static const unsigned cold_counts[] = {1};
    viol = kame_pool_rt_violations();
    out[5] = run_working_set(cold_sizes, cold_counts, 1);
    out[6] = (long)(kame_pool_rt_violations() - viol);
    kame_pool_set_realtime_thread(KAME_RT_OFF);
    kame_pool_set_rt_os_policy(KAME_RT_OS_ALLOW);
    return NULL;
}

static void test_prewarm(void)
{
    CHECK("prewarm makes the working set's next allocation fault-free") {
        kame_pool_trim();
        kame_pool_set_realtime_mode(1);
        long out[7] = {-1, -1, -1, -1, -1, -1, -1};
        pthread_t t;
        pthread_create(&t, NULL, prewarm_thread, out);
        pthread_join(t, NULL);
        kame_pool_set_realtime_mode(0);
        EXPECT_INT_EQ(out[0], 0);
        EXPECT_INT_EQ(out[1], 0);
#if !defined(KP_TSAN) && !defined(KP_TEST_EMULATED)
        /* Under ThreadSanitizer the count includes the runtime's shadow
         * pages, faulted in for memory the program touches: not the pool's.
         * Under an emulator (qemu-user) the faults are the emulator's. */
        EXPECTF(out[2] == 0, "first section after prewarm: %ld minor faults", out[2]);
        EXPECTF(out[4] == 0, "second section: %ld minor faults", out[4]);
#endif
        EXPECT_INT_EQ(out[3], 0);
        EXPECTF(out[5] > 0, "a working set not prewarmed: %ld minor faults", out[5]);
        EXPECT_INT_EQ(out[6], 1); /* and it needed a mapping */
        kame_pool_trim();
    }
    CHECK("prewarm rejects bad arguments") {
        EXPECT_INT_EQ(kame_pool_prewarm(NULL, NULL, 0), 0);
        EXPECT_INT_EQ(kame_pool_prewarm(NULL, warm_counts, 1), -1);
        size_t huge[] = {(size_t)-1};
        unsigned one[] = {1};
        EXPECT_INT_EQ(kame_pool_prewarm(huge, one, 1), -1);
    }
}

/* ---- regions: reserve, pin, THP ---------------------------------------------- */

static void test_regions(void)
{
    CHECK("reserve_regions maps regions, and prefault makes them resident") {
        size_t reserved = kame_pool_reserved_bytes();
        size_t rss = status_bytes("VmRSS");
        EXPECT_U_EQ(kame_pool_reserve_regions(1, 0), 1);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved + 32 * MiB);
        EXPECT_U_LT(status_bytes("VmRSS"), rss + 4 * MiB);
        rss = status_bytes("VmRSS");
        EXPECT_U_EQ(kame_pool_reserve_regions(2, 1), 2);
        EXPECT_U_EQ(kame_pool_reserved_bytes(), reserved + 96 * MiB);
        EXPECTF(status_bytes("VmRSS") >= rss + 60 * MiB, "RSS grew by %zu KiB",
                (status_bytes("VmRSS") - rss) >> 10);
    }
    CHECK("mlock_regions pins the pool's regions, munlock_regions unpins them") {
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        int raised = setrlimit(RLIMIT_MEMLOCK, &rl) == 0;
        size_t before = status_bytes("VmLck");
        size_t locked = kame_pool_mlock_regions();
        size_t vmlck = status_bytes("VmLck");
        if (raised)
            EXPECT_U_GE(locked, 96 * MiB);
        EXPECT_U_EQ(locked % (32 * MiB), 0);
        EXPECT_U_GE(vmlck, before + locked);
        EXPECT_U_GE(kame_pool_munlock_regions(), locked);
        EXPECT_U_EQ(status_bytes("VmLck"), before);
    }
    CHECK("pinned pages refuse a purge: freed chunks on them are not taken for zero") {
        struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
        (void)setrlimit(RLIMIT_MEMLOCK, &rl);
        /* Freed as a whole chunk of its own, its units purged (or meant
         * to be) by trim, then claimed again by calloc. */
        char *p = kame_pool_malloc(MiB);
        if (!EXPECT_NOT_NULL(p))
            continue;
        size_t locked = kame_pool_mlock_regions();
        printf("    %zu MiB pinned\n", locked >> 20);
        memset(p, 0xaa, MiB);
        kame_pool_free(p);
        kame_pool_trim();
        unsigned char *q = kame_pool_calloc(1, MiB);
        if (!EXPECT_NOT_NULL(q))
            continue;
        EXPECTF(kp_byte_mismatch(q, MiB, 0) == MiB, "calloc at %p (the freed block was at %p): byte %zu not zero",
                (void *)q, (void *)p, kp_byte_mismatch(q, MiB, 0));
        kame_pool_free(q);
        /* The same through the drain: a chunk released dirty, purged idle. */
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(1);
        p = kame_pool_malloc(640 * KiB);
        if (EXPECT_NOT_NULL(p)) {
            memset(p, 0xbb, 640 * KiB);
            kame_pool_free(p);
            sleep_ms(30);
            miss_cache_thrice(5 * MiB, 64 * KiB);
            q = kame_pool_calloc(1, 640 * KiB);
            if (EXPECT_NOT_NULL(q)) {
                EXPECTF(kp_byte_mismatch(q, 640 * KiB, 0) == 640 * KiB, "calloc after the drain: byte %zu not zero",
                        kp_byte_mismatch(q, 640 * KiB, 0));
                kame_pool_free(q);
            }
        }
        kame_pool_set_lazy_drain_interval_ms(interval);
        kame_pool_munlock_regions();
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
    CHECK("THP advice reaches existing regions, large blocks and new ones") {
        char *small = kame_pool_malloc(64);
        char *big = kame_pool_malloc(BIG);             /* above the cache's top */
        char *mid = kame_pool_malloc(8 * MiB);         /* one the cache keeps */
        char flags[512];
        if (!EXPECT_NOT_NULL(small) || !EXPECT_NOT_NULL(big) || !EXPECT_NOT_NULL(mid))
            continue;
        /* qemu-user takes the advice without passing it on to the kernel:
         * under an emulator the flags are not checked. */
#ifdef KP_TEST_EMULATED
        int thp = 0;
#else
        int thp = access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
#endif
        /* The default advises the blocks the cache can keep, and only them. */
        EXPECT_INT_EQ(kame_pool_get_thp_policy(), KAME_THP_BLOCKS);
        if (thp) {
            if (EXPECT(vm_flags(mid, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "hg"), "cacheable block flags: %s", flags);
            if (EXPECT(vm_flags(big, flags, sizeof flags)))
                EXPECTF(!has_flag(flags, "hg") && !has_flag(flags, "nh"), "block above the top: %s", flags);
            if (EXPECT(vm_flags(small, flags, sizeof flags)))
                EXPECTF(!has_flag(flags, "hg") && !has_flag(flags, "nh"), "region flags: %s", flags);
        }
        size_t n = kame_pool_set_thp_policy(KAME_THP_NEVER);
        EXPECT_INT_EQ(kame_pool_get_thp_policy(), KAME_THP_NEVER);
        if (thp) {
            /* all regions and the two blocks */
            EXPECT_U_GE(n, kame_pool_reserved_bytes() - 2 * BIG - 8 * MiB + BIG + 8 * MiB);
            if (EXPECT(vm_flags(small, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "nh"), "region flags: %s", flags);
            if (EXPECT(vm_flags(big, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "nh"), "block flags: %s", flags);
        } else {
#ifndef KP_TEST_EMULATED
            EXPECT_U_EQ(n, 0);
#endif
        }
        n = kame_pool_set_thp_policy(KAME_THP_ALWAYS);
        char *fresh = kame_pool_malloc(BIG); /* mapped after the change */
        if (thp && EXPECT_NOT_NULL(fresh)) {
            EXPECT_U_GT(n, 0);
            if (EXPECT(vm_flags(small, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "hg") && !has_flag(flags, "nh"), "region flags: %s", flags);
            if (EXPECT(vm_flags(fresh, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "hg"), "new block flags: %s", flags);
        }
        /* From NEVER to BLOCKS: the cacheable block is advised again; the
         * region and the block above the top keep what they had. */
        kame_pool_set_thp_policy(KAME_THP_NEVER);
        n = kame_pool_set_thp_policy(KAME_THP_BLOCKS);
        if (thp) {
            EXPECT_U_GE(n, 8 * MiB);
            if (EXPECT(vm_flags(mid, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "hg") && !has_flag(flags, "nh"), "cacheable block flags: %s", flags);
            if (EXPECT(vm_flags(big, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "nh"), "block above the top: %s", flags);
            if (EXPECT(vm_flags(small, flags, sizeof flags)))
                EXPECTF(has_flag(flags, "nh"), "region flags: %s", flags);
        }
        EXPECT_U_EQ(kame_pool_set_thp_policy(KAME_THP_SYSTEM), 0);
        EXPECT_U_EQ(kame_pool_set_thp_policy(9), 0); /* unknown: ignored */
        EXPECT_INT_EQ(kame_pool_get_thp_policy(), KAME_THP_SYSTEM);
        kame_pool_set_thp_policy(KAME_THP_BLOCKS);
        kame_pool_free(fresh);
        kame_pool_free(mid);
        kame_pool_free(big);
        kame_pool_free(small);
    }
}

/* ---- STRICT ------------------------------------------------------------------- */

#define CLASS_SIZE 28000 /* the 28 KiB class: 36 slots in a 1 MiB chunk */
static char *chunk_blocks[64];
static unsigned chunk_slots;

/* Fills one chunk of the class and starts the next, so the full one is
 * given up by its owner: every later free of its slots is cross-thread. */
static void *fill_chunk(void *arg)
{
    (void)arg;
    char *prev = NULL;
    chunk_slots = 0;
    for (;;) {
        char *p = kame_pool_malloc(CLASS_SIZE);
        if (prev != NULL && p != prev + 28672) {
            kame_pool_free(p);
            break;
        }
        chunk_blocks[chunk_slots++] = prev = p;
        if (chunk_slots == 64)
            break;
    }
    return NULL;
}

static void test_strict(void)
{
    for (int level = KAME_RT_STRICT; level >= KAME_RT_DEFER; level--) {
        CHECK("level %d: the last cross-thread free of a chunk publishes it %s", level,
              level == KAME_RT_STRICT ? "at once" : "with the batch") {
            kame_pool_trim();
            pthread_t t;
            pthread_create(&t, NULL, fill_chunk, NULL);
            pthread_join(t, NULL);
            if (!EXPECT_U_EQ(chunk_slots, 36))
                continue;
            kame_pool_set_realtime_thread(level);
            for (unsigned i = 0; i < chunk_slots; i++)
                kame_pool_free(chunk_blocks[i]);
            /* Published, the chunk is free and cached: the next 1 MiB block
             * is that chunk.  Batched, 4 slots wait (36 = 32 + 4). */
            char *d = kame_pool_malloc(MiB);
            kame_pool_set_realtime_thread(KAME_RT_OFF);
            if (level == KAME_RT_STRICT)
                EXPECT(d == chunk_blocks[0]);
            else
                EXPECT(d != chunk_blocks[0]);
            kame_pool_free(d);
            kame_pool_trim();
        }
    }
}

int main(void)
{
    test_levels();
    test_parking();
    test_policies();
    test_mode();
    test_prewarm();
    test_regions();
    test_strict();
    return kp_check_summary();
}
