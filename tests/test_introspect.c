/* glibc's introspection calls under the override: mallinfo2, mallinfo,
 * malloc_stats, malloc_info, mallopt and malloc_trim answer from the
 * pool's state with glibc's shapes and figures that follow a known
 * workload. */
#include "check.h"

#include <kame_pool.h>
#include <limits.h>
#include <malloc.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* mallinfo */

static char *read_all(FILE *f)
{
    long end = ftell(f);
    char *text = calloc(1, (size_t)end + 1);
    rewind(f);
    if (fread(text, 1, (size_t)end, f) != (size_t)end)
        text[0] = '\0';
    return text;
}

/* Tags open and close in order; every line is one element. */
static int xml_balanced(const char *s)
{
    char stack[16][32];
    int depth = 0;
    for (const char *p = s; (p = strchr(p, '<')) != NULL; p++) {
        const char *end = strchr(p, '>');
        if (end == NULL)
            return 0;
        int closing = p[1] == '/', empty = end[-1] == '/';
        const char *name = p + 1 + closing;
        size_t n = strcspn(name, " />");
        if (n == 0 || n >= sizeof stack[0])
            return 0;
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, n) != 0 || stack[depth - 1][n] != '\0')
                return 0;
            depth--;
        } else if (!empty) {
            if (depth == 16)
                return 0;
            memcpy(stack[depth], name, n);
            stack[depth++][n] = '\0';
        }
    }
    return depth == 0;
}

static void *blocks[1000];

