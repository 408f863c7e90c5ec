/* The recycle cache for blocks from 32 KiB up to its top: what it keeps,
 * what it gives back, and that reused blocks are sound.
 *   - the byte cap holds (resident and reserved) under a rotating working
 *     set of random sizes across the band;
 *   - kame_pool_trim empties it; a thread's exit empties its L1 (to the OS,
 *     or to the global cache when exit reclaim is off); idle blocks drain;
 *   - calloc is zero after every kind of reuse; a forked child uses a warm
 *     cache; blocks move between threads through the global cache, with
 *     their contents checked. */
#include "check.h"

#include <kame_pool.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>


#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define KP_TEST_REGION (32 * MiB) /* a region, never unmapped */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Log-uniform in [lo, hi]. */
static size_t log_size(size_t lo, size_t hi)
{
    double u = (double)(rng() >> 11) / (double)(1ull << 53);
    double v = (double)lo * __builtin_pow((double)hi / (double)lo, u);
    return (size_t)v;
}

static void touch(unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += 4096)
        p[i] = v;
    p[n - 1] = v;
}

static int touched_ok(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += 4096)
        if (p[i] != v)
            return 0;
    return p[n - 1] == v;
}

/* ---- The cap ------------------------------------------------------------ */

static void test_cap_holds(void)
{
    CHECK("a rotating working set across the band stays within live set + cap") {
        const size_t cap = 48 * MiB;
        size_t old_cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(cap);
        EXPECT_U_EQ(kame_pool_get_large_cache_cap(), cap);
        kame_pool_trim();
        size_t rss0 = kp_resident_bytes(), res0 = kame_pool_reserved_bytes();
        enum { W = 12, STEPS = 600 };
        unsigned char *live[W] = { 0 };
        size_t size[W] = { 0 };
        size_t worst_rss = 0, worst_res = 0, live_max = 0;
        for (int step = 0; step < STEPS; step++) {
            int i = (int)(rng() % W);
            if (live[i] != NULL) {
                if (!touched_ok(live[i], size[i], (unsigned char)i))
                    EXPECTF(0, "block %d changed while live", i);
                kame_pool_free(live[i]);
            }
            size[i] = log_size(32 * KiB, 24 * MiB);
            live[i] = kame_pool_malloc(size[i]);
            if (!EXPECT_NOT_NULL(live[i]))
                break;
            touch(live[i], size[i], (unsigned char)i);
            size_t live_bytes = 0, live_reserved = 0;
            for (int k = 0; k < W; k++)
                if (live[k] != NULL) {
                    live_bytes += size[k];
                    live_reserved += kame_pool_malloc_usable_size(live[k]);
                }
            if (live_bytes > live_max)
                live_max = live_bytes;
            size_t rss = kp_resident_bytes(), res = kame_pool_reserved_bytes();
            /* Over what the live blocks need: the cache's share. */
            size_t over_rss = rss > rss0 + live_bytes ? rss - rss0 - live_bytes : 0;
            size_t over_res = res > res0 + live_reserved ? res - res0 - live_reserved : 0;
            if (over_rss > worst_rss)
                worst_rss = over_rss;
            if (over_res > worst_res)
                worst_res = over_res;
        }
        printf("    rotating set: live up to %zu MiB, resident over live %zu MiB, reserved over live %zu MiB (cap %zu MiB)\n",
               live_max >> 20, worst_rss >> 20, worst_res >> 20, cap >> 20);
        /* Regions of the dedicated tier are shared with other blocks and
         * partly used: allow four of them besides the cap. */
        EXPECT_U_LE(worst_rss, cap + cap / 10 + 4 * 32 * MiB);
        EXPECT_U_LE(worst_res, cap + cap / 10 + 4 * 32 * MiB);
        for (int k = 0; k < W; k++)
            kame_pool_free(live[k]);
        kame_pool_set_large_cache_cap(old_cap);
    }
    CHECK("a cap of 0 keeps nothing: every big free goes back to the OS") {
        size_t old_cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(0);
        size_t before = kame_pool_reserved_bytes();
        for (int i = 0; i < 20; i++) {
            void *p = kame_pool_malloc(12 * MiB);
            EXPECT_NOT_NULL(p);
            kame_pool_free(p);
            EXPECT_U_LE(kame_pool_reserved_bytes(), before);
        }
        kame_pool_set_large_cache_cap(old_cap);
    }
}

/* ---- Giving back ----------------------------------------------------------- */

static void test_trim_empties(void)
{
    CHECK("trim gives back the cached mappings and dedicated chunks") {
        /* The sizes stay in demand from one request to the next only if
         * no two drain ticks pass between them: none pass with the drain
         * off (a loaded or emulated machine can spend 20 ms here). */
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        kame_pool_trim();
        size_t before = kame_pool_reserved_bytes();
        void *big[4];
        /* Each size asked for once before: in demand, so kept when freed. */
        for (int i = 0; i < 4; i++)
            kame_pool_free(kame_pool_malloc(8 * MiB + (size_t)i * MiB));
        kame_pool_trim();
        for (int i = 0; i < 4; i++)
            big[i] = kame_pool_malloc(8 * MiB + (size_t)i * MiB);
        size_t held = kame_pool_reserved_bytes();
        EXPECT_U_GE(held, before + 4 * 8 * MiB);
        for (int i = 0; i < 4; i++)
            kame_pool_free(big[i]);
        /* Cached: still reserved. */
        EXPECT_U_GE(kame_pool_reserved_bytes(), held - MiB);
        kame_pool_trim();
        EXPECT_U_LE(kame_pool_reserved_bytes(), before);

        enum { N = 40 };
        unsigned char *d[N];
        for (int i = 0; i < N; i++) {
            d[i] = kame_pool_malloc(1 * MiB);
            touch(d[i], MiB, 1);
        }
        size_t rss_full = kp_resident_bytes();
        for (int i = 0; i < N; i++)
            kame_pool_free(d[i]);
        kame_pool_trim();
        size_t rss_after = kp_resident_bytes();
        EXPECTF(rss_after + 30 * MiB <= rss_full, "resident %zu MiB -> %zu MiB after trim", rss_full >> 20,
                rss_after >> 20);
        kame_pool_set_lazy_drain_interval_ms(interval);
    }
}

