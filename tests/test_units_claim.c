/* The claim of units against a cleaner that holds some (region.c), and
 * the unit table that mirrors the regions' back maps (addrmap.c),
 * white-box: the program links the static library and calls the region
 * layer itself.  A cleaner purging dirty units holds them claimed; a claim
 * that finds nothing else free must not wait for that cleaner to finish,
 * which may be preempted (or, as here, stopped) for as long as the
 * scheduler likes: it makes a new region instead. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
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

/* The unit table (internal.h) against the regions' back maps: entries
 * that are not what they should be.  KP_TEST_EXPECT_UNTABLED is set when
 * the test runs where the table cannot be reserved (an address-space
 * limit): then none is in use and every lookup gives NULL [REG-3]. */
static bool expect_untabled(void) { return getenv("KP_TEST_EXPECT_UNTABLED") != NULL; }

static unsigned unit_table_mismatches(void)
{
    bool tabled = atomic_load(&kp_unit_table_in_use.mask) != 0;
    unsigned bad = 0;
    for (kp_region *r = kp_regions_first(); r != NULL; r = r->next)
        for (unsigned u = 0; u < KP_UNITS_PER_REGION; u++) {
            char *unit = (char *)r + ((size_t)u << KP_UNIT_SHIFT);
            kp_chunk *want = tabled ? atomic_load(&r->unit_chunk[u]) : NULL;
            if (kp_unit_table_chunk(unit) != want || kp_unit_table_chunk(unit + KP_UNIT_SIZE - 1) != want)
                bad++;
        }
    return bad;
}

static void test_unit_table(const char *when)
{
    bool untabled = expect_untabled() || !KP_UNIT_TABLE;
    CHECK("the unit table %s, %s", untabled ? "is not in use and names no chunk" : "mirrors every region's back map",
          when) {
        /* A block of each tier that lives in regions. */
        void *blocks[] = { kame_pool_malloc(48), kame_pool_malloc(3000), kame_pool_malloc(100 << 10),
                           kame_pool_malloc(2 << 20) };
        uintptr_t mask = atomic_load(&kp_unit_table_in_use.mask);
        if (untabled)
            EXPECT_U_EQ(mask, 0);
        else
            EXPECT_U_GE(mask, ((uintptr_t)1 << (47 - KP_UNIT_SHIFT)) - 1);
        EXPECT(kp_regions_first() != NULL);
        EXPECT_U_EQ(unit_table_mismatches(), 0);
        for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) {
            if (!EXPECT(blocks[i] != NULL))
                continue;
            EXPECTF(kp_unit_table_chunk(blocks[i]) == (untabled ? NULL : kp_chunk_of(blocks[i])), "block %zu", i);
            kame_pool_free(blocks[i]);
        }
        /* The 2 MiB block's chunk given back: its units map to their own
         * headers again, in both. */
        kame_pool_trim();
        EXPECT_U_EQ(unit_table_mismatches(), 0);
        /* Memory in no region: the stack, a page of our own, the
         * library's data. */
        int local = 0;
        EXPECT(kp_unit_table_chunk(&local) == NULL);
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (EXPECT(page != MAP_FAILED)) {
            EXPECT(kp_unit_table_chunk(page) == NULL);
            munmap(page, 4096);
        }
        EXPECT(kp_unit_table_chunk(&kp_unit_table_in_use) == NULL);
    }
}

#define MAX_HELD 8192
static kp_chunk *held[MAX_HELD];

int main(void)
{
    test_unit_table("with the pool just up");
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
        EXPECT_U_EQ(unit_table_mismatches(), 0); /* every unit claimed */
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
    test_unit_table("after every unit was claimed and freed");
    return kp_check_summary();
}
