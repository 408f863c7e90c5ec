/* The OS interface (src/os.h) on its own, against this OS's
 * implementation: the configuration, every memory call (reserve, commit,
 * decommit, purge, unmap, lock, huge-page advice), the errno contract,
 * time, the thread id and the thread-exit hook. */
#include "os.h"

#include <pthread.h>
#include <stdatomic.h>

#include "check.h"

#ifdef _WIN32
#include <windows.h>
/* The heap's TLS slot (heap.c's in the library), which os_windows.c
 * points back at the heap when a thread exits. */
KP_THREAD_LOCAL void *kp_tls_heap;
static void sleep_ms(unsigned ms) { Sleep(ms); }
static void set_env(const char *name, const char *value) { _putenv_s(name, value); }
#else
static void sleep_ms(unsigned ms)
{
    struct timespec ts = { 0, (long)ms * 1000000 };
    nanosleep(&ts, NULL);
}
static void set_env(const char *name, const char *value) { setenv(name, value, 1); }
#endif

/* The sanitizers' runtimes replace mlock with a call that does nothing
 * and succeeds. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KP_TEST_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KP_TEST_SANITIZER 1
#endif
#endif
#ifndef KP_TEST_SANITIZER
#define KP_TEST_SANITIZER 0
#endif

static size_t page;

static void test_config(void)
{
    CHECK("config: page size, granularity, address bits") {
        kp_os_init();
        page = kp_page_size();
        EXPECT_U_GE(page, 4096);
        EXPECT_U_EQ(page & (page - 1), 0);
        EXPECT_U_EQ(page, kp_os.page_size);
        EXPECT_U_GE(kp_os.alloc_granularity, page);
        EXPECT_U_EQ(kp_os.alloc_granularity % page, 0);
#ifdef _WIN32
        /* VirtualFree releases a reservation whole; 64 KiB granularity. */
        EXPECT_U_EQ(kp_os.address_bits, sizeof(void *) == 8 ? 47 : 32);
        EXPECT(!kp_os.has_partial_unmap);
        EXPECT_U_EQ(kp_os.alloc_granularity, 64 * 1024);
#else
        EXPECT_U_EQ(kp_os.address_bits, sizeof(void *) == 8 ? 48 : 32);
        EXPECT(kp_os.has_partial_unmap);
#endif
    }
    CHECK("config: kp_os_init again changes nothing") {
        kp_os_config before = kp_os;
        kp_os_init();
        EXPECT_U_EQ(kp_os.page_size, before.page_size);
        EXPECT_U_EQ(kp_os.alloc_granularity, before.alloc_granularity);
        EXPECT_U_EQ(kp_os.address_bits, before.address_bits);
    }
}