/* A buffer grown through realloc frees one block of each size on the way,
 * sizes nobody asks for again: none of the chunks is kept, and the
 * mappings move without a free, so the cache does not fill with them (a
 * program that grows many buffers would otherwise hold up to the cap in
 * dead blocks).  The last block, freed, waits in the shared cache, where
 * a smaller request could take it cut to size, until a trim or the drain. */
static void test_growth_not_kept(void)
{
    CHECK("blocks of sizes asked for once are not kept") {
        kame_pool_trim();
        size_t before = kame_pool_reserved_bytes();
        size_t size = 300 * KiB;
        unsigned char *p = kame_pool_malloc(size);
        touch(p, size, 1);
        while (size < 48 * MiB) {
            size_t next = size + size / 4;
            unsigned char *q = kame_pool_realloc(p, next);
            if (!EXPECT_NOT_NULL(q)) break;
            touch(q, next, 1);
            p = q;
            size = next;
            /* Only the live block (and the region the small blocks were
             * carved from) is mapped: what it grew out of went back. */
            EXPECT_U_LE(kame_pool_reserved_bytes(), before + KP_TEST_REGION + size + MiB);
        }
        kame_pool_free(p);
        EXPECT_U_LE(kame_pool_reserved_bytes(), before + KP_TEST_REGION + size + MiB);
        kame_pool_trim();
        EXPECT_U_LE(kame_pool_reserved_bytes(), before + KP_TEST_REGION);
    }
}

static void *cycle_big(void *arg)
{
    (void)arg;
    for (int i = 0; i < 50; i++) {
        void *p = kame_pool_malloc(6 * MiB);
        void *q = kame_pool_malloc(600 * KiB);
        ((char *)p)[0] = 1;
        ((char *)q)[0] = 1;
        kame_pool_free(p);
        kame_pool_free(q);
    }
    return NULL;
}

/* Runs fn(arg) on a thread of its own and returns what it returned. */
static void *run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    void *result = NULL;
    pthread_create(&t, NULL, fn, arg);
    pthread_join(t, &result);
    return result;
}

/* Another thread's block of (size_t)size bytes. */
static void *malloc_size(void *size)
{
    return kame_pool_malloc((size_t)(uintptr_t)size);
}

static void test_thread_exit(void)
{
    CHECK("a thread's exit gives its cached blocks back (reclaim on)") {
        kame_pool_trim();
        EXPECT_INT_EQ(kame_pool_get_thread_exit_reclaim(), 1);
        size_t before = kame_pool_reserved_bytes();
        run_thread(cycle_big, NULL);
        EXPECT_U_LE(kame_pool_reserved_bytes(), before + 32 * MiB); /* at most a region for the 600 KiB chunk */
        size_t rss = kp_resident_bytes();
        run_thread(cycle_big, NULL);
        EXPECT_U_LE(kp_resident_bytes(), rss + 2 * MiB);
    }
    CHECK("with exit reclaim off, an exiting thread's cache serves other threads") {
        /* No drain between the exit and the request (the idle drain would
         * decide, not the exit). */
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        kame_pool_set_thread_exit_reclaim(0);
        EXPECT_INT_EQ(kame_pool_get_thread_exit_reclaim(), 0);
        kame_pool_trim();
        run_thread(cycle_big, NULL);
        size_t held = kame_pool_reserved_bytes();
        /* The 6 MiB mapping went to the global cache: this thread reuses it. */
        void *p = kame_pool_malloc(6 * MiB);
        EXPECT_U_LE(kame_pool_reserved_bytes(), held);
        kame_pool_free(p);
        kame_pool_set_thread_exit_reclaim(1);
        kame_pool_trim();
        kame_pool_set_lazy_drain_interval_ms(interval);
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Caches a block of each of `sizes` (each asked for twice, so in demand)
 * under a long drain interval, then, under a 2 ms one, allocates and
 * frees `loop` bytes again and again: the cached blocks (mappings, or
 * dedicated chunks) must drain while the loop gets its one block back
 * from the cache every time. */
static void drain_during_hit_loop(const size_t *sizes, int n, size_t loop, bool mappings)
{
    unsigned old = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_lazy_drain_interval_ms(60000);
    kame_pool_trim();
    void *p[4];
    size_t total = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++)
            p[i] = kame_pool_malloc(sizes[i]);
        for (int i = 0; i < n; i++)
            kame_pool_free(p[i]);
    }
    for (int i = 0; i < n; i++)
        total += sizes[i];
    kame_pool_stats_t st = KAME_POOL_STATS_INIT;
    kame_pool_get_stats(&st);
    EXPECT_U_GE(mappings ? st.cache_mapping_bytes : st.cache_chunk_bytes, total);
    kame_pool_set_lazy_drain_interval_ms(2);
    kame_pool_free(kame_pool_malloc(loop)); /* twice: in demand */
    kame_pool_free(kame_pool_malloc(loop));
    unsigned long long left = 1;
    unsigned char *last = NULL;
    int rounds = 0;
    for (; rounds < 40000; rounds++) {
        if (rounds % 64 == 0) {
            sleep_ms(1);
            kame_pool_get_stats(&st);
            left = mappings ? st.cache_mapping_bytes : st.cache_chunk_bytes;
            if (left == 0)
                break;
        }
        unsigned char *q = kame_pool_malloc(loop);
        if (!EXPECT(q != NULL))
            break;
        q[0] = (unsigned char)rounds;
        if (last != NULL && q != last) {
            EXPECTF(q == last, "round %d: a new block %p, not the cached %p", rounds, (void *)q, (void *)last);
            break;
        }
        last = q;
        kame_pool_free(q);
    }
    EXPECTF(left == 0, "%llu KiB of %s still cached after %d rounds", left >> 10,
            mappings ? "mappings" : "dedicated chunks", rounds);
    EXPECT(kame_pool_validate() == 0);
    kame_pool_set_lazy_drain_interval_ms(old);
}

