/* Misuse is caught and reported.  Every case runs in a child process that
 * commits one mistake through the C API (double free, interior or wild
 * pointer, freed pointer given to realloc or malloc_usable_size); the
 * child must die of SIGABRT with the documented message naming the
 * pointer, never hang and never carry on.  Also: check level 0 ignores the
 * mistake and the pool stays sound; level 2 catches what level 1 lets
 * through.  The table of cases is docs/reliability.md's. */
#include "check.h"

#include <kame_pool.h>
#include <pthread.h>
#include <sys/wait.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

typedef void (*misuse_fn)(void);

/* Runs fn in a child; returns its status and what it wrote on stderr. */
static int run_child(misuse_fn fn, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGABRT, SIG_DFL);
        dup2(fds[1], 2);
        close(fds[0]);
        alarm(30); /* a hang is a failure too */
        fn();
        _exit(0);
    }
    close(fds[1]);
    kp_read_all(fds[0], out, cap);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

/* The child must abort with "kamepoolalloc: <op>(0x...): <problem...>"
 * (op NULL: a report not about one pointer). */
static void expect_abort(const char *name, misuse_fn fn, const char *op, const char *problem)
{
    CHECK("%s: aborts with a message", name) {
        char out[4096];
        int status = run_child(fn, out, sizeof out);
        EXPECTF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
                "child status %#x (signal %d), stderr: %s", status,
                WIFSIGNALED(status) ? WTERMSIG(status) : 0, out);
        char want[200];
        snprintf(want, sizeof want, op ? "kamepoolalloc: %s(0x" : "kamepoolalloc: ", op);
        EXPECTF(strstr(out, want) != NULL, "stderr lacks \"%s\": %s", want, out);
        EXPECTF(strstr(out, problem) != NULL, "stderr lacks \"%s\": %s", problem, out);
    }
}

static void *volatile sink;

/* ---- The mistakes ------------------------------------------------------- */

static void same_thread_double_free(void)
{
    void *keep = kame_pool_malloc(32);
    void *p = kame_pool_malloc(32);
    void *q = kame_pool_malloc(32);
    kame_pool_free(p);
    kame_pool_free(q);
    kame_pool_free(p);
    sink = keep;
}

static void *free_it(void *p)
{
    kame_pool_free(p);
    return NULL;
}

static void free_in_thread(void *p)
{
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
}

/* Another thread frees a block twice. */
static void cross_thread_double_free(void)
{
    void *p = kame_pool_malloc(48);
    sink = kame_pool_malloc(48);
    free_in_thread(p);
    free_in_thread(p);
}

/* Another thread frees it, then the owner frees it again. */
static void remote_then_owner_double_free(void)
{
    void *p = kame_pool_malloc(64);
    sink = kame_pool_malloc(64);
    free_in_thread(p);
    kame_pool_free(p);
}

/* A chunk whose free tail went back at trim: those slots lost their free
 * tags with their pages, and a second free of one, by the owner or by
 * another thread, is still a double free.  Fills whole chunks of 224 B
 * slots (1170 a chunk), keeps 50 blocks at the start of one and frees the
 * rest of it; returns a block of the freed tail. */
enum { TAIL_SLOTS = 1170, TAIL_BLOCKS = 3 * TAIL_SLOTS };
static void *tail_blocks[TAIL_BLOCKS];
static int tail_first; /* the trimmed chunk's first block in tail_blocks */

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
    return x < y ? -1 : x > y;
}

static void *trimmed_tail_block(void)
{
    for (int i = 0; i < TAIL_BLOCKS; i++)
        tail_blocks[i] = kame_pool_malloc(200);
    qsort(tail_blocks, TAIL_BLOCKS, sizeof tail_blocks[0], by_address);
    for (int i = 0; i + TAIL_SLOTS <= TAIL_BLOCKS; i++) {
        uintptr_t start = (uintptr_t)tail_blocks[i];
        if ((start & (256 * KiB - 1)) != 0 || ((uintptr_t)tail_blocks[i + TAIL_SLOTS - 1] & ~(256 * KiB - 1)) != start)
            continue;
        for (int j = i + 50; j < i + TAIL_SLOTS; j++)
            kame_pool_free(tail_blocks[j]);
        kame_pool_trim();
        tail_first = i;
        return tail_blocks[i + 600];
    }
    return NULL; /* no whole chunk: the child exits 0, and the case fails */
}

