/* Multi-thread stress: random sizes across all four tiers, blocks handed
 * between threads, every block's contents checked before it is freed and
 * every new block checked against the ranges of all live blocks, so an
 * overlap or a slot handed out twice fails the test.
 *
 * Scenarios:
 *   A  producer/consumer pairs: one thread allocates, the other verifies,
 *      sometimes reallocs, and frees.
 *   B  all-to-all: every thread sends blocks to random others, frees what it
 *      receives and some of its own.
 *   C  thread churn: waves of short-lived threads hand blocks to a long-lived
 *      holder, which frees them only after their allocating threads exited,
 *      while the next wave allocates.
 * realloc (contents kept), calloc (zeroed), posix_memalign and
 * usable_size >= size are checked throughout.
 *
 * Environment: KP_TEST_SCALE (factor like 0.1 or percent like 10%; default
 * 1), KP_TEST_SEED (replay another random sequence).  Last output line:
 * "N passed, N failed"; exit status 1 on any failure. */
#include "stress_common.h"

static double g_scale;

/* ------------------------------------------------------------------ */
/* A: producer/consumer pairs */

#define PC_PAIRS 2

typedef struct {
    int id;
    size_t ops;
    st_queue q;
} pc_pair;

static void *pc_producer(void *arg)
{
    pc_pair *pp = arg;
    st_rng r = st_rng_for(100 + (uint64_t)pp->id);
    st_set keep;
    st_set_init(&keep, 512);
    for (size_t i = 0; i < pp->ops; i++) {
        st_blk b;
        if (!st_alloc(&r, &b, st_pick_size(&r, ST_PICK_ALL), "A producer alloc"))
            continue;
        if (st_below(&r, 20) == 0) {
            st_resize(&r, &b, st_pick_resize(&r, b.n, ST_PICK_ALL), "A producer realloc");
            if (!b.p)
                continue;
        }
        if (st_below(&r, 4) != 0) {
            st_queue_push(&pp->q, &b);
        } else {
            if (keep.n == keep.cap) {
                st_blk o = st_set_take(&keep, st_below(&r, keep.n));
                st_release(&o, "A producer free own");
            }
            st_set_add(&keep, &b);
        }
        if (keep.n && st_below(&r, 64) == 0) {
            st_blk o = st_set_take(&keep, st_below(&r, keep.n));
            st_release(&o, "A producer free own");
        }
    }
    st_set_release_all(&keep, "A producer final free");
    st_set_destroy(&keep);
    st_queue_close(&pp->q);
    st_flush();
    return NULL;
}

static void *pc_consumer(void *arg)
{
    pc_pair *pp = arg;
    st_rng r = st_rng_for(200 + (uint64_t)pp->id);
    /* A few blocks are held back so frees do not come in allocation order. */
    st_set held;
    st_set_init(&held, 256);
    st_blk b;
    while (st_queue_pop(&pp->q, &b)) {
        if (!st_verify(&b, "A consumer receive"))
            continue; /* leave a corrupted block alone */
        if (st_below(&r, 20) == 0) {
            st_resize(&r, &b, st_pick_resize(&r, b.n, ST_PICK_ALL), "A consumer realloc");
            if (!b.p)
                continue;
        }
        if (st_below(&r, 8) == 0) {
            if (held.n == held.cap) {
                st_blk o = st_set_take(&held, st_below(&r, held.n));
                st_release(&o, "A consumer free held");
            }
            st_set_add(&held, &b);
        } else {
            st_release(&b, "A consumer free");
        }
    }
    st_set_release_all(&held, "A consumer final free");
    st_set_destroy(&held);
    st_flush();
    return NULL;
}

static void scenario_pc(void)
{
    pc_pair pairs[PC_PAIRS];
    pthread_t tp[PC_PAIRS], tc[PC_PAIRS];
    size_t ops = st_scaled(60000, g_scale, 2000);
    for (int i = 0; i < PC_PAIRS; i++) {
        pairs[i].id = i;
        pairs[i].ops = ops;
        st_queue_init(&pairs[i].q, 256);
    }
    for (int i = 0; i < PC_PAIRS; i++) {
        st_thread_start(&tc[i], pc_consumer, &pairs[i]);
        st_thread_start(&tp[i], pc_producer, &pairs[i]);
    }
    for (int i = 0; i < PC_PAIRS; i++) {
        pthread_join(tp[i], NULL);
        pthread_join(tc[i], NULL);
        st_queue_destroy(&pairs[i].q);
    }
    st_note("A producer/consumer: %d pairs x %zu blocks", PC_PAIRS, ops);
}