static void test_lazy_drain(void)
{
    CHECK("idle cached blocks drain at later slow-path allocations") {
        unsigned old = kame_pool_get_lazy_drain_interval_ms();
        /* Filled under a long interval (a slow build must not see the
         * blocks idle yet), drained under a short one, which takes effect
         * at once. */
        kame_pool_set_lazy_drain_interval_ms(60000);
        kame_pool_trim();
        size_t before = kame_pool_reserved_bytes();
        void *p[3];
        for (int i = 0; i < 3; i++) /* in demand: asked for twice */
            kame_pool_free(kame_pool_malloc(10 * MiB + (size_t)i * 3 * MiB));
        for (int i = 0; i < 3; i++)
            p[i] = kame_pool_malloc(10 * MiB + (size_t)i * 3 * MiB);
        for (int i = 0; i < 3; i++)
            kame_pool_free(p[i]);
        size_t cached = kame_pool_reserved_bytes();
        EXPECT_U_GE(cached, before + 30 * MiB);
        kame_pool_set_lazy_drain_interval_ms(2);
        EXPECT_U_EQ(kame_pool_get_lazy_drain_interval_ms(), 2);
        /* Other big-block traffic over a while: the drain clock is read on
         * slow paths and every so many cache pushes. */
        for (int round = 0; round < 8000 && kame_pool_reserved_bytes() > before + 8 * MiB; round++) {
            if (round % 16 == 0)
                sleep_ms(1);
            void *q = kame_pool_malloc(3 * MiB + (size_t)(round % 5) * 256 * KiB);
            kame_pool_free(q);
        }
        EXPECTF(kame_pool_reserved_bytes() <= before + 8 * MiB, "reserved %zu MiB, was %zu before, %zu cached",
                kame_pool_reserved_bytes() >> 20, before >> 20, cached >> 20);
        kame_pool_set_lazy_drain_interval_ms(old);
    }

    /* The hit paths decide nothing, but they count towards a look at the
     * drain clock: a thread that only frees and allocates one size must
     * still give back what else it holds.  The dedicated tier's hit path
     * counts its pushes per L1 slot, the mappings' too. */
    CHECK("idle cached blocks drain while the thread runs a mapping's hit path only") {
        const size_t sizes[] = { 1 * MiB, 2 * MiB, 3 * MiB };
        drain_during_hit_loop(sizes, 3, 8 * MiB, false);
    }
    CHECK("idle cached mappings drain while the thread runs a dedicated block's hit path only") {
        const size_t sizes[] = { 8 * MiB, 12 * MiB };
        drain_during_hit_loop(sizes, 2, 64 * KiB, true);
    }
}

/* The free hit path does not look at the cache's top: a thread gives up
 * its places above a lowered top at its next look at the drain clock (the
 * calling thread at once). */
static void *lower_top(void *arg)
{
    kame_pool_set_large_cache_top(*(size_t *)arg);
    return NULL;
}

static size_t cached_mapping_bytes(void)
{
    kame_pool_stats_t st = KAME_POOL_STATS_INIT;
    kame_pool_get_stats(&st);
    return (size_t)st.cache_mapping_bytes;
}

static size_t unmapped_bytes(void)
{
    kame_pool_stats_t st = KAME_POOL_STATS_INIT;
    kame_pool_get_stats(&st);
    return (size_t)st.unmapped_bytes;
}

/* Makes an 8 MiB mapping recycle through the thread's cache (asked for
 * twice, so its slot keeps it) and leaves it there. */
static void warm_8mib(void)
{
    kame_pool_free(kame_pool_malloc(8 * MiB));
    kame_pool_free(kame_pool_malloc(8 * MiB));
    void *p = kame_pool_malloc(8 * MiB);
    kame_pool_free(p);
    void *q = kame_pool_malloc(8 * MiB);
    EXPECT(q == p);
    kame_pool_free(q);
    EXPECT_U_GE(cached_mapping_bytes(), 8 * MiB);
}

