/* Statistics against workloads whose answers are known.
 *   - the versioned struct: what a caller of each version gets, and
 *     nothing past it;
 *   - live blocks and bytes of each tier as blocks are allocated and
 *     freed (N blocks of a class, M freed), detached chunks of an exited
 *     thread and their blocks freed by another thread;
 *   - the cache's holdings, bytes given back by trim, threads seen and
 *     live, bad pointers counted;
 *   - the table and the JSON name every field of the list.
 * Each measuring thread allocates nothing between its two readings. */
#include "check.h"

#include <kame_pool.h>
#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <stdatomic.h>


#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static kame_pool_stats_t stats(void)
{
    kame_pool_stats_t s = KAME_POOL_STATS_INIT;
    kame_pool_get_stats(&s);
    return s;
}

#define N 1000
#define M 300

static void *blocks[N];

/* ---- a thread that allocates N blocks and waits ------------------------ */

static sem_t allocated, may_exit;

static void *holder(void *arg)
{
    size_t size = (size_t)(uintptr_t)arg;
    for (int i = 0; i < N; i++)
        blocks[i] = kame_pool_malloc(size);
    sem_post(&allocated);
    sem_wait(&may_exit);
    return NULL;
}

static void *idle_thread(void *arg)
{
    void *p = kame_pool_malloc(64);
    kame_pool_free(p);
    sem_post(&allocated);
    sem_wait((sem_t *)arg);
    return NULL;
}

static void *small_blocks(void *arg)
{
    (void)arg;
    CHECK("N blocks of 64 B: small_live_blocks and bytes grow by N; M freed: shrink by M") {
        kame_pool_stats_t a = stats();
        for (int i = 0; i < N; i++)
            blocks[i] = kame_pool_malloc(64);
        kame_pool_stats_t b = stats();
        for (int i = 0; i < M; i++)
            kame_pool_free(blocks[i]);
        kame_pool_stats_t c = stats();
        EXPECT_U_EQ(b.small_live_blocks - a.small_live_blocks, N);
        EXPECT_U_EQ(b.small_live_bytes - a.small_live_bytes, (unsigned long long)N * 64);
        EXPECT_U_EQ(b.small_live_blocks - c.small_live_blocks, M);
        EXPECT_U_EQ(b.live_bytes - c.live_bytes, (unsigned long long)M * 64);
        EXPECT_U_GE(b.chunks_bucket, a.chunks_bucket);
        for (int i = M; i < N; i++)
            kame_pool_free(blocks[i]);
        kame_pool_stats_t d = stats();
        EXPECT_U_EQ(d.small_live_blocks, a.small_live_blocks);
    }
    CHECK("a size between two classes counts its class's slot bytes (100 B -> 112 B)") {
        kame_pool_stats_t a = stats();
        void *p[10];
        for (int i = 0; i < 10; i++)
            p[i] = kame_pool_malloc(100);
        kame_pool_stats_t b = stats();
        size_t usable = kame_pool_malloc_usable_size(p[0]);
        for (int i = 0; i < 10; i++)
            kame_pool_free(p[i]);
        EXPECT_U_EQ(b.small_live_blocks - a.small_live_blocks, 10);
        EXPECT_U_EQ(b.small_live_bytes - a.small_live_bytes, 10 * usable);
    }
    return NULL;
}