static void trimmed_tail_double_free(void)
{
    void *p = trimmed_tail_block();
    if (p != NULL)
        kame_pool_free(p);
}

static void trimmed_tail_double_free_elsewhere(void)
{
    void *p = trimmed_tail_block();
    if (p != NULL)
        free_in_thread(p);
}

/* The same after the trimmed chunk's 50 kept blocks are freed too (it
 * goes back warm, to the recycle cache) and the class is allocated until
 * a chunk of it is built on that memory again, its carving not yet past
 * the slot: the slot is still taken for a double free. */
static void *rebuilt_trimmed_tail_block(void)
{
    void *p = trimmed_tail_block();
    if (p == NULL)
        return NULL;
    for (int i = 0; i < 50; i++)
        kame_pool_free(tail_blocks[tail_first + i]);
    for (int i = 0; i < 200; i++) {
        void *q = kame_pool_malloc(200);
        if (q == p)
            return NULL; /* handed out again: not the case meant (the child exits 0, and the case fails) */
        sink = q;
    }
    return p;
}

static void rebuilt_trimmed_tail_double_free(void)
{
    void *p = rebuilt_trimmed_tail_block();
    if (p != NULL)
        kame_pool_free(p);
}

static void *allocate_then_free(void *p)
{
    sink = kame_pool_malloc(200); /* a heap of its own first */
    kame_pool_free(p);
    return NULL;
}

static void rebuilt_trimmed_tail_double_free_elsewhere(void)
{
    void *p = rebuilt_trimmed_tail_block();
    if (p != NULL) {
        pthread_t t;
        pthread_create(&t, NULL, allocate_then_free, p);
        pthread_join(t, NULL);
    }
}

static void trimmed_tail_realloc(void)
{
    void *p = trimmed_tail_block();
    if (p != NULL)
        sink = kame_pool_realloc(p, 150);
}

/* A free block's link overwritten (a write after free), then a trim walks
 * the chunk's lists: the walk stops at the bad entry. */
static void written_after_free_then_trim(void)
{
    void *p = kame_pool_malloc(200);
    for (int i = 0; i < TAIL_BLOCKS; i++)
        tail_blocks[i] = kame_pool_malloc(200);
    kame_pool_free(p);
    sink = tail_blocks[0];
    for (int i = 1; i < TAIL_BLOCKS; i++)
        kame_pool_free(tail_blocks[i]);
    memset(p, 0x41, 16); /* its link and its free tag */
    kame_pool_trim();
}

/* A block of an exited thread's chunk, freed by a thread that allocates
 * its class (which keeps the slot for its own next allocation), then
 * freed again: by the same thread, or by another. */
static void *malloc_1200_and_exit(void *arg)
{
    *(void **)arg = kame_pool_malloc(1200);
    return NULL;
}

static void *kept_slot(void)
{
    sink = kame_pool_malloc(1200); /* this thread's current chunk of the class */
    void *p;
    pthread_t t;
    pthread_create(&t, NULL, malloc_1200_and_exit, &p);
    pthread_join(t, NULL);
    kame_pool_free(p);
    return p;
}

static void kept_slot_double_free(void) { kame_pool_free(kept_slot()); }
static void kept_slot_freed_by_another(void) { free_in_thread(kept_slot()); }

/* Many blocks freed twice by another thread (the case that used to make
 * the owner's next allocation spin forever). */
static void cross_thread_double_free_batch(void)
{
    enum { N = 100 };
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = kame_pool_malloc(96);
    for (int i = 0; i < N; i++)
        free_in_thread(p[i]);
    for (int i = 0; i < N; i++)
        free_in_thread(p[i]);
    for (int i = 0; i < 10 * N; i++)
        sink = kame_pool_malloc(96);
}

static void interior_slot_other_thread(void)
{
    char *p = kame_pool_malloc(64);
    free_in_thread(p + 16);
}

static void misaligned_slot_other_thread(void)
{
    char *p = kame_pool_malloc(200);
    free_in_thread(p + 3);
}

static void interior_slot_level2(void)
{
    kame_pool_set_check_level(2);
    char *p = kame_pool_malloc(64);
    kame_pool_free(p + 16);
}

