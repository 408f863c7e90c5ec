/* Small blocks' memory comes back.
 *   - A thread allocates many small blocks and stays alive and idle while
 *     another thread frees them all: the memory goes back as the frees
 *     happen (bounded by the cache cap), and one kame_pool_trim from
 *     either thread leaves the process near where it started.
 *   - A thread that holds a few blocks in a few classes adds little
 *     resident memory, and a chunk in steady use has at most a page of
 *     slots carved ahead of its use.
 *   - Partly used chunks left by exited threads are reused by class, and
 *     so are a producer's whose consumer keeps some of its blocks.
 *   - Slots another thread frees are kept by it, or sent back to their
 *     chunk's owner, by where the freeing thread's own blocks die.
 *   - A chunk another thread empties while its owner rests it is retired
 *     after a drain tick; one that rests with free slots at the end of
 *     its carved part gives their pages back (at trim, or when idle).
 *   - A chunk the cache does not keep goes back to its region with its
 *     pages, within a share of the cap; the next claim reuses it, and the
 *     drain purges it once idle.
 *   - realloc grows a large block without faulting its pages in again,
 *     in place or moved, and shrinks one to another large size in place,
 *     its tail unmapped (Linux; growth by mremap). */
#include "check.h"

#include <kame_pool.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* Whether p is one of the n blocks of set. */
static int in_blocks(void *const *set, int n, const void *p)
{
    for (int i = 0; i < n; i++)
        if (set[i] == p) return 1;
    return 0;
}

/* Allocates n blocks of `size` into set. */
static void malloc_blocks(void **set, int n, size_t size)
{
    for (int i = 0; i < n; i++)
        set[i] = kame_pool_malloc(size);
}

/* Frees the n blocks of set from a thread of its own, which exits (its
 * last batch published) before this returns. */
struct block_set { void **set; int n; };

static void *free_block_set(void *arg)
{
    const struct block_set *b = arg;
    for (int i = 0; i < b->n; i++)
        kame_pool_free(b->set[i]);
    return NULL;
}

static void free_elsewhere(void **set, int n)
{
    struct block_set b = { set, n };
    pthread_t t;
    pthread_create(&t, NULL, free_block_set, &b);
    pthread_join(t, NULL);
}

/* Whether p's page is resident (-1: mincore failed). */
static int page_resident(const void *p)
{
    unsigned char v = 0;
    if (mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) != 0)
        return -1;
    return v & 1;
}

/* Runs fn on a thread of its own (a fresh heap) and waits for it. */
static void run_in_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_create(&t, NULL, fn, NULL);
    pthread_join(t, NULL);
}

/* ---- The idle owner ---------------------------------------------------------- */

static void **idle_blocks;
static size_t idle_count;
static sem_t idle_done, idle_wake;
static int idle_trims; /* the owner trims when woken */

static void *idle_owner(void *arg)
{
    (void)arg;
    static const size_t sizes[] = { 16, 64, 64, 200, 1000 };
    for (size_t i = 0; i < idle_count; i++) {
        size_t n = sizes[i % 5];
        idle_blocks[i] = kame_pool_malloc(n);
        memset(idle_blocks[i], 0x33, n);
    }
    sem_post(&idle_done);
    sem_wait(&idle_wake); /* idle while another thread frees everything */
    if (idle_trims)
        kame_pool_trim();
    sem_post(&idle_done);
    sem_wait(&idle_wake);
    return NULL;
}

static void idle_owner_case(int owner_trims)
{
    size_t total = (size_t)(256 * MiB * kp_test_scale());
    if (total < 48 * MiB)
        total = 48 * MiB;
    idle_count = total / 268; /* the sizes' mean */
    idle_blocks = malloc(idle_count * sizeof *idle_blocks);
    /* Resident before `base` is read: the array is the test's, not the
     * pool's (a few MiB at scale 1, 32 at scale 4). */
    memset(idle_blocks, 0, idle_count * sizeof *idle_blocks);
    idle_trims = owner_trims;
    sem_init(&idle_done, 0, 0);
    sem_init(&idle_wake, 0, 0);
    kame_pool_trim();
    size_t base = kp_resident_bytes();
    pthread_t t;
    pthread_create(&t, NULL, idle_owner, NULL);
    sem_wait(&idle_done);
    size_t full = kp_resident_bytes();
    for (size_t i = 0; i < idle_count; i++)
        kame_pool_free(idle_blocks[i]);
    size_t freed = kp_resident_bytes();
    if (!owner_trims)
        kame_pool_trim();
    sem_post(&idle_wake); /* the owner trims now if it is its turn */
    sem_wait(&idle_done);
    size_t trimmed = kp_resident_bytes();
    printf("    idle owner (%s trims): base %zu MiB, allocated %zu MiB, after the other thread's frees %zu MiB, "
           "after trim %zu MiB\n",
           owner_trims ? "owner" : "freeing thread", base >> 20, (full - base) >> 20, freed >> 20, trimmed >> 20);
    /* Freed chunks stay warm in the cache at most up to its cap, and as
     * dirty units up to 1/32 of it... */
    size_t cap = kame_pool_get_large_cache_cap();
    EXPECT_U_LE(freed, base + cap + cap / 32 + 16 * MiB);
    /* ...and trim gives them back: the live set is empty now. */
    EXPECTF(trimmed <= base + 8 * MiB + (full - base) / 50, "resident %zu MiB after trim, %zu MiB before any of it",
            trimmed >> 20, base >> 20);
    sem_post(&idle_wake);
    pthread_join(t, NULL);
    free(idle_blocks);
}

static void test_idle_owner(void)
{
    CHECK("an idle thread's small blocks freed by another thread come back (trim by the freeing thread)") {
        idle_owner_case(0);
    }
    CHECK("an idle thread's small blocks freed by another thread come back (trim by the owner)") {
        idle_owner_case(1);
    }
}

/* ---- A thread's footprint -------------------------------------------------------- */

enum { FP_THREADS = 200 };
static sem_t fp_ready, fp_go;

static void *few_blocks(void *arg)
{
    (void)arg;
    void *p[6];
    static const size_t sizes[] = { 16, 24, 64, 64, 256, 300 };
    for (int i = 0; i < 6; i++) {
        p[i] = kame_pool_malloc(sizes[i]);
        memset(p[i], 1, sizes[i]);
    }
    sem_post(&fp_ready);
    sem_wait(&fp_go);
    for (int i = 0; i < 6; i++)
        kame_pool_free(p[i]);
    return NULL;
}

static void *no_blocks(void *arg)
{
    (void)arg;
    sem_post(&fp_ready);
    sem_wait(&fp_go);
    return NULL;
}

/* Resident bytes per live thread running fn. */
static size_t per_thread(void *(*fn)(void *))
{
    static pthread_t t[FP_THREADS];
    sem_init(&fp_ready, 0, 0);
    sem_init(&fp_go, 0, 0);
    size_t before = kp_resident_bytes();
    int n = 0;
    for (; n < FP_THREADS; n++)
        if (pthread_create(&t[n], NULL, fn, NULL) != 0)
            break;
    for (int i = 0; i < n; i++)
        sem_wait(&fp_ready);
    size_t during = kp_resident_bytes();
    for (int i = 0; i < n; i++)
        sem_post(&fp_go);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return n ? (during > before ? during - before : 0) / (size_t)n : 0;
}

