/* The claim of units against a cleaner that holds some (region.c),
 * white-box: the program links the static library and calls the region
 * layer itself.  A cleaner purging dirty units holds them claimed; a claim
 * that finds nothing else free must not wait for that cleaner to finish,
 * which may be preempted (or, as here, stopped) for as long as the
 * scheduler likes: it makes a new region instead. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* The test helper's own kp_check_init, not the library's. */
#define kp_check_init kp_test_check_init
#include "check.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { 0, (long)ms * 1000000 };
    nanosleep(&ts, NULL);
}

static atomic_int cleaner_go, cleaner_in, cleaner_release, claim_done, watchdog_fired;

/* The cleaner's purge, stopped until the test lets it go; it then says the
 * OS refused, so the units stay dirty. */
static bool stopped_clean(void *addr, size_t len)
{
    (void)addr;
    (void)len;
    atomic_store(&cleaner_in, 1);
    while (!atomic_load(&cleaner_release))
        sleep_ms(1);
    return false;
}

static void *cleaner(void *arg)
{
    (void)arg;
    while (!atomic_load(&cleaner_go))
        sleep_ms(1);
    kp_units_clean_dirty(stopped_clean, 0);
    return NULL;
}

/* Lets the cleaner go if the claim has not come back after 20 s, so that
 * a claim that waits for it fails the test instead of hanging it. */
static void *watchdog(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000 && !atomic_load(&claim_done); i++)
        sleep_ms(1);
    if (!atomic_load(&claim_done)) {
        atomic_store(&watchdog_fired, 1);
        atomic_store(&cleaner_release, 1);
    }
    return NULL;
}

static unsigned free_units_everywhere(void)
{
    unsigned n = 0;
    for (kp_region *r = kp_regions_first(); r != NULL; r = r->next)
        for (unsigned w = 0; w < KP_UNIT_WORDS; w++)
            n += (unsigned)__builtin_popcountll(~atomic_load(&r->claimed[w]));
    return n;
}

static bool is_region(const kp_region *x)
{
    for (kp_region *r = kp_regions_first(); r != NULL; r = r->next)
        if (r == x)
            return true;
    return false;
}

#define MAX_HELD 8192
static kp_chunk *held[MAX_HELD];

int main(void)
{
    CHECK("a claim does not wait for a stopped cleaner that holds the only free unit") {
        /* The threads first: starting one may allocate. */
        pthread_t tc, tw;
        EXPECT(pthread_create(&tc, NULL, cleaner, NULL) == 0);
        EXPECT(pthread_create(&tw, NULL, watchdog, NULL) == 0);
        kame_pool_trim(); /* no dirty units but the one below */
        /* Every unit of every region claimed (the first claim makes a
         * region where there is none yet: the pool need not be the
         * program's malloc). */
        unsigned n = 0;
        bool zeroed;
        do {
            kp_chunk *c = kp_units_claim(NULL, 1, &zeroed);
            if (c == NULL)
                break;
            held[n++] = c;
        } while (free_units_everywhere() != 0 && n < MAX_HELD);
        EXPECT_U_EQ(free_units_everywhere(), 0);
        if (!EXPECT(n > 0))
            continue;
        /* One of them back, dirty; the cleaner claims it and stops. */
        kp_chunk *dirty = held[--n];
        kp_region *dirty_region = kp_region_of(dirty);
        kp_units_free(dirty, true);
        EXPECT_U_EQ(free_units_everywhere(), 1);
        atomic_store(&cleaner_go, 1);
        while (!atomic_load(&cleaner_in))
            sleep_ms(1);
        EXPECT_U_EQ(free_units_everywhere(), 0);
        /* The claim: from a new region, while the cleaner still holds
         * its unit. */
        kp_chunk *c = kp_units_claim(NULL, 1, &zeroed);
        atomic_store(&claim_done, 1);
        bool cleaner_still_in = !atomic_load(&cleaner_release);
        atomic_store(&cleaner_release, 1);
        pthread_join(tc, NULL);
        pthread_join(tw, NULL);
        EXPECTF(!atomic_load(&watchdog_fired), "the claim waited 20 s for the cleaner");
        EXPECT(cleaner_still_in);
        if (EXPECT(c != NULL)) {
            EXPECT(kp_region_of(c) != dirty_region);
            EXPECT(is_region(kp_region_of(c)));
            held[n++] = c;
        }
        /* The cleaner, let go, gave its unit back still dirty. */
        EXPECT(kp_units_dirty_bytes() >= KP_UNIT_SIZE);
        kp_chunk *again = kp_units_claim(NULL, 1, &zeroed); /* the dirty unit, or another */
        if (EXPECT(again != NULL))
            held[n++] = again;
        for (unsigned i = 0; i < n; i++)
            kp_units_free(held[i], false);
        EXPECT(kame_pool_validate() == 0);
    }
    return kp_check_summary();
}