static void double_free_level2(void)
{
    kame_pool_set_check_level(2);
    void *p = kame_pool_malloc(32);
    kame_pool_free(p);
    kame_pool_free(p);
}

static void free_into_metadata(void)
{
    char *p = kame_pool_malloc(64);
    char *region = (char *)((uintptr_t)p & ~(uintptr_t)(32 * MiB - 1));
    kame_pool_free(region + 4096);
}

/* A pointer into a unit no chunk has claimed: the region's last unit, in a
 * process that has used only a few. */
static void free_into_unclaimed_unit(void)
{
    char *p = kame_pool_malloc(64);
    char *region = (char *)((uintptr_t)p & ~(uintptr_t)(32 * MiB - 1));
    kame_pool_free(region + 32 * MiB - 256 * KiB);
}

/* The size is in demand (asked for before), so the freed block is kept in
 * the recycle cache, where a second free finds it. */
static void dedicated_double_free(void)
{
    /* The block is cached because its size was asked for lately; a drain
     * tick in between (10 ms, easily spent under an emulator) would make
     * it a size nobody asked for, given back at the free.  (The child
     * process's own setting: nothing to restore.) */
    kame_pool_set_lazy_drain_interval_ms(0);
    kame_pool_free(kame_pool_malloc(300 * KiB));
    void *p = kame_pool_malloc(300 * KiB);
    kame_pool_free(p);
    kame_pool_free(p);
}

/* A size asked for once: its block goes back to the region at the free,
 * and the second free finds free units. */
static void dedicated_double_free_released(void)
{
    void *p = kame_pool_malloc(700 * KiB);
    kame_pool_free(p);
    kame_pool_free(p);
}

/* A freed block in its thread's hot cell (the last one freed of a size in
 * demand), freed again by another thread, which cannot see the cell: the
 * block's own marks must say it is free. */
static void *hot_block(size_t size)
{
    kame_pool_set_lazy_drain_interval_ms(0); /* the size stays in demand */
    kame_pool_free(kame_pool_malloc(size));
    void *p = kame_pool_malloc(size);
    kame_pool_free(p);
    return p;
}
static void hot_dedicated_freed_by_another(void) { free_in_thread(hot_block(300 * KiB)); }
static void hot_mapping_freed_by_another(void) { free_in_thread(hot_block(8 * MiB)); }

/* The cell holds the later of two blocks freed in turn; the earlier one
 * went into its slot's entries, where a second free must find it too. */
static void settled_double_free(size_t size)
{
    kame_pool_set_lazy_drain_interval_ms(0);
    void *a = kame_pool_malloc(size), *b = kame_pool_malloc(size);
    kame_pool_free(a); /* the thread's cache grants the size two places */
    kame_pool_free(b);
    a = kame_pool_malloc(size);
    b = kame_pool_malloc(size);
    kame_pool_free(a); /* into the cell */
    kame_pool_free(b); /* into the cell, a into its slot */
    kame_pool_free(a);
}
static void settled_dedicated_double_free(void) { settled_double_free(300 * KiB); }
static void settled_mapping_double_free(void) { settled_double_free(8 * MiB); }

/* A thread frees a dedicated block and exits (its cache given back); a
 * later thread, which may reuse the first one's heap, frees the block
 * again: the header of a chunk given back must not pass for the later
 * thread's live block. */
static void *free_dedicated_and_exit(void *arg)
{
    void *p = kame_pool_malloc(300 * KiB);
    kame_pool_free(p);
    *(void **)arg = p;
    return NULL;
}
static void exited_thread_block_freed_again(void)
{
    void *p = NULL;
    pthread_t t;
    pthread_create(&t, NULL, free_dedicated_and_exit, &p);
    pthread_join(t, NULL);
    free_in_thread(p);
}

static void dedicated_interior(void)
{
    char *p = kame_pool_malloc(300 * KiB);
    kame_pool_free(p + 4096);
}

static void large_double_free(void)
{
    void *p = kame_pool_malloc(8 * MiB);
    kame_pool_free(p);
    kame_pool_free(p);
}

static void large_interior(void)
{
    char *p = kame_pool_malloc(8 * MiB);
    kame_pool_free(p + 64);
}