static void test_lowered_top(void)
{
    size_t top = kame_pool_get_large_cache_top();
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_lazy_drain_interval_ms(60000); /* no idle drain meanwhile */
    CHECK("a lowered top empties the calling thread's slots above it at once") {
        kame_pool_trim();
        warm_8mib();
        kame_pool_set_large_cache_top(4 * MiB);
        EXPECT_U_EQ(cached_mapping_bytes(), 0);
        size_t unmapped = unmapped_bytes();
        kame_pool_free(kame_pool_malloc(8 * MiB));
        EXPECT_U_EQ(cached_mapping_bytes(), 0);
        EXPECT_U_GE(unmapped_bytes(), unmapped + 8 * MiB);
        kame_pool_set_large_cache_top(top);
    }
    CHECK("a top lowered by another thread reaches a thread on its hit path only") {
        kame_pool_trim();
        warm_8mib();
        size_t low = 4 * MiB;
        pthread_t t;
        EXPECT(pthread_create(&t, NULL, lower_top, &low) == 0);
        pthread_join(t, NULL);
        EXPECT_U_EQ(kame_pool_get_large_cache_top(), low);
        /* Within a look at the drain clock's worth of frees (a few
         * hundred pushes into the slot). */
        for (int i = 0; i < 1024 && cached_mapping_bytes() != 0; i++) {
            unsigned char *q = kame_pool_malloc(8 * MiB);
            q[0] = 1;
            q[8 * MiB - 1] = 2;
            kame_pool_free(q);
        }
        EXPECT_U_EQ(cached_mapping_bytes(), 0);
        kame_pool_set_large_cache_top(top);
    }
    kame_pool_set_lazy_drain_interval_ms(interval);
}

/* The drain clock is also read on the thread's own cache pushes; a drain
 * that ran in the middle of a push once gave back the very block being
 * pushed (a write to unmapped memory, or a freed chunk marked cached). */
static void test_drain_during_push(void)
{
    CHECK("a drain that runs while a block is being cached leaves that block alone") {
        unsigned old = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(1);
        /* One push per round, so the pushes that read the clock are
         * mappings' (and, every third round's extra push shifting the
         * count, dedicated chunks' too). */
        for (int round = 0; round < 200; round++) {
            unsigned char *m = kame_pool_malloc(8 * MiB);
            unsigned char *d = round % 3 == 0 ? kame_pool_malloc(MiB) : NULL;
            if (!EXPECT_NOT_NULL(m))
                break;
            m[0] = 1;
            if (d != NULL)
                d[0] = 1;
            sleep_ms(3); /* several drain intervals pass before each push */
            kame_pool_free(m);
            kame_pool_free(d);
        }
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_set_lazy_drain_interval_ms(old);
    }
}

/* A free whose push into the thread's cache is the one that looks at the
 * drain clock goes back into the cache by another path than the others:
 * the block must come out of it cached like every other (the walker
 * checks each block in the thread's cache), and be handed out again. */
static void test_push_that_looks(void)
{
    static const size_t sizes[] = { 64 * KiB, 1 * MiB, 8 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        CHECK("frees past the one that looks at the drain clock leave sound cache entries") {
            const int rounds = 600; /* the look is every few hundred pushes */
            unsigned char *last = NULL;
            int problems = 0, moved = 0;
            for (int round = 0; round < rounds; round++) {
                unsigned char *q = kame_pool_malloc(sizes[i]);
                if (!EXPECT_NOT_NULL(q))
                    break;
                q[0] = (unsigned char)round;
                moved += last != NULL && q != last;
                last = q;
                kame_pool_free(q);
                problems += kame_pool_validate() != 0;
            }
            EXPECTF(problems == 0, "%zu KiB: the walker found problems in %d of %d rounds", sizes[i] >> 10, problems, rounds);
            EXPECTF(moved == 0, "%zu KiB: a new block %d times, not the cached one", sizes[i] >> 10, moved);
        }
    }
}

/* The hot cell: the last block a thread freed of a size whose slot grants
 * it a place, kept apart from the slot's entries.  Blocks freed in turn
 * come back last freed first, each is cached where the walker can see it,
 * and a second size freed meanwhile goes to its own slot. */
static void test_hot_cell(void)
{
    static const size_t sizes[] = { 64 * KiB, 1 * MiB, 8 * MiB };
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_lazy_drain_interval_ms(0); /* the sizes stay in demand */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        CHECK("%zu KiB blocks freed in turn come back last freed first", size >> 10) {
            void *a = kame_pool_malloc(size), *b = kame_pool_malloc(size);
            kame_pool_free(a); /* two places granted */
            kame_pool_free(b);
            int order = 0, problems = 0;
            for (int round = 0; round < 300; round++) {
                a = kame_pool_malloc(size);
                b = kame_pool_malloc(size);
                if (!EXPECT_NOT_NULL(a) || !EXPECT_NOT_NULL(b))
                    break;
                memset(a, 0xa5, 64);
                memset(b, 0x5a, 64);
                kame_pool_free(a);
                problems += kame_pool_validate() != 0;
                kame_pool_free(b);
                problems += kame_pool_validate() != 0;
                void *x = kame_pool_malloc(size), *y = kame_pool_malloc(size);
                order += x != b || y != a;
                kame_pool_free(y);
                kame_pool_free(x);
            }
            EXPECTF(problems == 0, "the walker found problems %d times", problems);
            EXPECTF(order == 0, "%d rounds handed the blocks out in another order", order);
        }
        CHECK("%zu KiB and a second size freed in turn each come back, cached", size >> 10) {
            size_t other = size + 256 * KiB; /* another slot: one unit more, or the next mapping class */
            void *a = kame_pool_malloc(size), *b = kame_pool_malloc(other);
            kame_pool_free(a);
            kame_pool_free(b);
            int moved = 0, problems = 0;
            for (int round = 0; round < 600; round++) {
                void *x = kame_pool_malloc(size), *y = kame_pool_malloc(other);
                if (!EXPECT_NOT_NULL(x) || !EXPECT_NOT_NULL(y))
                    break;
                moved += x != a || y != b;
                kame_pool_free(x);
                kame_pool_free(y);
                problems += kame_pool_validate() != 0;
            }
            EXPECTF(problems == 0, "the walker found problems %d times", problems);
            EXPECTF(moved == 0, "%d rounds handed out another block", moved);
        }
        CHECK("the statistics count the hot cell's %zu KiB block as cached, not live", size >> 10) {
            void *p = kame_pool_malloc(size);
            if (EXPECT_NOT_NULL(p)) {
                kame_pool_free(p);
                kame_pool_free(kame_pool_malloc(size)); /* from the cell, back into it */
                kame_pool_stats_t st = KAME_POOL_STATS_INIT;
                kame_pool_get_stats(&st);
                EXPECT_U_GE((size_t)st.cache_bytes, size);
                if (size <= 4 * MiB) /* a dedicated block: its chunk keeps its kind in the cell */
                    EXPECT_U_EQ((size_t)st.dedicated_live_blocks, 0);
                else
                    EXPECT_U_GE((size_t)st.cache_mapping_bytes, size);
            }
        }
        CHECK("calloc(%zu KiB) takes the hot cell's block, zeroed", size >> 10) {
            unsigned char *p = kame_pool_malloc(size);
            if (EXPECT_NOT_NULL(p)) {
                kame_pool_free(p);
                p = kame_pool_malloc(size); /* from the cell */
                memset(p, 0xee, size);
                kame_pool_free(p);
                unsigned char *q = kame_pool_calloc(1, size);
                EXPECT(q == p);
                size_t nonzero = 0;
                for (size_t k = 0; q != NULL && k < size; k++)
                    nonzero += q[k] != 0;
                EXPECTF(nonzero == 0, "%zu bytes not zero", nonzero);
                kame_pool_free(q);
                EXPECT_INT_EQ(kame_pool_validate(), 0);
            }
        }
    }
    kame_pool_set_lazy_drain_interval_ms(interval);
}