static void *big_blocks(void *arg)
{
    (void)arg;
    CHECK("dedicated blocks: 5 of 100 KiB are 5 live one-unit chunks; freed, the cache holds them") {
        /* The size must stay in demand from the requests to the frees: no
         * drain ticks in between (a loaded machine can spend 20 ms). */
        unsigned old_drain = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        kame_pool_stats_t a = stats();
        void *p[5];
        for (int i = 0; i < 5; i++)
            p[i] = kame_pool_malloc(100 * KiB);
        kame_pool_stats_t b = stats();
        for (int i = 0; i < 5; i++)
            kame_pool_free(p[i]);
        kame_pool_stats_t c = stats();
        EXPECT_U_EQ(b.dedicated_live_blocks - a.dedicated_live_blocks, 5);
        EXPECT_U_EQ(b.dedicated_live_bytes - a.dedicated_live_bytes, 5 * 256 * KiB);
        EXPECT_U_EQ(c.dedicated_live_blocks, a.dedicated_live_blocks);
        /* Freed by the thread that allocated them: kept warm in its cache. */
        EXPECT_U_EQ(c.chunks_cached - a.chunks_cached, 5);
        EXPECT_U_EQ(c.cache_chunk_bytes - a.cache_chunk_bytes, 5 * 256 * KiB);
        kame_pool_set_lazy_drain_interval_ms(old_drain);
    }
    CHECK("large and huge blocks are counted by tier; freed, they are cached mappings") {
        /* Each size asked for once before, so the cache keeps its block
         * (it gives back at once a size nobody asked for lately).  No drain
         * ticks meanwhile: one tick (10 ms, easily spent under an emulator)
         * would make the sizes not asked for lately again. */
        unsigned old_drain = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        kame_pool_free(kame_pool_malloc(8 * MiB));
        kame_pool_free(kame_pool_malloc(40 * MiB));
        /* Room for both whatever the target's default cap (64 MiB on
         * 32-bit targets, half of it per thread). */
        size_t old_cap = kame_pool_get_large_cache_cap();
        kame_pool_set_large_cache_cap(256 * MiB);
        kame_pool_trim(); /* the warm-up's blocks leave the cache */
        kame_pool_stats_t a = stats();
        void *l = kame_pool_malloc(8 * MiB);
        void *h = kame_pool_malloc(40 * MiB);
        kame_pool_stats_t b = stats();
        kame_pool_free(l);
        kame_pool_free(h);
        kame_pool_stats_t c = stats();
        EXPECT_U_EQ(b.large_live_blocks - a.large_live_blocks, 1);
        EXPECT_U_EQ(b.large_live_bytes - a.large_live_bytes, 8 * MiB);
        EXPECT_U_EQ(b.huge_live_blocks - a.huge_live_blocks, 1);
        EXPECT_U_EQ(b.huge_live_bytes - a.huge_live_bytes, 40 * MiB);
        EXPECT_U_GE(b.reserved_bytes - a.reserved_bytes, 48 * MiB);
        EXPECT_U_GE(b.reserved_peak_bytes, b.reserved_bytes);
        EXPECT_U_EQ(c.large_live_blocks, a.large_live_blocks);
        EXPECT_U_EQ(c.huge_live_blocks, a.huge_live_blocks);
        EXPECT_U_EQ(c.cache_mappings - a.cache_mappings, 2);
        EXPECT_U_EQ(c.cache_mapping_bytes - a.cache_mapping_bytes, 48 * MiB);
        EXPECT_U_EQ(c.cache_bytes - a.cache_bytes, 48 * MiB);
        kame_pool_set_large_cache_cap(old_cap);
        kame_pool_set_lazy_drain_interval_ms(old_drain);
    }
    CHECK("trim gives back what the cache holds: cache empty, bytes returned counted") {
        kame_pool_stats_t a = stats();
        kame_pool_trim();
        kame_pool_stats_t b = stats();
        EXPECT_U_EQ(b.trims - a.trims, 1);
        EXPECT_U_EQ(b.cache_bytes, 0);
        EXPECT_U_EQ(b.cache_global_bytes, 0);
        EXPECT_U_GE(b.trim_returned_bytes - a.trim_returned_bytes, a.cache_bytes);
        /* The mappings were unmapped, the chunks purged. */
        EXPECT_U_GE(b.unmapped_bytes - a.unmapped_bytes, a.cache_mapping_bytes);
        EXPECT_U_GE(b.purged_bytes - a.purged_bytes, a.cache_chunk_bytes);
        EXPECT_U_EQ(a.reserved_bytes - b.reserved_bytes, a.cache_mapping_bytes);
        EXPECT_U_EQ(b.units_dirty, 0);
    }
    return NULL;
}

/* ---- reading while other threads allocate and free --------------------- */
#ifndef KP_TSAN

static atomic_int churn_stop;
static atomic_long churned;
static void *_Atomic handoff[64];

static void *churner(void *arg)
{
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    void *keep[32] = {0};
    while (!atomic_load(&churn_stop)) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned k = (unsigned)(x % 32);
        size_t size = (x >> 8) % 8 == 0 ? (size_t)((x >> 16) % (6 * MiB)) + 1 : (size_t)((x >> 16) % 2048) + 1;
        kame_pool_free(keep[k]);
        keep[k] = kame_pool_malloc(size);
        /* Some blocks are freed by another thread than their allocator. */
        void *mine = keep[(k + 1) % 32];
        keep[(k + 1) % 32] = atomic_exchange(&handoff[x % 64], mine);
        atomic_fetch_add(&churned, 1);
    }
    for (unsigned k = 0; k < 32; k++)
        kame_pool_free(keep[k]);
    return NULL;
}