/* ------------------------------------------------------------------ */
/* B: all-to-all exchange */

#define A2A_THREADS 6

typedef struct {
    int id;
    size_t ops;
} a2a_arg;

static st_queue a2a_q[A2A_THREADS];
static atomic_int a2a_done;

/* Receives what is waiting: verify, maybe realloc, mostly free, sometimes
 * keep (so the local set mixes own and foreign blocks). */
static void a2a_drain(st_rng *r, int id, st_set *own, size_t max)
{
    st_blk b;
    for (size_t k = 0; k < max && st_queue_try_pop(&a2a_q[id], &b); k++) {
        if (!st_verify(&b, "B receive"))
            continue;
        if (st_below(r, 20) == 0) {
            st_resize(r, &b, st_pick_resize(r, b.n, ST_PICK_ALL), "B realloc received");
            if (!b.p)
                continue;
        }
        if (st_below(r, 5) == 0 && own->n < own->cap)
            st_set_add(own, &b);
        else
            st_release(&b, "B free received");
    }
}

static void *a2a_thread(void *arg)
{
    a2a_arg *a = arg;
    st_rng r = st_rng_for(300 + (uint64_t)a->id);
    st_set own;
    st_set_init(&own, 1024);
    for (size_t i = 0; i < a->ops; i++) {
        st_blk b;
        if (st_alloc(&r, &b, st_pick_size(&r, ST_PICK_ALL), "B alloc")) {
            int sent = 0;
            if (st_below(&r, 10) < 6) {
                int to = (int)st_below(&r, A2A_THREADS - 1);
                if (to >= a->id)
                    to++;
                sent = st_queue_try_push(&a2a_q[to], &b);
            }
            if (!sent) {
                if (own.n == own.cap) {
                    st_blk o = st_set_take(&own, st_below(&r, own.n));
                    st_release(&o, "B free own");
                }
                st_set_add(&own, &b);
            }
        }
        if (own.n && st_below(&r, 40) == 0) {
            st_blk o = st_set_take(&own, st_below(&r, own.n));
            if (st_below(&r, 4) == 0) {
                st_resize(&r, &o, st_pick_resize(&r, o.n, ST_PICK_ALL), "B realloc own");
                if (o.p)
                    st_set_add(&own, &o);
            } else {
                st_release(&o, "B free own");
            }
        }
        if ((i & 7) == 7)
            a2a_drain(&r, a->id, &own, 64);
    }
    atomic_fetch_add(&a2a_done, 1);
    /* Keep receiving until nobody can send any more. */
    while (atomic_load(&a2a_done) < A2A_THREADS) {
        a2a_drain(&r, a->id, &own, 256);
        st_sleep_ms(1);
    }
    a2a_drain(&r, a->id, &own, SIZE_MAX);
    st_set_release_all(&own, "B final free");
    st_set_destroy(&own);
    st_flush();
    return NULL;
}

static void scenario_a2a(void)
{
    a2a_arg args[A2A_THREADS];
    pthread_t t[A2A_THREADS];
    size_t ops = st_scaled(30000, g_scale, 1500);
    atomic_store(&a2a_done, 0);
    for (int i = 0; i < A2A_THREADS; i++) {
        st_queue_init(&a2a_q[i], 256);
        args[i].id = i;
        args[i].ops = ops;
    }
    for (int i = 0; i < A2A_THREADS; i++)
        st_thread_start(&t[i], a2a_thread, &args[i]);
    for (int i = 0; i < A2A_THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < A2A_THREADS; i++) {
        ST_CHECK(a2a_q[i].count == 0, "B: queue %d left with %zu blocks", i, a2a_q[i].count);
        st_queue_destroy(&a2a_q[i]);
    }
    st_note("B all-to-all: %d threads x %zu blocks", A2A_THREADS, ops);
}

/* ------------------------------------------------------------------ */
/* C: waves of short-lived threads and a long-lived holder */

#define CH_WAVE 4

static st_queue ch_q;
static atomic_long ch_completed_wave = -1; /* all threads of waves <= this have exited */

typedef struct {
    long wave;
    int id;
    size_t ops;
} ch_arg;