static void test_footprint(void)
{
    CHECK("a thread holding a few blocks in a few classes adds under 64 KiB of resident memory") {
        kame_pool_free(kame_pool_malloc(1)); /* the main thread's heap exists */
        size_t bare = per_thread(no_blocks);
        size_t with = per_thread(few_blocks);
        printf("    per thread: %zu KiB resident without blocks (stack, TLS), %zu KiB with six blocks in four "
               "classes\n",
               bare >> 10, with >> 10);
        EXPECTF(with <= bare + 64 * KiB, "%zu KiB per thread over a thread without blocks", (with - bare) >> 10);
    }
}

/* ---- How far a chunk is carved ahead ---------------------------------------------- */

enum { AHEAD_SIZE = 112, AHEAD_FIRST = 4096 / AHEAD_SIZE, AHEAD_BLOCKS = AHEAD_FIRST + 1 };
/* 20000 bytes into the chunk: past a page's carve after the first one
 * (which ends at 2 * 36 * 112 = 8064), inside a four-page carve (which ends
 * at 36 * 112 + 146 * 112 = 20384), on a page of its own with 4 and 16 KiB
 * pages alike. */
#define AHEAD_PROBE 20000
static int ahead_owner_frees; /* the case: the owner frees into the chunk first */
static int ahead_probe_resident;

static void *carve_ahead(void *arg)
{
    (void)arg;
    void *p[AHEAD_BLOCKS];
    p[0] = kame_pool_malloc(AHEAD_SIZE);
    char *chunk = (char *)((uintptr_t)p[0] & ~(uintptr_t)(256 * KiB - 1));
    EXPECTF(p[0] == (void *)chunk, "the first %d-byte block of a new thread is %zu bytes into its unit, not a new chunk's first slot",
            AHEAD_SIZE, (size_t)((char *)p[0] - chunk));
    ahead_probe_resident = -1;
    if (p[0] != (void *)chunk)
        return NULL;
    /* Only the first carve's slots (one page) hold list entries: the rest
     * of the unit may be dropped, whatever a former life left in it. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t keep = (AHEAD_FIRST * AHEAD_SIZE + page - 1) & ~(page - 1);
    EXPECT_INT_EQ(madvise(chunk + keep, 256 * KiB - keep, MADV_DONTNEED), 0);
    EXPECT_INT_EQ(page_resident(chunk + AHEAD_PROBE), 0);
    int n = 1;
    if (ahead_owner_frees) {
        kame_pool_free(p[0]);
        n = 0;
    }
    /* The first carve's slots, then one from the next carve. */
    for (; n < AHEAD_BLOCKS; n++) {
        p[n] = kame_pool_malloc(AHEAD_SIZE);
        memset(p[n], 0x5a, AHEAD_SIZE);
    }
    if (ahead_owner_frees)
        EXPECT_INT_EQ((int)((char *)p[AHEAD_FIRST] - chunk), AHEAD_FIRST * AHEAD_SIZE);
    ahead_probe_resident = page_resident(chunk + AHEAD_PROBE);
    for (int i = 0; i < n; i++)
        kame_pool_free(p[i]);
    return NULL;
}

static void test_carve_ahead(void)
{
    CHECK("a chunk its owner frees into is carved a page at a time") {
        ahead_owner_frees = 1;
        run_in_thread(carve_ahead);
        EXPECT_INT_EQ(ahead_probe_resident, 0);
    }
    CHECK("a chunk being filled (no free into it yet) is carved four pages at a time") {
        ahead_owner_frees = 0;
        run_in_thread(carve_ahead);
        EXPECT_INT_EQ(ahead_probe_resident, 1);
    }
}

/* ---- Reuse of exited threads' chunks by class -------------------------------------- */

static void *leave_some(void *arg)
{
    void **keep = arg;
    void *p[2000];
    for (int i = 0; i < 2000; i++)
        p[i] = kame_pool_malloc(96);
    for (int i = 0; i < 2000; i++) {
        if (i % 50 == 0)
            keep[i / 50] = p[i];
        else
            kame_pool_free(p[i]);
    }
    return NULL;
}