static void test_memory(void)
{
    size_t len = 16 * page;
    char *p = NULL;
    CHECK("reserve without commit, commit, write") {
        errno = 1234;
        if (!EXPECT_INT_EQ(kp_os_reserve(NULL, len, false, (void **)&p), 0)) continue;
        EXPECT_INT_EQ(errno, 1234);
        EXPECT_NOT_NULL(p);
        EXPECT_ALIGNED(p, kp_os.alloc_granularity);
        EXPECT_INT_EQ(kp_os_commit(p, len), 0);
        EXPECT(kp_os_is_mapped(p));
        EXPECT(kp_os_is_mapped(p + len - 1));
        EXPECT_BYTES(p, len, 0);
        memset(p, 0xab, len);
        EXPECT_BYTES(p, len, 0xab);
    }
    if (p == NULL) return;
    CHECK("purge: still accessible, zero on the next touch") {
        EXPECT_INT_EQ(kp_os_purge(p, 4 * page), 0);
        EXPECT_BYTES(p, 4 * page, 0);
        EXPECT_BYTES(p + 4 * page, page, 0xab);
    }
    CHECK("decommit then commit: zero-filled") {
        EXPECT_INT_EQ(kp_os_decommit(p + 8 * page, 4 * page), 0);
        /* Still reserved: committing an unmapped range fails. */
        EXPECT_INT_EQ(kp_os_commit(p + 8 * page, 4 * page), 0);
        EXPECT_BYTES(p + 8 * page, 4 * page, 0);
        EXPECT_BYTES(p + 12 * page, page, 0xab);
    }
    CHECK("lock and unlock a committed page") {
        int rc = kp_os_lock(p, page);
        /* An unprivileged process may be over RLIMIT_MEMLOCK. */
        EXPECTF(rc == 0 || rc == EPERM || rc == ENOMEM || rc == EAGAIN, "kp_os_lock: %d", rc);
        if (rc == 0) EXPECT_INT_EQ(kp_os_unlock(p, page), 0);
        EXPECT_BYTES(p + 4 * page, page, 0xab);
    }
    CHECK("huge-page advice, both ways") {
        errno = 77;
        int on = kp_os_advise_huge(p, len, true), off = kp_os_advise_huge(p, len, false);
        EXPECT_INT_EQ(errno, 77);
        /* A kernel without transparent huge pages refuses the advice. */
        EXPECTF(on == 0 || on == EINVAL || on == ENOTSUP, "advise huge: %d", on);
        EXPECTF(off == 0 || off == EINVAL || off == ENOTSUP, "advise no huge: %d", off);
        EXPECT_BYTES(p + 4 * page, page, 0xab);
    }
    CHECK("partial unmap, then the rest") {
        if (!kp_os.has_partial_unmap) {
            EXPECT_INT_EQ(kp_os_unmap(p, len), 0);
            EXPECT(!kp_os_is_mapped(p));
            EXPECT(!kp_os_is_mapped(p + len - 1));
            continue;
        }
        EXPECT_INT_EQ(kp_os_unmap(p + 12 * page, 4 * page), 0);
        EXPECT(!kp_os_is_mapped(p + 12 * page));
        EXPECT(kp_os_is_mapped(p));
        EXPECT_INT_EQ(kp_os_unmap(p, 12 * page), 0);
        EXPECT(!kp_os_is_mapped(p));
    }
    CHECK("failures return the code and leave errno alone") {
        errno = 4321;
        EXPECT_INT_EQ(kp_os_unmap(p + 1, page), EINVAL); /* not page-aligned */
        EXPECT_INT_EQ(errno, 4321);
        if (!KP_TEST_SANITIZER)
            EXPECT_INT_EQ(kp_os_lock(p, page), ENOMEM); /* unmapped */
        EXPECT_INT_EQ(errno, 4321);
#if !(defined(KP_TEST_EMULATED) && UINTPTR_MAX == 0xffffffffu)
        /* (qemu-user keeps a 32-bit guest's whole address space reserved:
         * there an unmapped range is still the emulator's, and mprotect
         * of it succeeds.) */
        EXPECT_INT_EQ(kp_os_commit(p, page), ENOMEM); /* unmapped */
        EXPECT_INT_EQ(errno, 4321);
#endif
        /* Not page-aligned (what qemu-user checks too: it accepts any
         * advice on an unmapped range). */
        EXPECT_INT_EQ(kp_os_advise_huge(p + 1, page, true), EINVAL);
        EXPECT_INT_EQ(kp_os_advise_huge(p + 1, page, false), EINVAL);
        EXPECT_INT_EQ(errno, 4321);
        void *q = (void *)1;
        EXPECT_INT_EQ(kp_os_reserve(NULL, SIZE_MAX & ~(page - 1), true, &q), ENOMEM);
        EXPECT_NULL(q);
        EXPECT_INT_EQ(errno, 4321);
    }
    CHECK("reserve at a free hint gets the hint") {
        char *a;
        if (!EXPECT_INT_EQ(kp_os_map(NULL, 4 * page, (void **)&a), 0)) continue;
        EXPECT_INT_EQ(kp_os_unmap(a, 4 * page), 0);
        char *b;
        if (!EXPECT_INT_EQ(kp_os_reserve(a, 4 * page, true, (void **)&b), 0)) continue;
        EXPECT(b == a);
        b[0] = 1;
        EXPECT_INT_EQ(kp_os_unmap(b, 4 * page), 0);
    }
}

static atomic_uintptr_t exit_arg;
static atomic_int exit_runs;
static uintptr_t child_id;

static atomic_int exit_slot_ok = 1;

static void on_exit_hook(void *arg)
{
#ifdef _WIN32
    if (kp_tls_heap != arg)
        atomic_store(&exit_slot_ok, 0);
#endif
    atomic_store(&exit_arg, (uintptr_t)arg);
    atomic_fetch_add(&exit_runs, 1);
}

static void *thread_main(void *arg)
{
    child_id = kp_os_thread_id();
    kp_os_thread_exit_init(on_exit_hook);
    kp_os_thread_exit_arm(arg);
    return NULL;
}

static void test_threads(void)
{
    CHECK("thread id: nonzero, stable, distinct per live thread") {
        uintptr_t me = kp_os_thread_id();
        EXPECT_U_GT(me, 3);
        EXPECT_U_EQ(kp_os_thread_id(), me);
        pthread_t t;
        if (!EXPECT_INT_EQ(pthread_create(&t, NULL, thread_main, &exit_arg), 0)) continue;
        EXPECT_INT_EQ(pthread_join(t, NULL), 0);
        EXPECT_U_NE(child_id, me);
        EXPECT_U_GT(child_id, 3);
    }
    CHECK("thread-exit hook runs once with its argument") {
        EXPECT_INT_EQ(atomic_load(&exit_runs), 1);
        EXPECT_U_EQ(atomic_load(&exit_arg), (uintptr_t)&exit_arg);
        EXPECT(atomic_load(&exit_slot_ok));
    }
    CHECK("monotonic clock advances") {
        /* The clock is coarse (the kernel's tick, up to 10 ms): a sleep of
         * 30 ms shows at least 20 of it. */
        uint64_t a = kp_os_now_ns();
        sleep_ms(30);
        uint64_t b = kp_os_now_ns();
        EXPECT_U_GE(b - a, 20000000);
    }
    CHECK("getenv") {
        set_env("KP_TEST_OS_VAR", "value");
        const char *v = kp_os_getenv("KP_TEST_OS_VAR");
        if (EXPECT_NOT_NULL(v)) EXPECT(strcmp(v, "value") == 0);
        EXPECT_NULL(kp_os_getenv("KP_TEST_OS_VAR_UNSET"));
    }
}

int main(void)
{
    test_config();
    test_memory();
    test_threads();
    return kp_check_summary();
}