static void huge_interior_later_slot(void)
{
    char *p = kame_pool_malloc(100 * MiB);
    kame_pool_free(p + 40 * MiB);
}

/* Above the cache's top: unmapped at the first free. */
static void huge_double_free(void)
{
    void *p = kame_pool_malloc(100 * MiB);
    kame_pool_free(p);
    kame_pool_free(p);
}

static void realloc_freed(void)
{
    void *keep = kame_pool_malloc(128);
    void *p = kame_pool_malloc(128);
    kame_pool_free(p);
    sink = kame_pool_realloc(p, 1000);
    sink = keep;
}

static void realloc_interior(void)
{
    char *p = kame_pool_malloc(300 * KiB);
    sink = kame_pool_realloc(p + 512, 1000);
}

static void usable_size_freed(void)
{
    void *keep = kame_pool_malloc(128);
    void *p = kame_pool_malloc(128);
    kame_pool_free(p);
    sink = (void *)(uintptr_t)kame_pool_malloc_usable_size(p);
    sink = keep;
}

static void usable_size_metadata(void)
{
    char *p = kame_pool_malloc(64);
    char *region = (char *)((uintptr_t)p & ~(uintptr_t)(32 * MiB - 1));
    sink = (void *)(uintptr_t)kame_pool_malloc_usable_size(region + 64);
}

/* A use after free that overwrites a free slot's link: the full level
 * checks each list before it is handed out. */
static void corrupted_link_level2(void)
{
    kame_pool_set_check_level(2);
    enum { N = 64 };
    void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = kame_pool_malloc(80);
    for (int i = 0; i < N; i++)
        kame_pool_free(p[i]);
    *(uintptr_t *)p[N / 2] = (uintptr_t)0x1234560; /* the link of a free slot */
    for (int i = 0; i < 100000; i++)
        sink = kame_pool_malloc(80);
}

/* ---- Level 0: mistakes are ignored, the pool stays sound ------------------ */

static void test_ignore_level(void)
{
    CHECK("check level 0: a double free is ignored and blocks stay distinct") {
        kame_pool_set_check_level(0);
        EXPECT_INT_EQ(kame_pool_get_check_level(), 0);
        void *keep = kame_pool_malloc(32);
        void *p = kame_pool_malloc(32);
        kame_pool_free(p);
        kame_pool_free(p); /* ignored */
        void *a = kame_pool_malloc(32), *b = kame_pool_malloc(32);
        EXPECT(a != b);
        void *big = kame_pool_malloc(8 * MiB);
        kame_pool_free(big);
        kame_pool_free(big); /* ignored */
        void *c = kame_pool_malloc(8 * MiB), *d = kame_pool_malloc(8 * MiB);
        EXPECT(c != d && c != NULL && d != NULL);
        EXPECT_U_EQ(kame_pool_malloc_usable_size((char *)a + 16), 0); /* interior: answered 0 */
        EXPECT_INT_EQ(kame_pool_validate(), 0);
        kame_pool_free(a);
        kame_pool_free(b);
        kame_pool_free(c);
        kame_pool_free(d);
        kame_pool_free(keep);
        kame_pool_set_check_level(1);
        EXPECT_INT_EQ(kame_pool_get_check_level(), 1);
    }
}

/* ---- What is not misuse must not be reported ----------------------------- */

static void test_no_false_alarms(void)
{
    CHECK("blocks never written are freed without a report, in every tier") {
        static const size_t sizes[] = { 0, 1, 8, 16, 24, 100, 1024, 4096, 40 * KiB, 300 * KiB, 3 * MiB,
                                        8 * MiB, 48 * MiB, 100 * MiB };
        for (int round = 0; round < 50; round++)
            for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
                void *p = kame_pool_malloc(kp_opaque(sizes[i]));
                EXPECT_NOT_NULL(p);
                kame_pool_free(p);
            }
    }
    /* A chunk of small slots that emptied is reused whole for a dedicated
     * block: its first word still holds what the slot era left. */
    CHECK("a recycled bucket chunk serves a dedicated block that is freed unwritten") {
        for (int round = 0; round < 20; round++) {
            enum { N = 4096 };
            static void *p[N];
            for (int i = 0; i < N; i++)
                p[i] = kame_pool_malloc(64);
            for (int i = 0; i < N; i++)
                kame_pool_free(p[i]);
            void *d = kame_pool_malloc(200 * KiB);
            EXPECT_NOT_NULL(d);
            kame_pool_free(d);
        }
        EXPECT_INT_EQ(kame_pool_validate(), 0);
    }
}