/* The highest request the block of a `size`-byte request serves from the
 * thread's cache: its unit count's for a dedicated chunk, its class
 * length (its usable size) for a mapping. */
static size_t slot_top(size_t size, const void *block)
{
    if (size <= 32 * KiB)
        return 32 * KiB; /* a bucket slot, no cache slot: the edge below the first */
    if (size <= 4 * MiB)
        return (size + 256 * KiB - 1) / (256 * KiB) * (256 * KiB);
    return kame_pool_malloc_usable_size((void *)block);
}

/* The hot cell serves the requests of its slot and no other: at each edge
 * between two slots (the bucket tier and the first chunk slot, unit
 * counts, the last chunk slot and the first mapping class, mapping
 * classes, the table's top at 64 MiB), the block that the request on one
 * side freed into the cell is not handed to the request on the other
 * side.  And another thread's mapping of the cell's class does not enter
 * the cell. */
static void test_hot_cell_edges(void)
{
    static const size_t below[] = { 32 * KiB, 200 * KiB, 1 * MiB, 4 * MiB, 4 * MiB + 100, 7 * MiB + 3,
                                    40 * MiB, 64 * MiB };
    size_t cap = kame_pool_get_large_cache_cap();
    kame_pool_set_large_cache_cap(512 * MiB); /* the biggest class stays in the thread's cache */
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_lazy_drain_interval_ms(0); /* the sizes stay in demand */
    for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
        unsigned char *p = kame_pool_malloc(below[i]);
        if (!EXPECT_NOT_NULL(p))
            continue;
        size_t top = slot_top(below[i], p);
        kame_pool_free(p);
        CHECK("the hot cell's block of a %zu-byte request serves no %zu-byte one, and back", top, top + 1) {
            for (int warm = 0; warm < 3; warm++) { /* both sizes in demand */
                kame_pool_free(kame_pool_malloc(top));
                kame_pool_free(kame_pool_malloc(top + 1));
            }
            unsigned char *a = kame_pool_malloc(top);
            if (!EXPECT_NOT_NULL(a))
                break;
            kame_pool_free(a); /* into the cell */
            unsigned char *b = kame_pool_malloc(top + 1);
            if (!EXPECT_NOT_NULL(b))
                break;
            EXPECT(b != a);
            EXPECT_U_GE(kame_pool_malloc_usable_size(b), top + 1);
            touch(b, top + 1, 0x6b); /* every byte asked for is there */
            kame_pool_free(b); /* into the cell */
            EXPECT_INT_EQ(kame_pool_validate(), 0);
            a = kame_pool_malloc(top);
            if (!EXPECT_NOT_NULL(a))
                break;
            EXPECT(a != b);
            EXPECT_U_GE(kame_pool_malloc_usable_size(a), top);
            touch(a, top, 0x6c);
            b = kame_pool_malloc(top + 1);
            EXPECT(b != NULL && b != a);
            kame_pool_free(b);
            kame_pool_free(a);
            EXPECT_INT_EQ(kame_pool_validate(), 0);
        }
    }
    CHECK("another thread's mapping of the hot cell's class does not enter the cell") {
        size_t size = 4 * MiB + 512 * KiB;
        for (int warm = 0; warm < 3; warm++)
            kame_pool_free(kame_pool_malloc(size));
        void *mine = kame_pool_malloc(size); /* the cell's block: the cell is empty, its place reserved */
        void *theirs = run_thread(malloc_size, (void *)(uintptr_t)size);
        EXPECT(theirs != NULL && theirs != mine);
        kame_pool_free(theirs);
        EXPECT_INT_EQ(kame_pool_validate(), 0); /* the walker checks the cell's block is this thread's */
        kame_pool_free(mine);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
    kame_pool_set_lazy_drain_interval_ms(interval);
    kame_pool_set_large_cache_cap(cap);
}

