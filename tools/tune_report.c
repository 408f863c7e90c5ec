/* kamepool --tune-report: measures on this machine the cost of the calls
 * the pool makes (mmap, munmap, madvise, a page fault per page, the TLB
 * shootdown other running threads add to an unmap) and prints the option
 * values those figures suggest.  Advice only: nothing is applied, and the
 * figures vary from run to run.  `--quick` measures less, for tests. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static size_t page;
static int reps = 20;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp);
    return v[n / 2];
}

static char *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("kamepool --tune-report: mmap");
        exit(1);
    }
    return p;
}

static void touch(char *p, size_t len)
{
    for (size_t i = 0; i < len; i += page)
        ((volatile char *)p)[i] = 1;
}

/* ---- the measurements (nanoseconds, medians of `reps`) ---------------- */

static double t_mmap, t_munmap, t_fault, t_madvise_unit, t_munmap_touched, t_shoot_alone, t_shoot_busy;
static int busy_threads;

static void measure_map(void)
{
    double a[64], b[64];
    for (int i = 0; i < reps; i++) {
        double t0 = now_ns();
        char *p = map(32 * MiB);
        double t1 = now_ns();
        munmap(p, 32 * MiB);
        double t2 = now_ns();
        a[i] = t1 - t0;
        b[i] = t2 - t1;
    }
    t_mmap = median(a, reps);
    t_munmap = median(b, reps);
}

static void measure_faults(void)
{
    size_t len = 16 * MiB;
    double f[64], u[64];
    for (int i = 0; i < reps; i++) {
        char *p = map(len);
        double t0 = now_ns();
        touch(p, len);
        double t1 = now_ns();
        munmap(p, len);
        double t2 = now_ns();
        f[i] = (t1 - t0) / (double)(len / page);
        u[i] = t2 - t1;
    }
    t_fault = median(f, reps);
    t_munmap_touched = median(u, reps);
}

static void measure_madvise(void)
{
    size_t unit = 256 << 10, len = 8 * MiB;
    double m[64];
    for (int i = 0; i < reps; i++) {
        char *p = map(len);
        touch(p, len);
        double t0 = now_ns();
        for (size_t off = 0; off < len; off += unit)
            madvise(p + off, unit, MADV_DONTNEED);
        double t1 = now_ns();
        m[i] = (t1 - t0) / (double)(len / unit);
        munmap(p, len);
    }
    t_madvise_unit = median(m, reps);
}

/* Threads that keep running in this address space, so that unmapping
 * touched memory must flush their TLBs too. */
static atomic_int stop;
static char *shared_page;

static void *spinner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        ((volatile char *)shared_page)[0]++;
    return NULL;
}

static double unmap_touched_unit(void)
{
    size_t len = 256 << 10;
    double v[64];
    for (int i = 0; i < reps; i++) {
        char *p = map(len);
        touch(p, len);
        double t0 = now_ns();
        madvise(p, len, MADV_DONTNEED);
        double t1 = now_ns();
        munmap(p, len);
        v[i] = t1 - t0;
    }
    return median(v, reps);
}

static void measure_shootdown(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t_shoot_alone = unmap_touched_unit();
    busy_threads = cpus > 1 ? (int)(cpus - 1 < 7 ? cpus - 1 : 7) : 1;
    shared_page = map(page);
    pthread_t t[8];
    int made = 0;
    for (; made < busy_threads; made++)
        if (pthread_create(&t[made], NULL, spinner, NULL) != 0)
            break;
    busy_threads = made;
    usleep(20000);
    t_shoot_busy = unmap_touched_unit();
    atomic_store(&stop, 1);
    for (int i = 0; i < made; i++)
        pthread_join(t[i], NULL);
}

static void us(const char *what, double ns)
{
    printf("  %-44s %10.2f us\n", what, ns / 1000.0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--quick") == 0)
        reps = 5;
    page = (size_t)sysconf(_SC_PAGESIZE);
    measure_map();
    measure_faults();
    measure_madvise();
    measure_shootdown();

    printf("kamepoolalloc host report (advice only: nothing is applied)\n");
    printf("measured (medians of %d runs, page %zu B, %ld CPUs online):\n", reps, page,
           sysconf(_SC_NPROCESSORS_ONLN));
    us("mmap 32 MiB (not touched)", t_mmap);
    us("munmap 32 MiB (not touched)", t_munmap);
    printf("  %-44s %10.3f us\n", "page fault, per page (first touch)", t_fault / 1000.0);
    us("munmap 16 MiB, touched", t_munmap_touched);
    us("madvise(DONTNEED) of a 256 KiB unit, touched", t_madvise_unit);
    us("same, alone in the process", t_shoot_alone);
    char label[64];
    snprintf(label, sizeof label, "same, %d other thread%s running (TLB shootdown)", busy_threads,
             busy_threads == 1 ? "" : "s");
    us(label, t_shoot_busy);

    /* A fresh 1 MiB block costs a map, its faults and an unmap; a warm one
     * from the cache costs none of it. */
    double fresh_1m = t_mmap + t_munmap + t_fault * (double)(MiB / page);
    /* The drain purges up to 4 blocks per interval: keep that under 1 % of
     * the interval, taking 1 MiB blocks. */
    double drain_work = 4 * t_madvise_unit * 4;
    unsigned drain_ms = (unsigned)(drain_work * 100 / 1e6) + 1;
    double shoot = t_shoot_busy - t_shoot_alone;
    printf("suggested:\n");
    printf("  KAME_POOL_LAZY_DRAIN_MS=%u\n", drain_ms < 10 ? 10 : drain_ms);
    printf("    purging keeps under 1%% of each interval (4 blocks of 1 MiB per interval, %.1f us)\n",
           drain_work / 1000.0);
    printf("  KAME_POOL_LARGE_CACHE_TOP=%s\n", fresh_1m * 64 > 5e6 ? "256M" : "64M");
    printf("    a fresh 1 MiB block costs %.1f us (map, faults, unmap), a cached one nothing; %s\n",
           fresh_1m / 1000.0,
           fresh_1m * 64 > 5e6 ? "faults are dear here: cache bigger blocks" : "the default top is enough");
    printf("  KAME_POOL_THREAD_EXIT_RECLAIM=%s\n", shoot > t_shoot_alone ? "off" : "on");
    printf("    giving memory back while %d other thread%s run costs %+.1f us per unit over doing it alone; %s\n",
           busy_threads, busy_threads == 1 ? "" : "s", shoot / 1000.0,
           shoot > t_shoot_alone ? "keep exiting threads' memory in the global cache"
                                 : "returning it at thread exit is cheap");
    return 0;
}