static void *ch_worker(void *arg)
{
    ch_arg *a = arg;
    st_rng r = st_rng_for(1000 + (uint64_t)a->wave * CH_WAVE + (uint64_t)a->id);
    st_set own;
    st_set_init(&own, 256);
    for (size_t i = 0; i < a->ops; i++) {
        st_blk b;
        if (!st_alloc(&r, &b, st_pick_size(&r, ST_PICK_NO_HUGE), "C worker alloc"))
            continue;
        b.tag = (uint64_t)a->wave;
        uint64_t u = st_below(&r, 10);
        if (u < 2) {
            st_queue_push(&ch_q, &b); /* outlives this thread */
        } else if (u < 4) {
            st_release(&b, "C worker free at once");
        } else {
            if (own.n == own.cap) {
                st_blk o = st_set_take(&own, st_below(&r, own.n));
                if (st_below(&r, 8) == 0) {
                    st_resize(&r, &o, st_pick_resize(&r, o.n, ST_PICK_NO_HUGE),
                              "C worker realloc");
                    if (o.p)
                        st_queue_push(&ch_q, &o);
                } else {
                    st_release(&o, "C worker free own");
                }
            }
            st_set_add(&own, &b);
        }
    }
    /* Leave part of the working set to the holder, free the rest. */
    while (own.n) {
        st_blk o = st_set_take(&own, own.n - 1);
        if (st_below(&r, 3) == 0)
            st_queue_push(&ch_q, &o);
        else
            st_release(&o, "C worker exit free");
    }
    st_set_destroy(&own);
    st_flush();
    return NULL;
}

static void *ch_holder(void *arg)
{
    (void)arg;
    st_rng r = st_rng_for(999);
    /* FIFO of held blocks; a block is freed once its wave has exited. */
    const size_t cap = 1 << 16;
    st_blk *fifo = st_map(cap * sizeof *fifo);
    size_t head = 0, count = 0, max_count = 0, freed_after_exit = 0;
    st_blk b;
    while (st_queue_pop(&ch_q, &b)) {
        if (count == cap) { /* cannot happen with the wave sizes used; stay safe */
            st_release(&fifo[head], "C holder overflow free");
            head = (head + 1) % cap;
            count--;
        }
        fifo[(head + count) % cap] = b;
        count++;
        if (count > max_count)
            max_count = count;
        long done = atomic_load(&ch_completed_wave);
        while (count && (long)fifo[head].tag <= done) {
            st_blk *h = &fifo[head];
            if (st_below(&r, 16) == 0) {
                /* a realloc by a thread that does not own the block, whose
                 * owner is gone */
                st_resize(&r, h, st_pick_resize(&r, h->n, ST_PICK_NO_HUGE), "C holder realloc");
            }
            if (h->p)
                st_release(h, "C holder free after owner exit");
            freed_after_exit++;
            head = (head + 1) % cap;
            count--;
        }
    }
    while (count) {
        st_release(&fifo[head], "C holder final free");
        head = (head + 1) % cap;
        count--;
    }
    st_unmap(fifo, cap * sizeof *fifo);
    ST_CHECK(freed_after_exit > 0, "C: holder never freed a block of an exited wave");
    st_note("C holder: freed %zu blocks after their threads exited, held at most %zu",
            freed_after_exit, max_count);
    st_flush();
    return NULL;
}

static void scenario_churn(void)
{
    size_t waves = st_scaled(40, g_scale, 6);
    size_t ops = st_scaled(3000, g_scale, 600);
    st_queue_init(&ch_q, 4096);
    atomic_store(&ch_completed_wave, -1);
    pthread_t holder;
    st_thread_start(&holder, ch_holder, NULL);
    for (size_t w = 0; w < waves; w++) {
        pthread_t t[CH_WAVE];
        ch_arg args[CH_WAVE];
        for (int i = 0; i < CH_WAVE; i++) {
            args[i].wave = (long)w;
            args[i].id = i;
            args[i].ops = ops;
            st_thread_start(&t[i], ch_worker, &args[i]);
        }
        for (int i = 0; i < CH_WAVE; i++)
            pthread_join(t[i], NULL);
        atomic_store(&ch_completed_wave, (long)w);
    }
    st_queue_close(&ch_q);
    pthread_join(holder, NULL);
    st_queue_destroy(&ch_q);
    st_note("C churn: %zu waves x %d threads x %zu blocks", waves, CH_WAVE, ops);
}

int main(void)
{
    g_scale = st_scale();
    st_watchdog("test_stress", g_scale);
    st_registry_init();
    setvbuf(stdout, NULL, _IOLBF, 0);
    st_note("test_stress: scale %.3g, seed %#llx", g_scale,
            (unsigned long long)st_base_seed());

    scenario_pc();
    scenario_a2a();
    scenario_churn();

    ST_CHECK(atomic_load(&st_big_live) == 0, "big-block budget not back to 0: %zu",
             atomic_load(&st_big_live));
    return st_finish("test_stress");
}
