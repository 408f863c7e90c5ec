/* Thread churn must not grow memory without bound.  Hundreds of short-lived
 * threads, a few at a time, each allocate a working set that touches every
 * bucket class plus a few dedicated blocks (and now and then a large one),
 * free most of it, and leave a share to a long-lived holder thread, which
 * verifies and frees those blocks once their allocating thread has exited.
 *
 * kame_pool_reserved_bytes() is read after a warm-up and again after all
 * waves.  The growth allowed in between is max(64 MiB, warm-up / 2), and the
 * test runs enough threads after the warm-up that an allocator which never
 * reused exited threads' memory would exceed that bound at least three times
 * over (the per-thread footprint is measured, not assumed).  Finally
 * kame_pool_trim() must not increase reserved bytes.
 *
 * Environment: KP_TEST_SCALE (factor like 0.1 or percent like 10%; default
 * 1 = 1000 threads; floors keep the test sensitive at any scale),
 * KP_TEST_SEED.  Last output line: "N passed, N failed"; exit status 1 on
 * any failure. */
#include "stress_common.h"

#define WAVE 4

/* One size per bucket class at least: every 8 B up to 128 B, then eight
 * steps per doubling (finer than the classes' 25 %) up to 32 KiB. */
static size_t sweep[128];
static size_t nsweep;

static void build_sweep(void)
{
    for (size_t n = 8; n <= 128; n += 8)
        sweep[nsweep++] = n;
    for (size_t base = 128; base < ST_SMALL_MAX; base *= 2)
        for (size_t k = 1; k <= 8; k++)
            sweep[nsweep++] = base + base * k / 8;
}

static st_queue holder_q;
static atomic_long completed_wave = -1; /* threads of waves <= this have exited */
static atomic_size_t footprint_sum;     /* sum of per-thread peak live bytes */
static atomic_size_t footprint_threads;

typedef struct {
    long wave;
    int id;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *a = arg;
    st_rng r = st_rng_for(10000 + (uint64_t)a->wave * WAVE + (uint64_t)a->id);
    size_t extra = 400, dedicated = 3;
    size_t cap = nsweep * 2 + extra + dedicated + 1;
    st_set set;
    st_set_init(&set, cap);
    size_t live = 0;
    st_blk b;

    for (size_t i = 0; i < nsweep; i++)
        for (int k = 0; k < 2; k++)
            if (st_alloc(&r, &b, sweep[i], "worker sweep")) {
                st_set_add(&set, &b);
                live += b.n;
            }
    for (size_t i = 0; i < extra; i++)
        if (st_alloc(&r, &b, st_pick_small(&r), "worker extra")) {
            st_set_add(&set, &b);
            live += b.n;
        }
    for (size_t i = 0; i < dedicated; i++)
        if (st_alloc(&r, &b, st_log_range(&r, 40 * ST_KIB, ST_MIB), "worker dedicated")) {
            st_set_add(&set, &b);
            live += b.n;
        }
    if (a->id == 0 && a->wave % 2 == 0)
        if (st_alloc(&r, &b, (size_t)st_range(&r, 5 * ST_MIB, 12 * ST_MIB), "worker large")) {
            st_set_add(&set, &b);
            live += b.n;
        }
    atomic_fetch_add(&footprint_sum, live);
    atomic_fetch_add(&footprint_threads, 1);

    /* Free in random order; about one block in seven goes to the holder
     * (the thread's chunks then outlive it), a few are resized first. */
    while (set.n) {
        st_blk o = st_set_take(&set, st_below(&r, set.n));
        uint64_t u = st_below(&r, 100);
        if (u < 4) {
            st_resize(&r, &o, st_pick_resize(&r, o.n, ST_PICK_SMALL), "worker realloc");
            if (!o.p)
                continue;
        }
        if (u % 7 == 0) {
            o.tag = (uint64_t)a->wave;
            st_queue_push(&holder_q, &o);
        } else {
            st_release(&o, "worker free");
        }
    }
    st_set_destroy(&set);
    st_flush();
    return NULL;
}

static void *holder(void *arg)
{
    (void)arg;
    const size_t cap = 1 << 16;
    st_blk *fifo = st_map(cap * sizeof *fifo);
    size_t head = 0, count = 0, freed = 0;
    st_blk b;
    while (st_queue_pop(&holder_q, &b)) {
        if (count == cap) {
            st_release(&fifo[head], "holder overflow free");
            head = (head + 1) % cap;
            count--;
        }
        fifo[(head + count) % cap] = b;
        count++;
        /* Free blocks of waves that have exited, while the current wave
         * allocates. */
        long done = atomic_load(&completed_wave);
        while (count && (long)fifo[head].tag <= done) {
            st_release(&fifo[head], "holder free after owner exit");
            freed++;
            head = (head + 1) % cap;
            count--;
        }
    }
    while (count) {
        st_release(&fifo[head], "holder final free");
        freed++;
        head = (head + 1) % cap;
        count--;
    }
    st_unmap(fifo, cap * sizeof *fifo);
    ST_CHECK(freed > 0, "holder received no blocks");
    st_flush();
    return NULL;
}