static void snapshots_under_churn(void)
{
    CHECK("statistics read while 4 threads allocate, free and hand blocks over stay sane") {
        enum { T = 4 };
        pthread_t t[T];
        int made = 0;
        for (; made < T; made++)
            if (pthread_create(&t[made], NULL, churner, (void *)(uintptr_t)(made + 1)) != 0)
                break;
        unsigned bad = 0;
        /* Readings overlap the churn: from once it runs until it has done
         * many more operations. */
        while (made == T && atomic_load(&churned) < 1000)
            sched_yield();
        long until = atomic_load(&churned) + 50000;
        int i = 0;
        for (; i < 300 || (made == T && atomic_load(&churned) < until); i++) {
            kame_pool_stats_t s = stats();
            if (s.units_claimed + s.units_dirty + s.units_clean != s.regions * 127)
                bad++;
            if (s.live_bytes > s.reserved_bytes || s.threads_live > s.threads_seen)
                bad++;
            if (s.small_live_bytes > s.chunks_bucket * 16 * 256 * KiB)
                bad++;
            FILE *f = tmpfile();
            if (f != NULL) {
                kame_pool_print_stats(f, i % 2);
                fclose(f);
            }
        }
        atomic_store(&churn_stop, 1);
        for (int i = 0; i < made; i++)
            pthread_join(t[i], NULL);
        for (int i = 0; i < 64; i++)
            kame_pool_free(atomic_exchange(&handoff[i], NULL));
        EXPECT_INT_EQ(made, T);
        EXPECT_U_GE(i, 300);
        EXPECT_U_EQ(bad, 0);
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}
#endif

static void run(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) == 0)
        pthread_join(t, NULL);
}