static void test_adoption(void)
{
    CHECK("chunks left partly used by exited threads are reused for their class") {
        static void *kept[200][40];
        for (int r = 0; r < 5; r++) {
            pthread_t t;
            pthread_create(&t, NULL, leave_some, kept[r]);
            pthread_join(t, NULL);
        }
        size_t before = kame_pool_reserved_bytes();
        for (int r = 5; r < 200; r++) {
            pthread_t t;
            pthread_create(&t, NULL, leave_some, kept[r]);
            pthread_join(t, NULL);
        }
        /* 195 threads each leave 40 blocks of 96 B: they share chunks. */
        EXPECT_U_LE(kame_pool_reserved_bytes(), before + 32 * MiB);
        for (int r = 0; r < 200; r++)
            for (int i = 0; i < 40; i++) {
                EXPECT_U_GE(kame_pool_malloc_usable_size(kept[r][i]), 96);
                kame_pool_free(kept[r][i]);
            }
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

/* A thread fills chunks of one class without freeing into them, so each is
 * detached when it runs dry.  Its own first free into such a chunk takes
 * the chunk back (tearing down what it built costs one CAS per chunk), but
 * not once another thread has freed into it: the chunk then stays detached,
 * for whichever thread next needs its class.  The class is one nothing
 * else here uses. */
enum { TAKE_SIZE = 1800, TAKE_BLOCKS = 600 };
static void *take_set[TAKE_BLOCKS];
static uintptr_t take_unit;

/* The pool's statistics now (reading them also publishes the caller's
 * batched frees). */
static kame_pool_stats_t pool_stats(void)
{
    kame_pool_stats_t st = { .version = KAME_POOL_STATS_VERSION };
    kame_pool_get_stats(&st);
    return st;
}

static size_t detached_chunks(void) { return (size_t)pool_stats().chunks_detached; }

/* The index of the first block in take_unit, and how many are in it. */
static int take_first_in_unit(int *count)
{
    int first = -1, n = 0;
    for (int i = 0; i < TAKE_BLOCKS; i++)
        if (take_set[i] != NULL && (uintptr_t)take_set[i] >> 18 == take_unit) {
            if (first < 0) first = i;
            n++;
        }
    *count = n;
    return first;
}

static void *free_one_in_unit(void *arg)
{
    (void)arg;
    int n, i = take_first_in_unit(&n);
    kame_pool_free(take_set[i]);
    take_set[i] = NULL;
    return NULL; /* thread exit publishes the batch */
}

static void *alloc_one_of_class(void *arg)
{
    *(void **)arg = kame_pool_malloc(TAKE_SIZE);
    return NULL;
}

static void test_take_back(void)
{
    CHECK("a thread's first free into a chunk it detached takes the chunk back") {
        for (int i = 0; i < TAKE_BLOCKS; i++)
            take_set[i] = kame_pool_malloc(TAKE_SIZE);
        take_unit = (uintptr_t)take_set[0] >> 18; /* the first chunk: full, detached */
        int n, i = take_first_in_unit(&n);
        EXPECT(n > 32);
        size_t before = detached_chunks();
        kame_pool_free(take_set[i]);
        take_set[i] = NULL;
        EXPECT_U_EQ(detached_chunks(), before - 1);
        while ((i = take_first_in_unit(&n)) >= 0) { /* the rest, on the owner's own path */
            kame_pool_free(take_set[i]);
            take_set[i] = NULL;
        }
        EXPECT_U_EQ(detached_chunks(), before - 1);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
    CHECK("once another thread has freed into it, the chunk stays detached and goes to the next thread of its class") {
        int first = 0;
        while (first < TAKE_BLOCKS && take_set[first] == NULL) first++;
        take_unit = (uintptr_t)take_set[first] >> 18; /* the second chunk: full, detached */
        int n;
        take_first_in_unit(&n);
        EXPECT(n > 32);
        size_t before = detached_chunks();
        run_in_thread(free_one_in_unit);
        int i = take_first_in_unit(&n);
        kame_pool_free(take_set[i]); /* the owner's first free: a push, like the other's */
        take_set[i] = NULL;
        EXPECT_U_EQ(detached_chunks(), before);
        void *got = NULL;
        pthread_t t;
        pthread_create(&t, NULL, alloc_one_of_class, &got);
        pthread_join(t, NULL);
        EXPECT((uintptr_t)got >> 18 == take_unit); /* adopted, not a fresh chunk */
        kame_pool_free(got);
        for (i = 0; i < TAKE_BLOCKS; i++)
            kame_pool_free(take_set[i]);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

/* One thread replaces random blocks of a working set spread over several
 * chunks of one class (the owner frees into full chunks): the chunks are
 * parked and taken back, not left for new ones, and frees from another
 * thread into parked chunks are found before a new chunk is taken. */
enum { CHURN_LIVE = 5 * 4096 }; /* 64 B blocks: five chunks' worth */
static void *churn_set[CHURN_LIVE];

static void *free_half(void *arg)
{
    (void)arg;
    for (int i = 0; i < CHURN_LIVE; i += 2) {
        kame_pool_free(churn_set[i]);
        churn_set[i] = NULL;
    }
    return NULL;
}

static void test_parked_chunks(void)
{
    CHECK("a thread churning a working set larger than a chunk reuses its chunks") {
        uint64_t rng = 88172645463325252ull;
        for (int i = 0; i < CHURN_LIVE; i++)
            churn_set[i] = kame_pool_malloc(64);
        size_t before = kame_pool_reserved_bytes();
        for (int op = 0; op < 40 * CHURN_LIVE; op++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            size_t i = (size_t)(rng % CHURN_LIVE);
            kame_pool_free(churn_set[i]);
            churn_set[i] = kame_pool_malloc(64);
            *(char *)churn_set[i] = 1;
        }
        EXPECT_U_EQ(kame_pool_reserved_bytes(), before); /* no new region */
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
    CHECK("frees by another thread into parked chunks are used before new chunks") {
        /* The 256 KiB units the working set occupies. */
        enum { MAX_UNITS = 64 };
        uintptr_t units[MAX_UNITS];
        int n_units = 0;
        for (int i = 0; i < CHURN_LIVE; i++) {
            uintptr_t u = (uintptr_t)churn_set[i] >> 18;
            int k = 0;
            while (k < n_units && units[k] != u) k++;
            if (k == n_units && n_units < MAX_UNITS) units[n_units++] = u;
        }
        EXPECT(n_units >= 5 && n_units < MAX_UNITS);
        run_in_thread(free_half);
        int outside = 0;
        for (int i = 0; i < CHURN_LIVE; i += 2) {
            churn_set[i] = kame_pool_malloc(64);
            uintptr_t u = (uintptr_t)churn_set[i] >> 18;
            int k = 0;
            while (k < n_units && units[k] != u) k++;
            outside += k == n_units;
        }
        EXPECT_INT_EQ(outside, 0); /* every block from a chunk the frees gave slots to */
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        for (int i = 0; i < CHURN_LIVE; i++)
            kame_pool_free(churn_set[i]);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

/* A thread's working set spread over several chunks of one class, one of
 * them parked: another thread frees every block of that chunk.  The chunk
 * has no live slot left, but its owner counts the remote frees as out
 * until it takes them; it must not keep the chunk until it next needs it
 * as current (it may never), but retire it once a drain tick has passed
 * and it allocates on a slow path.  The class is one nothing else here
 * uses (stdio's buffers are 4 KiB blocks); 400 blocks fill some five
 * chunks. */
enum { REST_BLOCKS = 400, REST_SIZE = 3000 };
static void *rest_set[REST_BLOCKS];
static uintptr_t rest_unit;

static void *free_rest_unit(void *arg)
{
    (void)arg;
    for (int i = 0; i < REST_BLOCKS; i++)
        if ((uintptr_t)rest_set[i] >> 18 == rest_unit) {
            kame_pool_free(rest_set[i]);
            rest_set[i] = NULL;
        }
    return NULL; /* thread exit publishes its batches */
}

static size_t bucket_chunks(void) { return (size_t)pool_stats().chunks_bucket; }

static void test_resting_emptied(void)
{
    CHECK("a parked chunk whose every block another thread freed is retired after a drain tick") {
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(20);
        /* The owner frees into each chunk while it is current, so each is
         * parked, not detached, when it fills. */
        for (int i = 0; i < REST_BLOCKS; i++) {
            rest_set[i] = kame_pool_malloc(REST_SIZE);
            if (i % 8 == 0) {
                kame_pool_free(rest_set[i]);
                rest_set[i] = kame_pool_malloc(REST_SIZE);
            }
            memset(rest_set[i], 0x5a, REST_SIZE);
        }
        rest_unit = (uintptr_t)rest_set[0] >> 18; /* the first chunk: full, parked */
        int in_unit = 0;
        for (int i = 0; i < REST_BLOCKS; i++)
            in_unit += (uintptr_t)rest_set[i] >> 18 == rest_unit;
        EXPECT(in_unit > 32);
        size_t before = bucket_chunks();
        run_in_thread(free_rest_unit);
        /* Past a drain interval, big blocks' frees bring the owner to the
         * drain clock (every 256 frees into its cache), and a
         * first malloc of another class is a slow path.  The interval is
         * long enough that the loop runs within one tick, where the
         * block's size stays in demand in the thread's cache: with 1 ms
         * ticks its frees could all miss the cache and never count. */
        struct timespec pause = { 0, 30 * 1000 * 1000 };
        nanosleep(&pause, NULL);
        for (int i = 0; i < 1000; i++)
            kame_pool_free(kame_pool_malloc(64 * KiB));
        void *other = kame_pool_malloc(20000); /* a chunk of its own class, maybe the retired one */
        EXPECTF(bucket_chunks() <= before, "%zu bucket chunks, %zu before the other thread's frees and one class more",
                bucket_chunks(), before);
        /* Its slots serve the class again like any others. */
        for (int i = 0; i < REST_BLOCKS; i++)
            if (rest_set[i] == NULL) {
                rest_set[i] = kame_pool_malloc(REST_SIZE);
                memset(rest_set[i], 0xa5, REST_SIZE);
            }
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        for (int i = 0; i < REST_BLOCKS; i++)
            kame_pool_free(rest_set[i]);
        kame_pool_free(other);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_set_lazy_drain_interval_ms(interval);
    }
}

/* ---- Dirty units ----------------------------------------------------------- */

static size_t units_dirty(void)
{
    kame_pool_stats_t st = { .version = KAME_POOL_STATS_VERSION };
    kame_pool_get_stats(&st);
    return (size_t)st.units_dirty;
}

/* Misses of mapping sizes run the drain clock (their blocks are unmapped,
 * never held as dirty units). */
static void run_drain(void)
{
    struct timespec pause = { 0, 30 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    for (int i = 0; i < 3; i++) {
        void *q = kame_pool_malloc(5 * MiB + (size_t)i * 64 * KiB);
        struct timespec tick = { 0, 3 * 1000 * 1000 };
        nanosleep(&tick, NULL);
        kame_pool_free(q);
    }
}

/* Allocates a block of n bytes, writes `byte` over it and frees it;
 * returns where it was (NULL, reported, when malloc failed). */
static char *freed_touched(size_t n, int byte)
{
    char *p = kame_pool_malloc(n);
    if (!EXPECT_NOT_NULL(p))
        return NULL;
    memset(p, byte, n);
    kame_pool_free(p);
    return p;
}

/* Each case runs on a thread of its own, whose cache has no size in
 * demand: a block it frees once is not kept there. */
static void *dirty_reuse_and_drain(void *arg)
{
    (void)arg;
    char *p = freed_touched(MiB, 0x77);
    if (p == NULL)
        return NULL;
    EXPECT_U_EQ(units_dirty(), 4);
    EXPECT_INT_EQ(page_resident(p), 1);
    /* The next claim takes the dirty units before clean ones. */
    char *q = kame_pool_malloc(MiB);
    EXPECTF(q == p, "claimed %p, the dirty units were at %p", (void *)q, (void *)p);
    EXPECT_U_EQ(units_dirty(), 0);
    char *r = freed_touched(640 * KiB, 0x78); /* three units */
    if (r == NULL)
        return NULL;
    EXPECT_U_EQ(units_dirty(), 3);
    EXPECT_INT_EQ(page_resident(r), 1);
    run_drain();
    EXPECT_U_EQ(units_dirty(), 0);
    EXPECT_INT_EQ(page_resident(r), 0);
    kame_pool_free(q);
    return NULL;
}

static void *dirty_bounds(void *arg)
{
    (void)arg;
    char *a = kame_pool_malloc(MiB), *b = kame_pool_malloc(640 * KiB);
    if (!EXPECT_NOT_NULL(a) || !EXPECT_NOT_NULL(b))
        return NULL;
    memset(a, 1, MiB);
    memset(b, 2, 640 * KiB);
    kame_pool_free(a);
    EXPECT_U_EQ(units_dirty(), 4);
    kame_pool_free(b); /* over the share: purged at once */
    EXPECT_U_EQ(units_dirty(), 4);
    EXPECT_INT_EQ(page_resident(b), 0);
    EXPECT_INT_EQ(page_resident(a), 1);
    kame_pool_trim();
    EXPECT_U_EQ(units_dirty(), 0);
    EXPECT_INT_EQ(page_resident(a), 0);
    /* Lowering the cap gives back dirty units over the new share. */
    char *d = freed_touched(400 * KiB, 4);
    if (d == NULL)
        return NULL;
    EXPECT_U_EQ(units_dirty(), 2);
    kame_pool_set_large_cache_cap(8 * MiB); /* share: 256 KiB */
    EXPECT_U_EQ(units_dirty(), 0);
    EXPECT_INT_EQ(page_resident(d), 0);
    kame_pool_set_large_cache_cap(32 * MiB);
    /* Stopping the drain gives back what it would have purged; then
     * nothing is held dirty, since nothing would purge it. */
    d = freed_touched(200 * KiB, 5); /* a unit count of its own: not in demand */
    if (d == NULL)
        return NULL;
    EXPECT_U_EQ(units_dirty(), 1);
    kame_pool_set_lazy_drain_interval_ms(0);
    EXPECT_U_EQ(units_dirty(), 0);
    EXPECT_INT_EQ(page_resident(d), 0);
    return NULL;
}

/* With the drain stopped nothing is held dirty: nothing would purge it. */
static void *dirty_drain_stopped(void *arg)
{
    (void)arg;
    char *c = freed_touched(400 * KiB, 3);
    if (c == NULL)
        return NULL;
    EXPECT_U_EQ(units_dirty(), 0);
    EXPECT_INT_EQ(page_resident(c), 0);
    return NULL;
}

static void test_dirty_units(void)
{
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    size_t cap = kame_pool_get_large_cache_cap();
    CHECK("a chunk the cache does not keep stays warm for the next claim, and is purged once idle") {
        kame_pool_set_lazy_drain_interval_ms(1);
        kame_pool_trim();
        EXPECT_U_EQ(units_dirty(), 0);
        run_in_thread(dirty_reuse_and_drain);
    }
    CHECK("dirty units stay within 1/32 of the cache cap; trim, a lower cap and a stopped drain purge them") {
        kame_pool_set_lazy_drain_interval_ms(10);
        kame_pool_trim();
        kame_pool_set_large_cache_cap(32 * MiB); /* dirty units: at most 1 MiB */
        run_in_thread(dirty_bounds);
        run_in_thread(dirty_drain_stopped);
    }
    kame_pool_set_large_cache_cap(cap);
    kame_pool_set_lazy_drain_interval_ms(interval);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
}

/* ---- the owner's frees --------------------------------------------------------- */

/* A block freed into the current chunk is the next one handed out, however
 * many times: the count of those frees (which decides parking) wraps
 * without disturbing the chunk (the debug builds wrap it every 1024, and
 * assert that it stays in range).  At the full check level (arg non-NULL)
 * the frees go onto the local list, which is handed out once checked: the
 * loop cycles through a few slots instead of one. */
static void *one_slot_loop(void *arg)
{
    void *first = kame_pool_malloc(64);
    kame_pool_free(first);
    size_t other = 0;
    for (int i = 0; i < 5000; i++) {
        void *p = kame_pool_malloc(64);
        other += p != first;
        kame_pool_free(p);
    }
    if (arg == NULL)
        EXPECT_U_EQ(other, 0);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

#define CHURN_LIVE 16384
#define CHURN_OPS 200000

static int ptr_order(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* A working set of 64-byte blocks replaced at random (a new block, then
 * the old one freed), as a program keeping objects in a table does: the
 * slots its frees give back are handed out again before the chunk being
 * filled is carved further, so the blocks it ever sees are few more than
 * it holds (carving on would add a whole chunk's worth, a quarter more). */
static void *random_churn(void *arg)
{
    (void)arg;
    void **live = malloc(CHURN_LIVE * sizeof(void *));
    uintptr_t *seen = malloc((CHURN_LIVE + CHURN_OPS) * sizeof(uintptr_t));
    if (!EXPECT(live != NULL && seen != NULL))
        return NULL;
    size_t n = 0;
    for (int i = 0; i < CHURN_LIVE; i++) {
        live[i] = kame_pool_malloc(64);
        memset(live[i], 1, 64);
        seen[n++] = (uintptr_t)live[i];
    }
    uint64_t rng = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < CHURN_OPS; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        size_t k = (size_t)(rng % CHURN_LIVE);
        void *p = kame_pool_malloc(64);
        memset(p, 2, 64);
        seen[n++] = (uintptr_t)p;
        kame_pool_free(live[k]);
        live[k] = p;
    }
    qsort(seen, n, sizeof(uintptr_t), ptr_order);
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        distinct += i == 0 || seen[i] != seen[i - 1];
    EXPECTF(distinct <= CHURN_LIVE + CHURN_LIVE / 8, "%zu distinct blocks for %d live", distinct, CHURN_LIVE);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    for (int i = 0; i < CHURN_LIVE; i++)
        kame_pool_free(live[i]);
    free(live);
    free(seen);
    return NULL;
}

static void test_owner_frees(void)
{
    CHECK("a block freed into the current chunk is the next handed out, past the count of such frees") {
        run_in_thread(one_slot_loop);
    }
    CHECK("the same at the full check level, where those frees go the checked way") {
        int level = kame_pool_get_check_level();
        kame_pool_set_check_level(2);
        pthread_t t;
        pthread_create(&t, NULL, one_slot_loop, "checked");
        pthread_join(t, NULL);
        kame_pool_set_check_level(level);
    }
    CHECK("a working set replaced at random reuses freed slots before carving new ones") {
        run_in_thread(random_churn);
    }
}

/* ---- realloc of a large block ---------------------------------------------------- */

#ifdef __linux__
static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void test_realloc_grow(void)
{
    CHECK("realloc grows a large block without faulting its pages in again, in place or moved") {
        for (int blocked = 0; blocked < 2; blocked++) {
            unsigned char *p = kame_pool_malloc(6 * MiB);
            if (!EXPECT(p != NULL))
                break;
            size_t usable = kame_pool_malloc_usable_size(p);
            for (size_t i = 0; i < usable; i++)
                p[i] = (unsigned char)(i * 31 + 7);
            void *wall = MAP_FAILED;
            if (blocked) {
                /* A page right after the block: it cannot grow in place. */
                wall = mmap(p + usable, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1,
                            0);
                EXPECT(wall == MAP_FAILED ? errno == EEXIST : wall == (void *)(p + usable));
            }
            long before = minor_faults();
            unsigned char *q = kame_pool_realloc(p, usable + 2 * MiB);
            long faults = minor_faults() - before;
            if (!EXPECT(q != NULL))
                break;
            if (blocked)
                EXPECT(q != p);
            EXPECT_U_GE(kame_pool_malloc_usable_size(q), usable + 2 * MiB);
            size_t wrong = 0;
            for (size_t i = 0; i < usable; i++)
                wrong += q[i] != (unsigned char)(i * 31 + 7);
            EXPECT_U_EQ(wrong, 0);
            /* A copy faults in every page of the new block (1536 here). A move
             * maps a fresh range first, for which a sanitizer's runtime faults
             * in shadow pages of its own: about 260 under ThreadSanitizer. */
            EXPECTF(faults < (long)(usable / 4096 / 2), "%ld page faults growing a %zu KiB block", faults,
                    usable >> 10);
            memset(q + usable, 1, 2 * MiB);
            kame_pool_free(q);
            if (wall != MAP_FAILED)
                munmap(wall, 4096);
            EXPECT_INT_EQ(kame_pool_validate(), 0);
        }
    }
}

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + 7);
}

static size_t mismatches(const unsigned char *p, size_t n)
{
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += p[i] != (unsigned char)(i * 31 + 7);
    return wrong;
}

/* Whether [p, p + len) is free address space: a mapping placed there
 * without replacing anything succeeds. */
static int unmapped_range(void *p, size_t len)
{
    void *m = mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    munmap(m, len);
    return m == p; /* kernels before MAP_FIXED_NOREPLACE take it as a hint */
}

static void test_realloc_shrink(void)
{
    CHECK("realloc shrinks a large or huge block in place: contents kept, tail unmapped, no page copied") {
        /* huge to large (over several address-map slots), large to large */
        static const size_t from[] = {100 * MiB, 24 * MiB};
        static const size_t to[] = {10 * MiB, 5 * MiB};
        for (int k = 0; k < 2; k++) {
            unsigned char *p = kame_pool_malloc(from[k]);
            if (!EXPECT(p != NULL))
                break;
            size_t usable = kame_pool_malloc_usable_size(p);
            fill(p, to[k]);
            size_t reserved = kame_pool_reserved_bytes();
            long before = minor_faults();
            unsigned char *q = kame_pool_realloc(p, to[k]);
            long faults = minor_faults() - before;
            if (!EXPECT(q != NULL))
                break;
            EXPECT(q == p);
            size_t now = kame_pool_malloc_usable_size(q);
            EXPECT_U_GE(now, to[k]);
            EXPECT_U_LT(now, usable / 2);
            EXPECT_U_EQ(reserved - kame_pool_reserved_bytes(), usable - now);
            EXPECT_U_EQ(mismatches(q, to[k]), 0);
            /* A copy would fault in the pages of a new block (2560 here, or
             * a few huge pages); a sanitizer's runtime faults in shadow
             * pages of its own (84 under ThreadSanitizer).  q == p above is
             * what tells a copy apart. */
            EXPECTF(faults < (long)(to[k] / 4096 / 2), "%ld page faults shrinking to %zu KiB", faults, to[k] >> 10);
            EXPECTF(unmapped_range(q + now, usable - now), "the tail of %zu KiB past %zu KiB is still mapped",
                    (usable - now) >> 10, now >> 10);
            EXPECT_INT_EQ(kame_pool_validate(), 0);
            /* The range the tail left can be anyone's now: a block mapped
             * there is classified by its own entries. */
            void *other = kame_pool_malloc(from[k]);
            EXPECT(other != NULL);
            EXPECT_INT_EQ(kame_pool_validate(), 0);
            kame_pool_free(other);
            q = kame_pool_realloc(q, to[k] + 4 * MiB); /* grows again */
            if (EXPECT(q != NULL))
                EXPECT_U_EQ(mismatches(q, to[k]), 0);
            kame_pool_free(q);
            EXPECT_INT_EQ(kame_pool_validate(), 0);
        }
    }
    CHECK("realloc of a large block to the dedicated tier, or in a realtime thread, copies") {
        unsigned char *p = kame_pool_malloc(24 * MiB);
        if (!EXPECT(p != NULL))
            continue;
        fill(p, 3 * MiB);
        unsigned char *q = kame_pool_realloc(p, 3 * MiB); /* a dedicated chunk */
        if (EXPECT(q != NULL)) {
            EXPECT(q != p);
            EXPECT_U_LE(kame_pool_malloc_usable_size(q), 4 * MiB);
            EXPECT_U_EQ(mismatches(q, 3 * MiB), 0);
            kame_pool_free(q);
        }
        p = kame_pool_malloc(24 * MiB);
        if (!EXPECT(p != NULL))
            continue;
        fill(p, 5 * MiB);
        int saved = kame_pool_set_realtime_thread(KAME_RT_DEFER);
        q = kame_pool_realloc(p, 5 * MiB); /* no system call: a block from the cache or a fresh one */
        kame_pool_set_realtime_thread(saved);
        if (EXPECT(q != NULL)) {
            EXPECT(q != p);
            EXPECT_U_EQ(mismatches(q, 5 * MiB), 0);
            kame_pool_free(q);
        }
        kame_pool_rt_drain();
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}
#endif

/* Slots of a chunk whose owner has exited, freed by a thread that itself
 * allocates their class: the thread keeps them on its own list and hands
 * them out again (no atomic operation, still in its cache); the chunk
 * counts them live meanwhile, and gets them back when the thread exits
 * or trims, and is then released.  The classes are ones nothing else
 * here uses. */
enum { KEEP_BLOCKS = 16, KEEP_SIZE = 1200, KEEP_TRIM_SIZE = 600 };
static void *keep_set[KEEP_BLOCKS];
static size_t keep_size;

static void *alloc_keep_set(void *arg)
{
    (void)arg;
    for (int i = 0; i < KEEP_BLOCKS; i++) {
        keep_set[i] = kame_pool_malloc(keep_size);
        memset(keep_set[i], 0x5a, keep_size);
    }
    return NULL; /* exits: its chunk is detached, with the set live */
}

static void make_keep_set(size_t size)
{
    keep_size = size;
    run_in_thread(alloc_keep_set);
}

/* Frees the set, and checks the next allocations of its class are the
 * set again, last freed first; then frees them again, to be kept. */
static void free_keep_set_and_reuse(void)
{
    for (int i = 0; i < KEEP_BLOCKS; i++)
        kame_pool_free(keep_set[i]);
    EXPECT_INT_EQ(kame_pool_validate(), 0); /* kept slots checked as such */
    for (int i = KEEP_BLOCKS - 1; i >= 0; i--) {
        void *p = kame_pool_malloc(keep_size);
        EXPECT(p == keep_set[i]);
        keep_set[i] = p;
    }
    for (int i = 0; i < KEEP_BLOCKS; i++)
        kame_pool_free(keep_set[i]);
}

static void *keep_then_exit(void *arg)
{
    (void)arg;
    void *own = kame_pool_malloc(keep_size); /* the class's current chunk */
    free_keep_set_and_reuse();
    kame_pool_free(own);
    return NULL;
}

/* The slots a thread keeps are bounded per class, at 256 KiB' worth (at
 * most 255): 64 of 4 KiB.  Past that, the slots it frees go back. */
enum { CAP_SIZE = 4096, CAP_KEPT = 64, CAP_FREED = 100 };
static void *cap_set[CAP_FREED];

static void *alloc_cap_set(void *arg)
{
    (void)arg;
    malloc_blocks(cap_set, CAP_FREED, CAP_SIZE);
    return NULL;
}

static sem_t cap_own, cap_made;

static void *keep_up_to_cap(void *arg)
{
    (void)arg;
    void *own = kame_pool_malloc(CAP_SIZE); /* the class's current chunk */
    sem_post(&cap_own);
    sem_wait(&cap_made);
    for (int i = 0; i < CAP_FREED; i++)
        kame_pool_free(cap_set[i]);
    for (int i = CAP_KEPT - 1; i >= 0; i--) {
        void *p = kame_pool_malloc(CAP_SIZE);
        EXPECT(p == cap_set[i]); /* the first 64 were kept, last freed first */
        cap_set[i] = p;
    }
    for (int i = 0; i < CAP_KEPT; i++)
        kame_pool_free(cap_set[i]);
    kame_pool_free(own);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

static void test_kept_slots(void)
{
    CHECK("a thread keeps at most 256 KiB' worth of other chunks' slots per class") {
        size_t before = detached_chunks();
        sem_init(&cap_own, 0, 0);
        sem_init(&cap_made, 0, 0);
        pthread_t keeper, maker;
        pthread_create(&keeper, NULL, keep_up_to_cap, NULL);
        sem_wait(&cap_own); /* the maker's chunks are others than the keeper's */
        pthread_create(&maker, NULL, alloc_cap_set, NULL);
        pthread_join(maker, NULL);
        sem_post(&cap_made);
        pthread_join(keeper, NULL);
        sem_destroy(&cap_own);
        sem_destroy(&cap_made);
        EXPECT_U_EQ(detached_chunks(), before); /* every slot back: released */
    }
    CHECK("a thread reuses the slots of an exited thread's chunk it frees, and exiting gives them back") {
        size_t before = detached_chunks();
        make_keep_set(KEEP_SIZE);
        EXPECT_U_EQ(detached_chunks(), before + 1);
        run_in_thread(keep_then_exit);
        EXPECT_U_EQ(detached_chunks(), before); /* every slot back: released */
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
    CHECK("trim gives the calling thread's kept slots back to their chunk") {
        void *own = kame_pool_malloc(KEEP_TRIM_SIZE);
        size_t before = detached_chunks();
        make_keep_set(KEEP_TRIM_SIZE);
        EXPECT_U_EQ(detached_chunks(), before + 1);
        free_keep_set_and_reuse();
        EXPECT_U_EQ(detached_chunks(), before + 1); /* kept: still live in their chunk */
        kame_pool_trim();
        EXPECT_U_EQ(detached_chunks(), before);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_free(own);
    }
}

/* Slots of a chunk whose owner is alive, freed by a thread that allocates
 * their class.  A thread whose own blocks die in other threads (a new
 * thread, with no history, is taken to be one) keeps them for its next
 * allocations, as it would an exited owner's; one whose blocks die at
 * home sends them back to their owner.  The classes are ones nothing
 * else here uses. */
enum {
    LIVE_BLOCKS = 16,
    LIVE_SHARE_SIZE = 1800,
    LIVE_HOME_SIZE = 2600,
    LIVE_ORPHAN_SIZE = 3400,
    LIVE_HOME_ROUND = 100
};
static void *live_set[LIVE_BLOCKS];
static size_t live_size;
static sem_t live_made, live_done;

static void *live_owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < LIVE_BLOCKS; i++) {
        live_set[i] = kame_pool_malloc(live_size);
        memset(live_set[i], 0x6b, live_size);
    }
    sem_post(&live_made);
    sem_wait(&live_done); /* alive while another thread frees the set */
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

static void *share_and_keep(void *arg)
{
    (void)arg;
    void *own = kame_pool_malloc(live_size); /* the class's current chunk */
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(live_set[i]);
    EXPECT_INT_EQ(kame_pool_validate(), 0); /* kept slots checked as such */
    for (int i = LIVE_BLOCKS - 1; i >= 0; i--) {
        void *p = kame_pool_malloc(live_size);
        EXPECT(p == live_set[i]); /* last freed first */
        live_set[i] = p;
    }
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(live_set[i]); /* kept again; exit sends them home */
    kame_pool_free(own);
    return NULL;
}

/* Its own blocks freed by itself, and taken back as its chunks run dry:
 * its blocks die at home. */
static void free_at_home(void)
{
    static void *own[LIVE_HOME_ROUND];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < LIVE_HOME_ROUND; i++)
            own[i] = kame_pool_malloc(live_size);
        for (int i = 0; i < LIVE_HOME_ROUND; i++)
            kame_pool_free(own[i]);
    }
}

static void *home_and_return(void *arg)
{
    (void)arg;
    static void *own[LIVE_HOME_ROUND];
    free_at_home();
    void *first = kame_pool_malloc(live_size);
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(live_set[i]);
    int reused = 0;
    for (int i = 0; i < LIVE_HOME_ROUND; i++) {
        own[i] = kame_pool_malloc(live_size);
        reused += in_blocks(live_set, LIVE_BLOCKS, own[i]);
    }
    EXPECT_INT_EQ(reused, 0); /* sent back to their owner, not kept */
    for (int i = 0; i < LIVE_HOME_ROUND; i++)
        kame_pool_free(own[i]);
    kame_pool_free(first);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

static void *orphans[LIVE_BLOCKS];

static void *make_orphans(void *arg)
{
    (void)arg;
    malloc_blocks(orphans, LIVE_BLOCKS, live_size);
    return NULL; /* exits: the blocks' chunk has no owner */
}

static void *orphans_then_keep(void *arg)
{
    (void)arg;
    free_at_home();
    /* Blocks of an exited thread, made now, freed here: owners here are
     * short-lived, so a live owner's slots are kept too. */
    pthread_t maker;
    pthread_create(&maker, NULL, make_orphans, NULL);
    pthread_join(maker, NULL);
    void *first = kame_pool_malloc(live_size);
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(orphans[i]);
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(live_set[i]);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    for (int i = LIVE_BLOCKS - 1; i >= 0; i--) {
        void *p = kame_pool_malloc(live_size);
        EXPECT(p == live_set[i]); /* kept, last freed first */
        live_set[i] = p;
    }
    for (int i = 0; i < LIVE_BLOCKS; i++)
        kame_pool_free(live_set[i]);
    kame_pool_free(first);
    return NULL; /* exit sends the kept slots home, the orphans' too */
}

static void live_owner_case(size_t size, void *(*freer)(void *))
{
    live_size = size;
    size_t before = detached_chunks();
    sem_init(&live_made, 0, 0);
    sem_init(&live_done, 0, 0);
    pthread_t owner, other;
    pthread_create(&owner, NULL, live_owner, NULL);
    sem_wait(&live_made);
    pthread_create(&other, NULL, freer, NULL);
    pthread_join(other, NULL);
    sem_post(&live_done);
    pthread_join(owner, NULL);
    /* Every slot of the set came home, so the owner's exit released its
     * chunk rather than leaving it detached. */
    EXPECT_U_EQ(detached_chunks(), before);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    sem_destroy(&live_made);
    sem_destroy(&live_done);
}

static void test_live_owner_slots(void)
{
    CHECK("a thread whose blocks die elsewhere keeps the slots of a live owner's chunk it frees, and exiting sends them home") {
        live_owner_case(LIVE_SHARE_SIZE, share_and_keep);
    }
    CHECK("a thread whose blocks die at home sends the slots of a live owner's chunk back") {
        live_owner_case(LIVE_HOME_SIZE, home_and_return);
    }
    CHECK("a thread whose blocks die at home but which frees blocks of exited threads keeps a live owner's slots") {
        live_owner_case(LIVE_ORPHAN_SIZE, orphans_then_keep);
    }
}

/* ---- A producer's stream of frees -------------------------------------------- */

/* A thread that allocates blocks another thread frees (a pipeline's
 * producer) carves fresh slots of its current chunk before it takes a
 * stream of the other thread's frees back, and takes them back first once
 * it frees into the chunk itself.  The class is one nothing else here
 * uses, so the producer's chunk is a fresh one. */
enum { STREAM_SIZE = 448, STREAM_FIRST = 200, STREAM_FREED = 100, STREAM_MORE = 100 };
static void *stream_set[STREAM_FIRST];
static void *stream_more[2 * STREAM_MORE];

static void *stream_producer(void *arg)
{
    (void)arg;
    malloc_blocks(stream_set, STREAM_FIRST, STREAM_SIZE);
    uintptr_t unit = (uintptr_t)stream_set[0] >> 18;
    size_t slot = kame_pool_malloc_usable_size(stream_set[0]);
    int same_unit = 1;
    for (int i = 0; i < STREAM_FIRST; i++)
        same_unit &= (uintptr_t)stream_set[i] >> 18 == unit;
    EXPECT(same_unit);
    EXPECT((STREAM_FIRST + 2 * STREAM_MORE + 16) * slot < 256 * KiB); /* room left in the chunk */
    free_elsewhere(stream_set, STREAM_FREED);

    int reused = 0;
    for (int i = 0; i < STREAM_MORE; i++) {
        stream_more[i] = kame_pool_malloc(STREAM_SIZE);
        reused += in_blocks(stream_set, STREAM_FREED, stream_more[i]);
        EXPECT((uintptr_t)stream_more[i] >> 18 == unit);
    }
    EXPECT_INT_EQ(reused, 0); /* fresh slots first, the chunk having room */

    /* The owner frees into its chunk: the other thread's frees come back
     * at the next refill, before the chunk is carved to its end. */
    kame_pool_free(stream_more[0]);
    stream_more[0] = kame_pool_malloc(STREAM_SIZE);
    reused = 0;
    for (int i = STREAM_MORE; i < 2 * STREAM_MORE; i++) {
        stream_more[i] = kame_pool_malloc(STREAM_SIZE);
        reused += in_blocks(stream_set, STREAM_FREED, stream_more[i]);
    }
    EXPECT(reused > 0);
    for (int i = 0; i < 2 * STREAM_MORE; i++)
        kame_pool_free(stream_more[i]);
    for (int i = STREAM_FREED; i < STREAM_FIRST; i++)
        kame_pool_free(stream_set[i]);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

/* A producer whose chunk is carved to its end gives it up rather than
 * reuse the consumer's frees: its next block comes from another chunk,
 * and the consumer's frees bring the first chunk back whole (released,
 * no longer detached).  Another class nothing else here uses. */
enum { GIVE_SIZE = 320, GIVE_FIRST = 64, GIVE_MAX = 1024 };
static void *give_first[GIVE_FIRST];

static void *give_up_producer(void *arg)
{
    (void)arg;
    malloc_blocks(give_first, GIVE_FIRST, GIVE_SIZE);
    uintptr_t unit = (uintptr_t)give_first[0] >> 18;
    free_elsewhere(give_first, GIVE_FIRST); /* a stream of frees waits on the chunk */

    size_t detached_before = detached_chunks();
    /* Fresh slots until the chunk's end, then the first block that is not
     * one of them. */
    void *next, *give_rest[GIVE_MAX];
    int give_rest_count = 0;
    for (;;) {
        next = kame_pool_malloc(GIVE_SIZE);
        if ((uintptr_t)next >> 18 != unit || in_blocks(give_first, GIVE_FIRST, next) || give_rest_count == GIVE_MAX)
            break;
        give_rest[give_rest_count++] = next;
    }
    EXPECT_INT_EQ(in_blocks(give_first, GIVE_FIRST, next), 0); /* the frees were not reused... */
    EXPECT((uintptr_t)next >> 18 != unit);                     /* ...the next block is another chunk's */
    EXPECT(give_rest_count < GIVE_MAX);                        /* the chunk was carved to its end */
    EXPECT_U_EQ(detached_chunks(), detached_before + 1);       /* given up, awaiting its frees */

    free_elsewhere(give_rest, give_rest_count);
    EXPECT_U_EQ(detached_chunks(), detached_before); /* back whole: released */
    kame_pool_free(next);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    return NULL;
}

/* A producer whose consumer keeps one block in a hundred for good: no
 * chunk of the producer's comes back whole, and the free slots around the
 * kept blocks are reused, so the chunks in use stay near what the kept
 * blocks fill rather than growing with every block made.  Another class
 * nothing else here uses. */
enum { HOLD_SIZE = 144, HOLD_EVERY = 100, HOLD_RING = 1024 };
static void *hold_ring[HOLD_RING];
static atomic_size_t hold_head, hold_tail;
static size_t hold_total, hold_kept_count;
static void **hold_kept;

static void *hold_producer(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < hold_total; i++) {
        void *p = kame_pool_malloc(HOLD_SIZE);
        memset(p, 0x2c, 16);
        while (i - atomic_load_explicit(&hold_tail, memory_order_acquire) >= HOLD_RING)
            sched_yield();
        hold_ring[i % HOLD_RING] = p;
        atomic_store_explicit(&hold_head, i + 1, memory_order_release);
    }
    return NULL;
}

static void *hold_consumer(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < hold_total; i++) {
        while (atomic_load_explicit(&hold_head, memory_order_acquire) <= i)
            sched_yield();
        void *p = hold_ring[i % HOLD_RING];
        atomic_store_explicit(&hold_tail, i + 1, memory_order_release);
        if (i % HOLD_EVERY == 0)
            hold_kept[hold_kept_count++] = p;
        else
            kame_pool_free(p);
    }
    return NULL;
}

static void test_producer_keeps(void)
{
    CHECK("a producer whose consumer keeps one block in a hundred reuses the free slots around them") {
        hold_total = (size_t)(300000 * kp_test_scale());
        hold_kept = malloc((hold_total / HOLD_EVERY + 1) * sizeof *hold_kept);
        hold_kept_count = 0;
        atomic_store(&hold_head, 0);
        atomic_store(&hold_tail, 0);
        size_t units_before = (size_t)pool_stats().units_claimed;
        pthread_t producer, consumer;
        pthread_create(&producer, NULL, hold_producer, NULL);
        pthread_create(&consumer, NULL, hold_consumer, NULL);
        pthread_join(producer, NULL);
        pthread_join(consumer, NULL);
        size_t units = (size_t)pool_stats().units_claimed - units_before;
        size_t slot = kame_pool_malloc_usable_size(hold_kept[0]);
        size_t kept_units = hold_kept_count * slot / (256 * KiB) + 1;
        size_t made_units = hold_total * slot / (256 * KiB);
        printf("    producer with kept blocks: %zu units in use for %zu kept blocks (%zu units' worth); %zu units' worth made\n",
               units, hold_kept_count, kept_units, made_units);
        EXPECT_U_LE(units, kept_units + 16);
        for (size_t i = 0; i < hold_kept_count; i++)
            kame_pool_free(hold_kept[i]);
        free(hold_kept);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

static void test_producer_stream(void)
{
    CHECK("a producer carves fresh slots before it takes a consumer's frees back, and takes them first once it frees into the chunk") {
        run_in_thread(stream_producer);
    }
    CHECK("a producer gives up a chunk carved to its end, and the consumer's frees bring it back whole") {
        run_in_thread(give_up_producer);
    }
}

/* ---- A resting chunk's free tail ------------------------------------------ */

/* A chunk that rests on its owner's avail list with free slots at the end
 * of its carved part gives those pages back: at kame_pool_trim, or once
 * it has rested a while (a hundred drain ticks) and its owner allocates
 * on a slow path.  Its live blocks keep their contents, and the slots
 * serve again.  Each case runs on a thread of its own; the class (224 B,
 * 1170 slots a chunk) is one nothing else here uses. */
enum { TAIL_SIZE = 200, TAIL_SLOTS = 1170, TAIL_KEEP = 50, TAIL_BLOCKS = 3 * TAIL_SLOTS };
static void *tail_set[TAIL_BLOCKS];

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

/* Fills chunks of the class; in one the thread filled whole, keeps the
 * TAIL_KEEP lowest blocks and frees the others (the chunk goes back to
 * the owner's avail list with them on its local list).  Returns the
 * chunk's start, with tail_set sorted and [first, first + TAIL_SLOTS) its
 * blocks, or 0. */
static uintptr_t make_free_tail(size_t *first)
{
    for (int i = 0; i < TAIL_BLOCKS; i++) {
        tail_set[i] = kame_pool_malloc(TAIL_SIZE);
        memset(tail_set[i], 0x3c, TAIL_SIZE);
    }
    qsort(tail_set, TAIL_BLOCKS, sizeof tail_set[0], by_address);
    for (size_t i = 0; i + TAIL_SLOTS <= TAIL_BLOCKS; i++) {
        uintptr_t start = (uintptr_t)tail_set[i] & ~(uintptr_t)(256 * KiB - 1);
        if ((uintptr_t)tail_set[i] != start ||
            ((uintptr_t)tail_set[i + TAIL_SLOTS - 1] & ~(uintptr_t)(256 * KiB - 1)) != start)
            continue;
        for (size_t j = i + TAIL_KEEP; j < i + TAIL_SLOTS; j++)
            kame_pool_free(tail_set[j]);
        *first = i;
        return start;
    }
    return 0;
}

/* Pages of the chunk at `start` wholly past its kept blocks that are
 * still resident. */
static int tail_pages_resident(uintptr_t start)
{
    size_t from = (TAIL_KEEP * 224 + 4095) & ~(size_t)4095;
    int resident = 0;
    for (size_t off = from; off + 4096 <= (size_t)TAIL_SLOTS * 224; off += 4096)
        resident += page_resident((void *)(start + off)) == 1;
    return resident;
}

/* The kept blocks are intact, the freed slots serve again, and the pool
 * is sound; then everything is freed. */
static void check_tail_reuse(size_t first)
{
    for (size_t j = first; j < first + TAIL_KEEP; j++) {
        const unsigned char *b = tail_set[j];
        int intact = 1;
        for (int k = 0; k < TAIL_SIZE; k++)
            intact &= b[k] == 0x3c;
        EXPECTF(intact, "kept block %p changed", (void *)b);
    }
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    for (size_t j = first + TAIL_KEEP; j < first + TAIL_SLOTS; j++) {
        tail_set[j] = kame_pool_malloc(TAIL_SIZE);
        memset(tail_set[j], 0xc3, TAIL_SIZE);
    }
    EXPECT_INT_EQ(kame_pool_validate(), 0);
    qsort(tail_set, TAIL_BLOCKS, sizeof tail_set[0], by_address);
    for (int i = 1; i < TAIL_BLOCKS; i++)
        EXPECT((char *)tail_set[i - 1] + TAIL_SIZE <= (char *)tail_set[i]); /* distinct */
    for (int i = 0; i < TAIL_BLOCKS; i++)
        kame_pool_free(tail_set[i]);
    EXPECT_INT_EQ(kame_pool_validate(), 0);
}

static void *tail_at_trim(void *arg)
{
    (void)arg;
    size_t first = 0;
    uintptr_t start = make_free_tail(&first);
    if (!EXPECT(start != 0))
        return NULL;
    EXPECT(tail_pages_resident(start) > 50);
    kame_pool_trim();
    EXPECT_INT_EQ(tail_pages_resident(start), 0);
    check_tail_reuse(first);
    return NULL;
}

static void *tail_when_idle(void *arg)
{
    (void)arg;
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_lazy_drain_interval_ms(2);
    size_t first = 0;
    uintptr_t start = make_free_tail(&first);
    if (!EXPECT(start != 0))
        return NULL;
    EXPECT(tail_pages_resident(start) > 50);
    /* A hundred ticks of 2 ms pass; big blocks' frees bring the thread to
     * the drain clock and first allocations of classes are slow paths. */
    int resident = -1;
    for (int round = 0; round < 40 && resident != 0; round++) {
        struct timespec pause = { 0, 20 * 1000 * 1000 };
        nanosleep(&pause, NULL);
        for (int i = 0; i < 300; i++)
            kame_pool_free(kame_pool_malloc(64 * KiB));
        void *p = kame_pool_malloc(4000 + (size_t)round * 500); /* 4 KiB .. 24 KiB classes */
        kame_pool_free(p);
        resident = tail_pages_resident(start);
    }
    EXPECT_INT_EQ(resident, 0);
    check_tail_reuse(first);
    kame_pool_set_lazy_drain_interval_ms(interval);
    return NULL;
}

static void test_free_tail(void)
{
    CHECK("trim gives back the pages of a resting chunk's free tail, and its slots serve again") {
        run_in_thread(tail_at_trim);
    }
    CHECK("a chunk resting a hundred drain ticks gives back the pages of its free tail") {
        run_in_thread(tail_when_idle);
    }
}

int main(void)
{
    test_idle_owner();
    test_footprint();
    test_carve_ahead();
    test_adoption();
    test_take_back();
    test_parked_chunks();
    test_resting_emptied();
    test_free_tail();
    test_dirty_units();
    test_owner_frees();
    test_kept_slots();
    test_live_owner_slots();
    test_producer_stream();
    test_producer_keeps();
#ifdef __linux__
    test_realloc_grow();
    test_realloc_shrink();
#endif
    return kp_check_summary();
}