static void run_wave(long w)
{
    pthread_t t[WAVE];
    worker_arg args[WAVE];
    for (int i = 0; i < WAVE; i++) {
        args[i].wave = w;
        args[i].id = i;
        st_thread_start(&t[i], worker, &args[i]);
    }
    for (int i = 0; i < WAVE; i++)
        pthread_join(t[i], NULL);
    atomic_store(&completed_wave, w);
}

int main(void)
{
    double scale = st_scale();
    st_watchdog("test_thread_churn", scale);
    st_registry_init();
    build_sweep();
    setvbuf(stdout, NULL, _IOLBF, 0);

    size_t planned_threads = st_scaled(1000, scale, 120);
    size_t waves = (planned_threads + WAVE - 1) / WAVE;
    size_t warm_waves = waves / 10 < 8 ? 8 : waves / 10;
    st_note("test_thread_churn: scale %.3g, %zu threads planned in waves of %d, %zu warm-up waves, "
            "%zu sizes per sweep",
            scale, waves * WAVE, WAVE, warm_waves, nsweep);

    st_queue_init(&holder_q, 8192);
    pthread_t h;
    st_thread_start(&h, holder, NULL);

    long w = 0;
    for (; (size_t)w < warm_waves; w++)
        run_wave(w);
    size_t warm = kame_pool_reserved_bytes();
    /* the holder still holds blocks, so the pool has regions mapped */
    ST_CHECK(warm > 0, "kame_pool_reserved_bytes() is 0 while blocks are live");
    size_t per_thread = atomic_load(&footprint_sum) / atomic_load(&footprint_threads);
    size_t allowed = warm / 2 > 64 * ST_MIB ? warm / 2 : 64 * ST_MIB;

    /* Enough threads after the warm-up that a non-reusing allocator would
     * need at least 3x the allowed growth. */
    size_t need_threads = (3 * allowed + per_thread - 1) / per_thread;
    size_t need_waves = (need_threads + WAVE - 1) / WAVE;
    if (waves < warm_waves + need_waves)
        waves = warm_waves + need_waves;
    st_note("after warm-up: reserved %zu MiB, per-thread peak live %zu KiB, allowed growth %zu MiB, "
            "running %zu more threads (a non-reusing allocator needs >= %zu MiB more)",
            warm / ST_MIB, per_thread / ST_KIB, allowed / ST_MIB, (waves - warm_waves) * WAVE,
            (waves - warm_waves) * WAVE * per_thread / ST_MIB);

    size_t peak = warm;
    for (; (size_t)w < waves; w++) {
        run_wave(w);
        size_t now = kame_pool_reserved_bytes();
        if (now > peak)
            peak = now;
    }
    st_queue_close(&holder_q);
    pthread_join(h, NULL);
    st_queue_destroy(&holder_q);

    size_t end = kame_pool_reserved_bytes();
    st_note("after %ld waves (%ld threads): reserved %zu MiB (peak seen %zu MiB)", w, w * WAVE,
            end / ST_MIB, peak / ST_MIB);
    ST_CHECK(end <= warm + allowed,
             "reserved bytes grew from %zu MiB after warm-up to %zu MiB after %ld threads "
             "(allowed growth %zu MiB): memory of exited threads is not reused",
             warm / ST_MIB, end / ST_MIB, w * WAVE, allowed / ST_MIB);

    kame_pool_trim();
    size_t trimmed = kame_pool_reserved_bytes();
    st_note("after kame_pool_trim: reserved %zu MiB", trimmed / ST_MIB);
    ST_CHECK(trimmed <= end, "kame_pool_trim increased reserved bytes: %zu -> %zu", end, trimmed);

    /* The pool still works after all that. */
    st_rng r = st_rng_for(3);
    st_blk b;
    if (st_alloc(&r, &b, 12345, "after trim"))
        st_release(&b, "after trim");
    ST_CHECK(atomic_load(&st_big_live) == 0, "big-block budget not back to 0: %zu",
             atomic_load(&st_big_live));
    return st_finish("test_thread_churn");
}