int main(void)
{
    kame_pool_free(kame_pool_malloc(1)); /* the pool is up before any fork */
    expect_abort("same-thread double free of a 32 B block", same_thread_double_free, "free", "double free");
    expect_abort("cross-thread double free", cross_thread_double_free, "free", "double free");
    expect_abort("remote free then owner free", remote_then_owner_double_free, "free", "double free");
    expect_abort("cross-thread double free of 100 blocks", cross_thread_double_free_batch, "free", "double free");
    expect_abort("double free of a slot kept by the thread that freed it", kept_slot_double_free, "free",
                 "double free");
    expect_abort("a kept slot freed again by another thread", kept_slot_freed_by_another, "free", "double free");
    expect_abort("double free of a slot whose page went back at trim", trimmed_tail_double_free, "free",
                 "double free");
    expect_abort("the same, by another thread", trimmed_tail_double_free_elsewhere, "free", "double free");
    expect_abort("realloc of a slot whose page went back at trim", trimmed_tail_realloc, "realloc", "double free");
    expect_abort("the same slot after its emptied chunk was built again", rebuilt_trimmed_tail_double_free, "free",
                 "double free");
    expect_abort("the same, by another thread", rebuilt_trimmed_tail_double_free_elsewhere, "free", "double free");
    expect_abort("a free slot's link overwritten, then a trim", written_after_free_then_trim, NULL, "heap corruption");
    expect_abort("interior slot pointer freed by another thread", interior_slot_other_thread, "free",
                 "not the start of a block");
    expect_abort("misaligned slot pointer freed by another thread", misaligned_slot_other_thread, "free",
                 "not the start of a block");
    expect_abort("interior slot pointer at check level 2", interior_slot_level2, "free", "not the start of a block");
    expect_abort("double free at check level 2", double_free_level2, "free", "double free");
    expect_abort("pointer into a region's metadata", free_into_metadata, "free", "metadata");
    expect_abort("pointer into an unclaimed unit", free_into_unclaimed_unit, "free", "free pool memory");
    expect_abort("double free of a dedicated block", dedicated_double_free, "free", "double free");
    expect_abort("double free of a dedicated block given back", dedicated_double_free_released, "free",
                 "already freed");
    expect_abort("interior pointer of a dedicated block", dedicated_interior, "free", "not the start of a block");
    expect_abort("a dedicated block in its thread's hot cell freed by another thread", hot_dedicated_freed_by_another,
                 "free", "double free");
    expect_abort("an 8 MiB block in its thread's hot cell freed by another thread", hot_mapping_freed_by_another,
                 "free", "double free");
    expect_abort("a dedicated block freed by an exited thread, freed again by a later one",
                 exited_thread_block_freed_again, "free", "already free");
    expect_abort("double free of a dedicated block moved from the hot cell into its slot",
                 settled_dedicated_double_free, "free", "double free");
    expect_abort("double free of an 8 MiB block moved from the hot cell into its slot", settled_mapping_double_free,
                 "free", "double free");
    expect_abort("double free of an 8 MiB block", large_double_free, "free", "double free");
    expect_abort("interior pointer of an 8 MiB block", large_interior, "free", "not the start of a block");
    expect_abort("pointer into a huge block's second slot", huge_interior_later_slot, "free",
                 "not the start of a block");
    expect_abort("double free of a 100 MiB block (unmapped)", huge_double_free, "free", "double free");
    expect_abort("realloc of a freed block", realloc_freed, "realloc", "double free");
    expect_abort("realloc of an interior pointer", realloc_interior, "realloc", "not the start of a block");
    expect_abort("malloc_usable_size of a freed block", usable_size_freed, "malloc_usable_size", "double free");
    expect_abort("malloc_usable_size of a metadata pointer", usable_size_metadata, "malloc_usable_size",
                 "metadata");
    expect_abort("a free slot's link overwritten, check level 2", corrupted_link_level2, NULL, "heap corruption");
    test_ignore_level();
    test_no_false_alarms();
    return kp_check_summary();
}
