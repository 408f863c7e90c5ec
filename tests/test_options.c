/* The option table: the same parsing for kame_pool_set_option and the
 * KAME_POOL_* environment, good values taking effect and bad ones
 * reported and ignored; VERBOSE and SHOW_STATS; and the manual page
 * documenting exactly the options the table has.
 *
 * The environment is read once at start-up, so those checks run this
 * program again ("child" mode) with a prepared environment. */
#include "check.h"

#include <kame_pool.h>
#include <sys/wait.h>

#define KiB ((unsigned long long)1 << 10)
#define MiB ((unsigned long long)1 << 20)
#define GiB ((unsigned long long)1 << 30)

static unsigned long long get(const char *name)
{
    unsigned long long v = ~0ull;
    kame_pool_get_option(name, &v);
    return v;
}

#ifndef KP_TEST_EMULATED /* its only callers are not built under an emulator (see main) */
/* Runs this program as "child" with `env`, stdout and stderr captured
 * together into out. */
static int run_child(char *const env[], char *out, size_t len)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        char *argv[] = {"test_options", "child", NULL};
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    close(fd[1]);
    kp_read_all(fd[0], out, len);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}
#endif

static int child(void)
{
    static const char *const names[] = {"CHECK", "MAX_BYTES", "LARGE_CACHE_CAP", "LARGE_CACHE_TOP",
                                        "LAZY_DRAIN_MS", "THREAD_EXIT_RECLAIM", "SHOW_STATS"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        printf("value %s=%llu\n", names[i], get(names[i]));
    void *p = kame_pool_malloc(100);
    kame_pool_free(p);
    fflush(stdout);
    return 0;
}

struct good {
    const char *name, *text;
    unsigned long long want;
};

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();

    static const struct good good[] = {
        {"MAX_BYTES", "64M", 64 * MiB},
        {"max_bytes", "2G", 2 * GiB},
        {"KAME_POOL_MAX_BYTES", "512KiB", 512 * KiB},
        {"MAX_BYTES", "3k", 3 * KiB},
        {"MAX_BYTES", "1MB", MiB},
        {"MAX_BYTES", sizeof(size_t) == 8 ? "2T" : "2G", sizeof(size_t) == 8 ? 2048 * GiB : 2 * GiB},
        {"MAX_BYTES", "123456", 123456},
        {"LARGE_CACHE_CAP", "128m", 128 * MiB},
        {"LARGE_CACHE_TOP", "16M", 16 * MiB},
        {"LARGE_CACHE_TOP", sizeof(size_t) == 8 ? "4G" : "3G", GiB - 1}, /* the setter's own limit */
        {"LAZY_DRAIN_MS", "250", 250},
        {"LAZY_DRAIN_MS", "0", 0},
        {"CHECK", "2", 2},
        {"CHECK", "0", 0},
        {"CHECK", "full", 2},
        {"CHECK", "IGNORE", 0},
        {"CHECK", "Abort", 1},
        {"THREAD_EXIT_RECLAIM", "off", 0},
        {"THREAD_EXIT_RECLAIM", "YES", 1},
        {"THREAD_EXIT_RECLAIM", "false", 0},
        {"THREAD_EXIT_RECLAIM", "On", 1},
        {"THREAD_EXIT_RECLAIM", "no", 0},
        {"THREAD_EXIT_RECLAIM", "true", 1},
        {"SHOW_STATS", "1", 1},
        {"SHOW_STATS", "0", 0},
        {"VERBOSE", "off", 0},
        {"STATS_JSON", "no", 0},
    };
    static const char *const bad[][2] = {
        {"MAX_BYTES", ""},       {"MAX_BYTES", "M"},     {"MAX_BYTES", "64Q"},   {"MAX_BYTES", " 64"},
        {"MAX_BYTES", "64 M"},   {"MAX_BYTES", "-1"},    {"MAX_BYTES", "1.5G"},  {"MAX_BYTES", "64MM"},
        {"MAX_BYTES", "99999999999999999999"},           {"MAX_BYTES", "17179869184T"},
        {"MAX_BYTES", "0x10"},   {"CHECK", "3"},         {"CHECK", "1x"},        {"CHECK", "1K"},
        {"CHECK", "high"},       {"CHECK", "fulll"},     {"CHECK", "ful"},       {"CHECK", "full|"},       {"LAZY_DRAIN_MS", "1000001"},                   {"THREAD_EXIT_RECLAIM", "2"},
        {"THREAD_EXIT_RECLAIM", "maybe"},                {"THREAD_EXIT_RECLAIM", ""},
        {"SHOW_STATS", "y"},     {"NO_SUCH_OPTION", "1"}, {"", "1"},
    };

    unsigned long long saved_max = get("MAX_BYTES"), saved_cap = get("LARGE_CACHE_CAP"),
                       saved_top = get("LARGE_CACHE_TOP"), saved_ms = get("LAZY_DRAIN_MS"),
                       saved_check = get("CHECK"), saved_reclaim = get("THREAD_EXIT_RECLAIM");

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK("good value %s=%s", good[i].name, good[i].text) {
            EXPECT_INT_EQ(kame_pool_set_option(good[i].name, good[i].text), 0);
            EXPECT_U_EQ(get(good[i].name), good[i].want);
        }
    }
    CHECK("the setters and the table agree") {
        kame_pool_set_max_bytes(5 * MiB);
        EXPECT_U_EQ(get("MAX_BYTES"), 5 * MiB);
        kame_pool_set_lazy_drain_interval_ms(7);
        EXPECT_U_EQ(get("LAZY_DRAIN_MS"), 7);
        kame_pool_set_show_stats(1);
        EXPECT_U_EQ(get("SHOW_STATS"), 1);
        EXPECT_INT_EQ(kame_pool_get_show_stats(), 1);
        kame_pool_set_show_stats(0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK("bad value %s=\"%s\" is refused and changes nothing", bad[i][0], bad[i][1]) {
            unsigned long long before = get(bad[i][0]);
            EXPECT_INT_EQ(kame_pool_set_option(bad[i][0], bad[i][1]), EINVAL);
            EXPECT_U_EQ(get(bad[i][0]), before);
        }
    }
    CHECK("NULL name or value is refused") {
        EXPECT_INT_EQ(kame_pool_set_option(NULL, "1"), EINVAL);
        EXPECT_INT_EQ(kame_pool_set_option("CHECK", NULL), EINVAL);
        EXPECT_INT_EQ(kame_pool_get_option("NO_SUCH_OPTION", NULL), EINVAL);
    }
    kame_pool_set_max_bytes((size_t)saved_max);
    kame_pool_set_large_cache_cap(saved_cap);
    kame_pool_set_large_cache_top(saved_top);
    kame_pool_set_lazy_drain_interval_ms((unsigned)saved_ms);
    kame_pool_set_check_level((int)saved_check);
    kame_pool_set_thread_exit_reclaim((int)saved_reclaim);

    /* The checks below run this program again with an environment; under
     * an emulator (qemu-user for another architecture) the child would need
     * the emulator in front of it, so they are left to the native builds. */
#ifndef KP_TEST_EMULATED
    static char out[1 << 16];
    CHECK("the environment sets options at start-up; bad values and unknown names are reported") {
        char *env[] = {"KAME_POOL_MAX_BYTES=2G", "KAME_POOL_LAZY_DRAIN_MS=25", "KAME_POOL_CHECK=bogus",
                       "KAME_POOL_THREAD_EXIT_RECLAIM=off", "KAME_POOL_LARGE_CACHE_CAP=12x",
                       "KAME_POOL_NO_SUCH=1", NULL};
        EXPECT_INT_EQ(run_child(env, out, sizeof out), 0);
        EXPECTF(strstr(out, "value MAX_BYTES=2147483648\n") != NULL, "%s", out);
        EXPECT(strstr(out, "value LAZY_DRAIN_MS=25\n") != NULL);
        EXPECT(strstr(out, "value THREAD_EXIT_RECLAIM=0\n") != NULL);
        EXPECT(strstr(out, "value CHECK=1\n") != NULL); /* the default stands */
        EXPECT(strstr(out, "kamepoolalloc: ignoring KAME_POOL_CHECK=bogus: not a valid value\n") != NULL);
        EXPECT(strstr(out, "kamepoolalloc: ignoring KAME_POOL_LARGE_CACHE_CAP=12x: not a valid value\n") != NULL);
        EXPECT(strstr(out, "kamepoolalloc: ignoring KAME_POOL_NO_SUCH: no such option\n") != NULL);
        EXPECT(strstr(out, "value LARGE_CACHE_CAP=12") == NULL);
    }
    CHECK("KAME_POOL_VERBOSE=1 prints every option in force at start-up") {
        char *env[] = {"KAME_POOL_VERBOSE=1", "KAME_POOL_LAZY_DRAIN_MS=33", NULL};
        EXPECT_INT_EQ(run_child(env, out, sizeof out), 0);
        EXPECT(strstr(out, "options in force\n") != NULL);
        EXPECT(strstr(out, "KAME_POOL_LAZY_DRAIN_MS=33\n") != NULL);
        EXPECT(strstr(out, "KAME_POOL_VERBOSE=1\n") != NULL);
        EXPECT(strstr(out, "KAME_POOL_CHECK=abort\n") != NULL); /* a word option prints its word */
        /* The same lines kame_pool_print_options gives. */
        FILE *f = tmpfile();
        if (!EXPECT_NOT_NULL(f))
            continue;
        kame_pool_print_options(f);
        rewind(f);
        char line[256];
        unsigned lines = 0, missing = 0;
        while (fgets(line, sizeof line, f) != NULL) {
            lines++;
            char *eq = strchr(line, '=');
            if (eq == NULL)
                continue;
            eq[1] = '\0';
            if (strstr(out, line) == NULL)
                missing++;
        }
        fclose(f);
        EXPECT_U_GE(lines, 9);
        EXPECT_U_EQ(missing, 0);
    }
    CHECK("KAME_POOL_SHOW_STATS=1 prints the statistics at exit; with STATS_JSON=1 as JSON") {
        char *env[] = {"KAME_POOL_SHOW_STATS=1", NULL};
        EXPECT_INT_EQ(run_child(env, out, sizeof out), 0);
        EXPECT(strstr(out, "kamepoolalloc statistics (version ") != NULL);
        EXPECT(strstr(out, "\n  threads_seen ") != NULL);
        char *env2[] = {"KAME_POOL_SHOW_STATS=yes", "KAME_POOL_STATS_JSON=on", NULL};
        EXPECT_INT_EQ(run_child(env2, out, sizeof out), 0);
        EXPECT(strstr(out, "{\"version\": ") != NULL);
        EXPECT(strstr(out, "\"threads_seen\": ") != NULL);
        char *env3[] = {NULL};
        EXPECT_INT_EQ(run_child(env3, out, sizeof out), 0);
        EXPECT(strstr(out, "statistics") == NULL);
    }
#endif
#ifdef KP_MANUAL
    CHECK("kamepoolalloc(3) documents exactly the options of the table") {
        FILE *f = fopen(KP_MANUAL, "r");
        if (!EXPECT_NOT_NULL(f))
            continue;
        static char man[1 << 17];
        size_t n = fread(man, 1, sizeof man - 1, f);
        man[n] = '\0';
        fclose(f);
        /* Every option has its entry (".TP" then ".B KAME_POOL_<NAME>"). */
        FILE *o = tmpfile();
        kame_pool_print_options(o);
        rewind(o);
        char line[256], entry[300];
        unsigned undocumented = 0, unknown = 0;
        while (fgets(line, sizeof line, o) != NULL) {
            char *eq = strchr(line, '=');
            if (eq == NULL)
                continue;
            *eq = '\0';
            snprintf(entry, sizeof entry, ".TP\n.B %s\n", line);
            if (strstr(man, entry) == NULL) {
                printf("  not in %s: %s\n", KP_MANUAL, line);
                undocumented++;
            }
        }
        fclose(o);
        /* Every entry names an option. */
        for (char *p = man; (p = strstr(p, ".TP\n.B KAME_POOL_")) != NULL;) {
            p += 7;
            char name[64];
            size_t k = 0;
            while (k + 1 < sizeof name && (p[k] == '_' || (p[k] >= 'A' && p[k] <= 'Z') || (p[k] >= '0' && p[k] <= '9')))
                name[k] = p[k], k++;
            name[k] = '\0';
            if (kame_pool_get_option(name, NULL) != 0) {
                printf("  documented but no such option: %s\n", name);
                unknown++;
            }
        }
        EXPECT_U_EQ(undocumented, 0);
        EXPECT_U_EQ(unknown, 0);
    }
#endif
    return kp_check_summary();
}