int main(void)
{
    CHECK("mallinfo2: live bytes and mapped blocks follow a workload") {
        /* The kept block below counts on its size staying in demand: no
         * drain tick may pass in between, which a slow or busy machine
         * (an emulated one in the platform run) can take two intervals to
         * do. */
        unsigned interval = kame_pool_get_lazy_drain_interval_ms();
        kame_pool_set_lazy_drain_interval_ms(0);
        struct mallinfo2 a = mallinfo2();
        for (int i = 0; i < 1000; i++)
            blocks[i] = malloc(64);
        free(malloc(8 * MiB)); /* the size in demand: its block is kept when freed */
        void *big = malloc(8 * MiB);
        struct mallinfo2 b = mallinfo2();
        for (int i = 0; i < 1000; i++)
            free(blocks[i]);
        struct mallinfo2 c = mallinfo2();
        EXPECT_U_EQ(b.uordblks - a.uordblks, 64 * 1000 + 8 * MiB);
        EXPECT_U_EQ(b.hblks - a.hblks, 1);
        EXPECT_U_EQ(b.hblkhd - a.hblkhd, 8 * MiB);
        EXPECT_U_GE(b.arena, 32 * MiB);
        EXPECT_U_EQ(b.arena % (32 * MiB), 0);
        EXPECT_U_EQ(b.usmblks, 0);
        EXPECT_U_EQ(b.uordblks - c.uordblks, 64 * 1000);
        kame_pool_stats_t s = KAME_POOL_STATS_INIT;
        kame_pool_get_stats(&s);
        struct mallinfo2 d = mallinfo2();
        EXPECT_U_EQ(d.uordblks + d.fordblks, s.reserved_bytes);
        EXPECT_U_EQ(d.uordblks, s.live_bytes);
        EXPECT_U_GE(d.keepcost, d.fsmblks);
        free(big);
        struct mallinfo2 e = mallinfo2();
        EXPECT_U_EQ(d.hblks - e.hblks, 1);
        EXPECT_U_GE(e.fsmblks, 8 * MiB); /* the freed block is kept warm */
        kame_pool_set_lazy_drain_interval_ms(interval);
    }
    CHECK("mallinfo: the same figures as int") {
        struct mallinfo2 a = mallinfo2();
        struct mallinfo b = mallinfo();
        EXPECT_U_EQ((size_t)b.arena, a.arena < INT_MAX ? a.arena : INT_MAX);
        EXPECT_U_EQ((size_t)b.hblks, a.hblks);
        EXPECT_U_EQ((size_t)b.uordblks, a.uordblks);
        EXPECT(b.fordblks >= 0 && b.keepcost >= 0);
    }
    CHECK("malloc_stats prints glibc's summary and the pool's table on stderr") {
        FILE *f = tmpfile();
        if (!EXPECT_NOT_NULL(f))
            continue;
        fflush(stderr);
        int saved = dup(2);
        dup2(fileno(f), 2);
        malloc_stats();
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        fseek(f, 0, SEEK_END);
        char *text = read_all(f);
        fclose(f);
        EXPECT(strncmp(text, "Arena 0:\nsystem bytes     = ", 28) == 0);
        EXPECT(strstr(text, "\nin use bytes     = ") != NULL);
        EXPECT(strstr(text, "\nTotal (incl. mmap):\n") != NULL);
        EXPECT(strstr(text, "\nmax mmap regions = ") != NULL);
        EXPECT(strstr(text, "\nmax mmap bytes   = ") != NULL);
        EXPECT(strstr(text, "kamepoolalloc statistics") != NULL);
        free(text);
    }
    CHECK("malloc_info: glibc's XML shape, with the live mapping and free slots of the workload") {
        void *big = malloc(8 * MiB);
        void *p[100];
        for (int i = 0; i < 100; i++)
            p[i] = malloc(2000); /* class 2048 */
        for (int i = 0; i < 50; i++)
            free(p[i]);
        FILE *f = tmpfile();
        if (!EXPECT_NOT_NULL(f))
            continue;
        EXPECT_INT_EQ(malloc_info(0, f), 0);
        char *text = read_all(f);
        fclose(f);
        EXPECT(strncmp(text, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n", 42) == 0);
        EXPECT(strcmp(text + strlen(text) - 10, "</malloc>\n") == 0);
        EXPECTF(xml_balanced(text), "%s", text);
        EXPECT(strstr(text, "<total type=\"mmap\" count=\"") != NULL);
        /* At least the 50 freed 2 KiB slots are free in their class. */
        const char *size = strstr(text, "<size from=\"1793\" to=\"2048\" total=\"");
        unsigned long long total = 0, count = 0;
        if (EXPECT_NOT_NULL(size)) {
            EXPECT_INT_EQ(sscanf(size, "<size from=\"1793\" to=\"2048\" total=\"%llu\" count=\"%llu\"", &total, &count), 2);
            EXPECT_U_GE(count, 50);
            EXPECT_U_EQ(total, count * 2048);
        }
        EXPECT(strstr(text, "<system type=\"current\" size=\"") != NULL);
        EXPECT(strstr(text, "<aspace type=\"total\" size=\"") != NULL);
        free(text);
        for (int i = 50; i < 100; i++)
            free(p[i]);
        free(big);
        errno = 0;
        EXPECT_INT_EQ(malloc_info(1, stdout), -1);
        EXPECT_ERRNO(EINVAL);
    }
    CHECK("mallopt: M_MMAP_THRESHOLD, M_TRIM_THRESHOLD and M_CHECK_ACTION take effect") {
        size_t top = kame_pool_get_large_cache_top(), cap = kame_pool_get_large_cache_cap();
        EXPECT_INT_EQ(mallopt(M_MMAP_THRESHOLD, 8 << 20), 1);
        EXPECT_U_EQ(kame_pool_get_large_cache_top(), 8 * MiB);
        EXPECT_INT_EQ(mallopt(M_MMAP_THRESHOLD, -1), 0);
        EXPECT_U_EQ(kame_pool_get_large_cache_top(), 8 * MiB);
        EXPECT_INT_EQ(mallopt(M_TRIM_THRESHOLD, 32 << 20), 1);
        EXPECT_U_EQ(kame_pool_get_large_cache_cap(), 32 * MiB);
        EXPECT_INT_EQ(mallopt(M_CHECK_ACTION, 0), 1);
        EXPECT_INT_EQ(kame_pool_get_check_level(), 0);
        EXPECT_INT_EQ(mallopt(M_CHECK_ACTION, 3), 1);
        EXPECT_INT_EQ(kame_pool_get_check_level(), 1);
        kame_pool_set_large_cache_top(top);
        kame_pool_set_large_cache_cap(cap);
    }
    CHECK("mallopt: the other parameters are accepted and change nothing") {
        FILE *a = tmpfile(), *b = tmpfile();
        if (!EXPECT_NOT_NULL(a) || !EXPECT_NOT_NULL(b))
            continue;
        kame_pool_print_options(a);
        static const int params[] = {M_MXFAST, M_TOP_PAD, M_MMAP_MAX, M_PERTURB, M_ARENA_TEST, M_ARENA_MAX, 12345};
        for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
            EXPECT_INT_EQ(mallopt(params[i], 2), 1);
        kame_pool_print_options(b);
        char *ta = read_all(a), *tb = read_all(b);
        EXPECT(strlen(ta) > 0 && strcmp(ta, tb) == 0);
        free(ta);
        free(tb);
        fclose(a);
        fclose(b);
    }
    CHECK("malloc_trim gives back the cache and says so") {
        void *p = malloc(8 * MiB);
        free(p);
        kame_pool_stats_t a = KAME_POOL_STATS_INIT, b = KAME_POOL_STATS_INIT;
        kame_pool_get_stats(&a);
        EXPECT_INT_EQ(malloc_trim(0), 1);
        kame_pool_get_stats(&b);
        EXPECT_U_EQ(b.trims - a.trims, 1);
        EXPECT_U_EQ(b.cache_bytes, 0);
        EXPECT_U_EQ(mallinfo2().fsmblks, 0);
    }
    return kp_check_summary();
}