/* ---- Reuse is sound ---------------------------------------------------------- */

static void *free_it(void *p)
{
    kame_pool_free(p);
    return NULL;
}

/* A request that finds no cached block of about its size takes a bigger
 * one from the shared cache, cut to its class length: the same address,
 * the tail given back, the contents of the kept part as they were, and
 * for calloc all zero. */
static void test_cut_to_size(void)
{
    size_t cap = kame_pool_get_large_cache_cap();
    unsigned interval = kame_pool_get_lazy_drain_interval_ms();
    kame_pool_set_large_cache_cap(512 * MiB);
    kame_pool_set_lazy_drain_interval_ms(0); /* no drain gives the block back meanwhile */
    CHECK("a 9 MiB request takes a cached 40 MiB block cut to 9 MiB") {
        kame_pool_trim();
        unsigned char *big = kame_pool_malloc(40 * MiB);
        if (!EXPECT_NOT_NULL(big))
            break;
        touch(big, 40 * MiB, 0x3d);
        run_thread(free_it, big); /* another thread frees it: to L2 */
        size_t reserved = kame_pool_reserved_bytes();
        unsigned char *p = kame_pool_malloc(9 * MiB);
        EXPECT(p == big);
        size_t usable = kame_pool_malloc_usable_size(p);
        EXPECT_U_GE(usable, 9 * MiB);
        EXPECTF(usable < 10 * MiB, "usable %zu KiB", usable >> 10);
        EXPECT_U_EQ(reserved - kame_pool_reserved_bytes(), 40 * MiB - usable); /* the tail went back */
        size_t changed = 0; /* the first page's first word held the cache's tag */
        for (size_t k = 4096; p != NULL && k < usable; k += 4096)
            changed += p[k] != 0x3d;
        EXPECTF(changed == 0, "%zu pages of the kept part changed", changed);
        touch(p, usable, 0x4e);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_free(p);
        EXPECT_INT_EQ(kame_pool_validate(), 0); /* in this thread's cache: marked for its slot */
        kame_pool_trim();
    }
    CHECK("calloc of 5 MiB takes a cached 24 MiB block cut to size, all zero") {
        kame_pool_trim();
        unsigned char *big = kame_pool_malloc(24 * MiB);
        if (!EXPECT_NOT_NULL(big))
            break;
        memset(big, 0xa7, 24 * MiB);
        run_thread(free_it, big);
        unsigned char *p = kame_pool_calloc(1, 5 * MiB + 3);
        EXPECT(p == big);
        size_t nonzero = 0;
        for (size_t k = 0; p != NULL && k < 5 * MiB + 3; k++)
            nonzero += p[k] != 0;
        EXPECTF(nonzero == 0, "%zu bytes not zero", nonzero);
        kame_pool_free(p);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_trim();
    }
    kame_pool_set_lazy_drain_interval_ms(interval);
    kame_pool_set_large_cache_cap(cap);
}

static void test_calloc_reuse(void)
{
    static const size_t sizes[] = { 40 * KiB, 200 * KiB, 900 * KiB, 1536 * KiB, 3 * MiB, 6 * MiB, 20 * MiB, 60 * MiB };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        CHECK("calloc(%zu) is zero after reuse from the thread's cache", n) {
            unsigned char *p = kame_pool_malloc(n);
            memset(p, 0xa5, n);
            kame_pool_free(p);
            unsigned char *q = kame_pool_calloc(1, n);
            if (EXPECT_NOT_NULL(q)) {
                EXPECT_BYTES(q, n, 0);
                kame_pool_free(q);
            }
        }
        CHECK("calloc(%zu) is zero after reuse through the global cache", n) {
            unsigned char *p = kame_pool_malloc(n);
            memset(p, 0x5a, n);
            run_thread(free_it, p); /* another thread frees it: to L2 */
            unsigned char *q = kame_pool_calloc(n, 1);
            if (EXPECT_NOT_NULL(q)) {
                EXPECT_BYTES(q, n, 0);
                kame_pool_free(q);
            }
        }
    }
    CHECK("calloc of a dedicated block on a recycled bucket chunk is zero") {
        enum { N = 4096 };
        static void *s[N];
        for (int i = 0; i < N; i++) {
            s[i] = kame_pool_malloc(64);
            memset(s[i], 0xee, 64);
        }
        for (int i = 0; i < N; i++)
            kame_pool_free(s[i]);
        unsigned char *q = kame_pool_calloc(1, 200 * KiB);
        if (EXPECT_NOT_NULL(q)) {
            EXPECT_BYTES(q, 200 * KiB, 0);
            kame_pool_free(q);
        }
    }
}

/* Blocks handed between threads through the global cache keep their
 * contents and are never handed out twice.  A block carries its size in
 * its first word and a pattern on every page after it. */
enum { XT_THREADS = 3, XT_SLOTS = 16 };
static _Atomic(unsigned char *) xt_slot[XT_SLOTS];
static atomic_int xt_errors;

static int xt_check(unsigned char *p)
{
    size_t n;
    memcpy(&n, p, sizeof n);
    unsigned char v = (unsigned char)((uintptr_t)p >> 12);
    for (size_t i = 4096; i < n; i += 4096)
        if (p[i] != v)
            return 0;
    return p[n - 1] == v;
}