int main(void)
{
    CHECK("version 0 or NULL: nothing filled") {
        kame_pool_stats_t s;
        memset(&s, 0xab, sizeof s);
        s.version = 0;
        EXPECT_U_EQ(kame_pool_get_stats(&s), 0);
        EXPECT_U_EQ(s.reserved_bytes, 0xababababababababull);
        EXPECT_U_EQ(kame_pool_get_stats(NULL), 0);
    }
    CHECK("the current version fills the whole struct and nothing past it") {
        struct {
            kame_pool_stats_t s;
            unsigned long long canary;
        } buf;
        memset(&buf, 0xab, sizeof buf);
        buf.s.version = KAME_POOL_STATS_VERSION;
        EXPECT_U_EQ(kame_pool_get_stats(&buf.s), KAME_POOL_STATS_VERSION);
        EXPECT_U_EQ(buf.s.size, sizeof(kame_pool_stats_t));
        EXPECT_U_EQ(buf.canary, 0xababababababababull);
        EXPECT_U_NE(buf.s.threads_seen, 0xababababababababull);
    }
    CHECK("a caller from a later version gets this version's fields, told so") {
        kame_pool_stats_t s = KAME_POOL_STATS_INIT;
        s.version = KAME_POOL_STATS_VERSION + 5;
        EXPECT_U_EQ(kame_pool_get_stats(&s), KAME_POOL_STATS_VERSION);
        EXPECT_U_EQ(s.version, KAME_POOL_STATS_VERSION);
    }
    CHECK("fields are appended in version order, so each version is a prefix") {
        unsigned last = 1, ok = 1;
        size_t last_offset = 0;
#define ORDER(name, since, acc, unit, text, src)                                                   \
        if ((since) < last || offsetof(kame_pool_stats_t, name) < last_offset) ok = 0;             \
        last = (since);                                                                            \
        last_offset = offsetof(kame_pool_stats_t, name);
        KAME_POOL_STATS_FIELDS(ORDER)
#undef ORDER
        EXPECT_U_EQ(ok, 1);
        EXPECT_U_LE(last, KAME_POOL_STATS_VERSION);
    }

    run(small_blocks, NULL);
    run(big_blocks, NULL);

    CHECK("an exited thread's chunks are detached with their live blocks; freed by another thread, they go "
          "(the reader's own batched frees show at once)") {
        sem_init(&allocated, 0, 0);
        sem_init(&may_exit, 0, 0);
        kame_pool_stats_t a = stats();
        pthread_t t;
        if (!EXPECT_INT_EQ(pthread_create(&t, NULL, holder, (void *)(uintptr_t)48), 0))
            continue;
        sem_wait(&allocated);
        kame_pool_stats_t b = stats();
        sem_post(&may_exit);
        pthread_join(t, NULL);
        kame_pool_stats_t c = stats();
        for (int i = 0; i < M; i++)
            kame_pool_free(blocks[i]);
        kame_pool_stats_t d = stats(); /* no trim: the batches are published by the read */
        for (int i = M; i < N; i++)
            kame_pool_free(blocks[i]);
        kame_pool_trim();
        kame_pool_stats_t e = stats();
        EXPECT_U_EQ(b.small_live_blocks - a.small_live_blocks, N);
        EXPECT_U_EQ(c.small_live_blocks - a.small_live_blocks, N);
        EXPECT_U_GT(c.chunks_detached, a.chunks_detached);
        EXPECT_U_EQ(c.small_live_blocks - d.small_live_blocks, M);
        EXPECT_U_EQ(e.small_live_blocks, a.small_live_blocks);
        EXPECT_U_EQ(e.chunks_detached, a.chunks_detached);
    }

    CHECK("threads_seen and threads_live follow threads as they come and go") {
        enum { T = 4 };
        sem_t release;
        sem_init(&allocated, 0, 0);
        sem_init(&release, 0, 0);
        kame_pool_stats_t a = stats();
        pthread_t t[T];
        int made = 0;
        for (; made < T; made++)
            if (pthread_create(&t[made], NULL, idle_thread, &release) != 0)
                break;
        for (int i = 0; i < made; i++)
            sem_wait(&allocated);
        kame_pool_stats_t b = stats();
        for (int i = 0; i < made; i++)
            sem_post(&release);
        for (int i = 0; i < made; i++)
            pthread_join(t[i], NULL);
        kame_pool_stats_t c = stats();
        EXPECT_INT_EQ(made, T);
        EXPECT_U_EQ(b.threads_live - a.threads_live, T);
        EXPECT_U_EQ(b.threads_seen - a.threads_seen, T);
        EXPECT_U_EQ(c.threads_live, a.threads_live);
        EXPECT_U_EQ(c.threads_seen, b.threads_seen);
    }

#ifndef KP_TSAN
    /* The walks read chunk headers and free lists that their owners are
     * changing: a race by design (the figures are snapshots), which
     * ThreadSanitizer would rightly report, so not under it. */
    snapshots_under_churn();
#endif

    CHECK("units add up: claimed + dirty + clean = 127 per region") {
        kame_pool_stats_t s = stats();
        EXPECT_U_GE(s.regions, 1);
        EXPECT_U_EQ(s.units_claimed + s.units_dirty + s.units_clean, s.regions * 127);
        EXPECT_U_GE(s.reserved_bytes, s.regions * 32 * MiB);
    }

    CHECK("a bad pointer is counted, also at check level 0 where it is ignored") {
        void *p = kame_pool_malloc(100 * KiB);
        if (!EXPECT_NOT_NULL(p))
            continue;
        int level = kame_pool_get_check_level();
        kame_pool_set_check_level(0);
        kame_pool_stats_t a = stats();
        kame_pool_free((char *)p + 64);
        kame_pool_stats_t b = stats();
        kame_pool_set_check_level(level);
        kame_pool_free(p);
        EXPECT_U_EQ(b.invalid_pointers - a.invalid_pointers, 1);
    }

    CHECK("the table and the JSON name every field, and the JSON has this version's values") {
        FILE *f = tmpfile();
        if (!EXPECT_NOT_NULL(f))
            continue;
        kame_pool_print_stats(f, KAME_POOL_STATS_TABLE);
        long table_end = ftell(f);
        kame_pool_print_stats(f, KAME_POOL_STATS_JSON);
        long end = ftell(f);
        char *text = calloc(1, (size_t)end + 1);
        rewind(f);
        EXPECT_U_EQ(fread(text, 1, (size_t)end, f), (size_t)end);
        fclose(f);
        char *json = text + table_end;
        text[table_end - 1] = '\0';
        EXPECT(strncmp(json, "{\"version\": ", 12) == 0);
        EXPECT(strcmp(json + strlen(json) - 2, "}\n") == 0);
        unsigned missing_table = 0, missing_json = 0;
        char key[80];
#define NAMED(name, since, acc, unit, text_, src)                                                  \
        snprintf(key, sizeof key, "\n  %s ", #name);                                               \
        if (strstr(text, key) == NULL) missing_table++;                                            \
        snprintf(key, sizeof key, ", \"%s\": ", #name);                                            \
        if (strstr(json, key) == NULL) missing_json++;
        KAME_POOL_STATS_FIELDS(NAMED)
#undef NAMED
        EXPECT_U_EQ(missing_table, 0);
        EXPECT_U_EQ(missing_json, 0);
        free(text);
    }
    return kp_check_summary();
}