static void *xt_worker(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    for (int step = 0; step < 1500; step++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int i = (int)(s % XT_SLOTS);
        unsigned char *p = atomic_exchange(&xt_slot[i], NULL);
        if (p != NULL) {
            if (!xt_check(p))
                atomic_fetch_add(&xt_errors, 1);
            kame_pool_free(p);
        }
        size_t n = 32 * KiB + (size_t)((s >> 20) % 5) * 700 * KiB + ((s >> 40) % 3 == 0 ? 9 * MiB : 0);
        unsigned char *q = kame_pool_malloc(n);
        if (q == NULL) {
            atomic_fetch_add(&xt_errors, 1);
            continue;
        }
        touch(q, n, (unsigned char)((uintptr_t)q >> 12));
        memcpy(q, &n, sizeof n);
        unsigned char *expected = NULL;
        if (!atomic_compare_exchange_strong(&xt_slot[i], &expected, q))
            kame_pool_free(q); /* another thread filled it meanwhile */
    }
    return NULL;
}

static void test_cross_thread(void)
{
    CHECK("big blocks passed between threads keep their contents") {
        pthread_t t[XT_THREADS];
        for (int i = 0; i < XT_THREADS; i++)
            pthread_create(&t[i], NULL, xt_worker, (void *)(uintptr_t)(i + 1));
        for (int i = 0; i < XT_THREADS; i++)
            pthread_join(t[i], NULL);
        EXPECT_INT_EQ(atomic_load(&xt_errors), 0);
        for (int i = 0; i < XT_SLOTS; i++)
            kame_pool_free(atomic_exchange(&xt_slot[i], NULL));
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

static void test_fork_warm(void)
{
    CHECK("a forked child reuses a warm cache soundly") {
        void *warm[6];
        for (int i = 0; i < 6; i++)
            warm[i] = kame_pool_malloc((size_t)(i + 1) * 700 * KiB + (i > 3 ? 8 * MiB : 0));
        for (int i = 0; i < 6; i++)
            kame_pool_free(warm[i]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            int bad = 0;
            unsigned char *p[6];
            for (int i = 0; i < 6; i++) {
                size_t n = (size_t)(i + 1) * 700 * KiB + (i > 3 ? 8 * MiB : 0);
                p[i] = kame_pool_malloc(n);
                if (p[i] == NULL)
                    bad = 1;
                else
                    touch(p[i], n, (unsigned char)i);
            }
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < i; j++)
                    bad |= p[i] == p[j];
            for (int i = 0; i < 6; i++)
                kame_pool_free(p[i]);
            _exit(bad || kame_pool_validate() != 0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        EXPECTF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    }
}

/* Aligned requests below 4 MiB get mappings of their own; a cached bigger
 * one must not serve a much smaller request. */
static void test_small_aligned_mappings(void)
{
    static const size_t cached[] = { 2 * MiB, 4 * MiB + 512 * KiB, 1 * MiB };
    for (size_t i = 0; i < sizeof cached / sizeof cached[0]; i++) {
        CHECK("an aligned 300 KiB request after a freed aligned %zu KiB block wastes at most a quarter",
              cached[i] >> 10) {
            void *big = NULL, *p = NULL;
            EXPECT_INT_EQ(kame_pool_posix_memalign(&big, MiB, cached[i]), 0);
            kame_pool_free(big); /* kept warm in the cache */
            EXPECT_INT_EQ(kame_pool_posix_memalign(&p, MiB, 300 * KiB), 0);
            size_t usable = kame_pool_malloc_usable_size(p);
            EXPECT_U_GE(usable, 300 * KiB);
            EXPECTF(usable <= 300 * KiB + 300 * KiB / 4 + 64 * KiB, "usable %zu KiB", usable >> 10);
            EXPECT_U_EQ((uintptr_t)p % MiB, 0);
            kame_pool_free(p);
        }
    }
}

/* A mapping's mark in the address map follows it to the thread that takes
 * it from the shared cache; the walker checks every mapping in the
 * thread's own cache for its mark and slot. */
static void test_mapping_changes_thread(void)
{
    CHECK("a mapping another thread allocated is cached as this thread's once it takes it") {
        size_t cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(512 * MiB);
        /* Which block comes back is the cache's choice only while no idle
         * drain runs in between. */
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        kame_pool_trim(); /* no 9 MiB block in the shared cache */
        for (int warm = 0; warm < 3; warm++)
            kame_pool_free(kame_pool_malloc(9 * MiB));
        void *held = kame_pool_malloc(9 * MiB); /* this thread's cached block, out */
        void *p = run_thread(malloc_size, (void *)(uintptr_t)(9 * MiB));
        EXPECT(p != NULL && p != held);
        kame_pool_free(p); /* another thread's: to the shared cache */
        unsigned char *q = kame_pool_malloc(9 * MiB);
        EXPECT(q == p);
        touch(q, 9 * MiB, 0x3c);
        kame_pool_free(q); /* now this thread's, into its own cache */
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        EXPECT(kame_pool_malloc(9 * MiB) == q);
        kame_pool_free(q);
        kame_pool_free(held);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_set_large_cache_cap(cap);
        kame_pool_set_lazy_drain_interval_ms(interval);
    }
}

static void *malloc_three_9mib(void *arg)
{
    void **out = arg;
    for (int i = 0; i < 3; i++)
        out[i] = kame_pool_malloc(9 * MiB);
    return NULL;
}

/* Frees that look at the drain clock: the thread's cache looks at it
 * every so many pushes into one of its slots (a few hundred), and slow
 * paths every so many calls. */
static void frees_that_read_clock(void)
{
    for (int round = 0; round < 1024; round++)
        kame_pool_free(kame_pool_malloc(3 * MiB + (size_t)(round % 4) * 256 * KiB + 1));
}

/* A size the shared cache is asked for keeps its blocks through the idle
 * drain while the requests go on, however long between two of them (a
 * producer faulting in a fresh block); once nobody asks, they go back.
 * The drain interval is long enough (idle after 2, asked for lately for 8
 * intervals of 100 ms) that a late wake-up here does not decide it. */
static void test_l2_demand(void)
{
    CHECK("blocks of a size asked for lately stay in the shared cache through the idle drain") {
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        size_t cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(512 * MiB);
        kame_pool_set_lazy_drain_interval_ms(60000);
        kame_pool_trim();
        void *blocks[3] = { NULL, NULL, NULL };
        pthread_t t;
        pthread_create(&t, NULL, malloc_three_9mib, blocks);
        pthread_join(t, NULL);
        for (int i = 0; i < 3; i++) {
            EXPECT(blocks[i] != NULL);
            kame_pool_free(blocks[i]); /* another thread's: to the shared cache */
        }
        EXPECT_U_GE(cached_mapping_bytes(), 27 * MiB);
        kame_pool_set_lazy_drain_interval_ms(100);
        void *q = kame_pool_malloc(9 * MiB); /* asked for: one of them */
        EXPECT(q == blocks[0] || q == blocks[1] || q == blocks[2]);
        sleep_ms(300); /* the other two idle for more than two intervals */
        frees_that_read_clock();
        EXPECT_U_GE(cached_mapping_bytes(), 18 * MiB);
        /* Nobody asks any more: within the demand window and two idle
         * intervals more, they go back. */
        for (int round = 0; round < 60 && cached_mapping_bytes() != 0; round++) {
            sleep_ms(50);
            frees_that_read_clock();
        }
        EXPECT_U_EQ(cached_mapping_bytes(), 0);
        kame_pool_free(q);
        kame_pool_set_lazy_drain_interval_ms(interval);
        kame_pool_set_large_cache_cap(cap);
    }
}

/* Mappings from 4 MiB to 1 GiB come in classes, 8 per octave: a block
 * is its class's length, so any request of the class reuses it from the
 * thread's cache, and none of the next class does. */
static void test_mapping_classes(void)
{
    static const size_t sizes[] = { 4 * MiB + 1, 4 * MiB + 512 * KiB, 5 * MiB + 3, 9 * MiB,
                                    24 * MiB + 1, 33 * MiB, 63 * MiB + 100 };
    /* A cap that keeps every class's block in the thread's cache (the
     * default on 32-bit targets, 64 MiB, leaves a thread too small a
     * share for the biggest). */
    size_t cap = kame_pool_get_large_cache_cap();
    kame_pool_set_large_cache_cap(512 * MiB);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        CHECK("a %zu-byte mapping is its class's length, reused for its class only", size) {
            /* The size in demand, so that the thread's cache keeps its block. */
            for (int warm = 0; warm < 3; warm++)
                kame_pool_free(kame_pool_malloc(size));
            unsigned char *p = kame_pool_malloc(size);
            EXPECT(p != NULL);
            size_t usable = kame_pool_malloc_usable_size(p);
            EXPECT_U_GE(usable, size);
            EXPECTF(usable - size <= size / 8, "usable %zu for %zu", usable, size);
            touch(p, usable, 0x5a); /* every byte it claims is there */
            kame_pool_free(p);
            /* The smallest and largest request of the class: the same block. */
            size_t octave = (size_t)1 << (63 - __builtin_clzll((unsigned long long)usable - 1));
            size_t low = usable - octave / 8 + 1; /* one past the class below */
            unsigned char *q = kame_pool_malloc(low);
            EXPECT(q == p);
            kame_pool_free(q);
            q = kame_pool_malloc(usable);
            EXPECT(q == p);
            kame_pool_free(q);
            /* One byte more is the next class: a block that holds it (at
             * p's address again if p went back to the OS meanwhile). */
            q = kame_pool_malloc(usable + 1);
            EXPECT(q != NULL);
            EXPECT_U_GE(kame_pool_malloc_usable_size(q), usable + 1);
            touch(q, usable + 1, 0xa5);
            kame_pool_free(q);
        }
    }
    CHECK("a freed aligned mapping below 4 MiB never serves a request of the first class") {
        /* The class in demand, its block out: its place in the thread's
         * cache is free while the aligned block is freed. */
        for (int warm = 0; warm < 3; warm++)
            kame_pool_free(kame_pool_malloc(4 * MiB + 1));
        void *held = kame_pool_malloc(4 * MiB + 1), *small = NULL;
        EXPECT_INT_EQ(kame_pool_posix_memalign(&small, MiB, 300 * KiB), 0);
        kame_pool_free(small);
        unsigned char *p = kame_pool_malloc(4 * MiB + 1);
        EXPECT(p != NULL);
        EXPECT_U_GE(kame_pool_malloc_usable_size(p), 4 * MiB + 1);
        touch(p, 4 * MiB + 1, 0x11);
        kame_pool_free(p);
        kame_pool_free(held);
    }
    kame_pool_set_large_cache_cap(cap);
}

int main(void)
{
    test_calloc_reuse();
    test_mapping_classes();
    test_small_aligned_mappings();
    test_trim_empties();
    test_growth_not_kept();
    test_thread_exit();
    test_lazy_drain();
    test_drain_during_push();
    test_push_that_looks();
    test_hot_cell();
    test_hot_cell_edges();
    test_cut_to_size();
    test_lowered_top();
    test_cross_thread();
    test_mapping_changes_thread();
    test_l2_demand();
    test_fork_warm();
    test_cap_holds();
    return kp_check_summary();
}
