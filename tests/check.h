/* A small table-of-checks helper for the test programs.
 *
 *   CHECK("posix_memalign_einval align=%zu", a) {
 *       EXPECT_INT_EQ(kame_pool_posix_memalign(&p, a, 16), EINVAL);
 *   }
 *   ...
 *   return kp_check_summary();
 *
 * A CHECK is a named block; it passes when every EXPECT inside it held and at
 * least one was evaluated (a check that asserts nothing is a failure).  Every
 * EXPECT is an expression worth 1 when it held and 0 when it failed, so a
 * check can skip work that depends on it: `if (!EXPECT_NOT_NULL(p)) continue;`.
 * `continue` at the top level of a CHECK body ends the check early; do not
 * `break` or `return` out of it (inner loops are fine), which would skip the
 * check's closing bookkeeping.
 *
 * Failures print the check name, file:line, the expression and the values.
 * The last line of output is always "N passed, N failed"; kp_check_summary()
 * returns the exit status (nonzero on any failure).  EXPECTs may be used
 * from worker threads while the enclosing CHECK is open (the counters are
 * atomic); CHECK blocks themselves belong to one thread.
 * KP_CHECK_VERBOSE=1 in the environment also prints every passing check.
 * A crash inside a check prints the check's name before the signal takes
 * its normal course.
 */
#ifndef KP_CHECK_H
#define KP_CHECK_H

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* KP_TSAN: the test is built with ThreadSanitizer (gcc and clang say so
 * differently), which changes what some checks can measure. */
#if defined(__SANITIZE_THREAD__)
#define KP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KP_TSAN 1
#endif
#endif

/* KP_ASAN: built with AddressSanitizer. */
#if defined(__SANITIZE_ADDRESS__)
#define KP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KP_ASAN 1
#endif
#endif

/* MinGW's own stdio (__USE_MINGW_ANSI_STDIO) takes the C99 formats the
 * checks print with; gcc calls that format gnu_printf there. */
#ifdef _WIN32
#define KP_CHECK_PRINTF gnu_printf
#else
#define KP_CHECK_PRINTF printf
#endif

/* Bit n of a size_t, with n given relative to the width (KP_SIZE_BITS - 1
 * is the top bit), so that size tables mean the same on 32- and 64-bit
 * targets. */
#define KP_SIZE_BITS (sizeof(size_t) * 8)
#define KP_SIZE_BIT(n) ((size_t)1 << (n))

/* Failures printed per check; the rest are only counted, so a bad size
 * table does not flood the log. */
#define KP_CHECK_MAX_REPORTS 10

struct kp_check_state {
    char name[200];
    const char *file;
    int line;
    int active;
    int verbose;
    int initialised;
    unsigned long expects;      /* EXPECTs evaluated in the current check */
    unsigned long fails;        /* EXPECTs failed in the current check */
    unsigned long passed;       /* checks */
    unsigned long failed;       /* checks */
    unsigned long stray_fails;  /* EXPECTs failed outside any check */
};

static struct kp_check_state kp_check_st;

#ifdef _WIN32
/* Windows has no sigaction: a crash is not named there, and stdout is
 * locked with the CRT's own calls. */
#define flockfile _lock_file
#define funlockfile _unlock_file
#else
static const int kp_check_signals[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
static struct sigaction kp_check_old_actions[sizeof kp_check_signals / sizeof kp_check_signals[0]];

static inline void kp_check_write_str(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static inline void kp_check_write_num(long v)
{
    char tmp[24];
    int i = (int)sizeof tmp;
    tmp[--i] = '\0';
    unsigned long u = v < 0 ? 0ul - (unsigned long)v : (unsigned long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u > 0 && i > 1);
    if (v < 0)
        tmp[--i] = '-';
    kp_check_write_str(tmp + i);
}

/* Names the check that was running, then hands the signal to whoever had it
 * before (the default action, or a sanitizer's reporter): restoring the old
 * action and returning makes the faulting instruction, or abort()'s second
 * raise, deliver it there.  Only async-signal-safe calls in here. */
static void kp_check_on_signal(int sig)
{
    int saved = errno;
    kp_check_write_str("CRASH: signal ");
    kp_check_write_num(sig);
    if (kp_check_st.active) {
        kp_check_write_str(" inside check '");
        kp_check_write_str(kp_check_st.name);
        kp_check_write_str("' (");
        kp_check_write_str(kp_check_st.file);
        kp_check_write_str(":");
        kp_check_write_num(kp_check_st.line);
        kp_check_write_str(")");
    } else {
        kp_check_write_str(" outside any check");
    }
    kp_check_write_str("\n");

    for (size_t k = 0; k < sizeof kp_check_signals / sizeof kp_check_signals[0]; k++)
        if (kp_check_signals[k] == sig)
            sigaction(sig, &kp_check_old_actions[k], NULL);
    errno = saved;
    if (sig == SIGABRT || sig == SIGFPE)
        raise(sig);
}
#endif

static inline void kp_check_init(void)
{
    if (kp_check_st.initialised)
        return;
    kp_check_st.initialised = 1;
    const char *v = getenv("KP_CHECK_VERBOSE");
    kp_check_st.verbose = v != NULL && v[0] != '\0' && v[0] != '0';
#ifndef _WIN32
    for (size_t k = 0; k < sizeof kp_check_signals / sizeof kp_check_signals[0]; k++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = kp_check_on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_NODEFER;
        sigaction(kp_check_signals[k], &sa, &kp_check_old_actions[k]);
    }
#endif
}

__attribute__((format(KP_CHECK_PRINTF, 3, 4)))
static inline int kp_check_begin(const char *file, int line, const char *fmt, ...)
{
    kp_check_init();
    if (kp_check_st.active) {
        printf("FAIL [%s] %s:%d: CHECK nested inside another CHECK (not supported)\n",
               kp_check_st.name, file, line);
        fflush(stdout);
        kp_check_st.fails++;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kp_check_st.name, sizeof kp_check_st.name, fmt, ap);
    va_end(ap);
    kp_check_st.file = file;
    kp_check_st.line = line;
    kp_check_st.active = 1;
    kp_check_st.expects = 0;
    kp_check_st.fails = 0;
    return 1;
}

static inline int kp_check_end(void)
{
    if (kp_check_st.expects == 0 && kp_check_st.fails == 0) {
        printf("FAIL [%s] %s:%d: check evaluated no EXPECT\n",
               kp_check_st.name, kp_check_st.file, kp_check_st.line);
        kp_check_st.fails = 1;
    }
    if (kp_check_st.fails > KP_CHECK_MAX_REPORTS)
        printf("FAIL [%s] ... %lu failed expectations in all (first %d shown)\n",
               kp_check_st.name, kp_check_st.fails, KP_CHECK_MAX_REPORTS);
    if (kp_check_st.fails) {
        kp_check_st.failed++;
    } else {
        kp_check_st.passed++;
        if (kp_check_st.verbose)
            printf("ok   [%s] (%lu expectations)\n", kp_check_st.name, kp_check_st.expects);
    }
    fflush(stdout);
    kp_check_st.active = 0;
    return 0;
}

__attribute__((format(KP_CHECK_PRINTF, 4, 5)))
static inline void kp_check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
    kp_check_init();
    unsigned long nth = __atomic_add_fetch(kp_check_st.active ? &kp_check_st.fails
                                                              : &kp_check_st.stray_fails,
                                           1, __ATOMIC_RELAXED);
    if (nth > KP_CHECK_MAX_REPORTS)
        return;
    char detail[512] = "";
    if (fmt != NULL && fmt[0] != '\0') {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
    }
    /* One locked write per failure, so reports from threads do not mix. */
    flockfile(stdout);
    printf("FAIL [%s] %s:%d: %s%s%s\n", kp_check_st.active ? kp_check_st.name : "(outside CHECK)",
           file, line, expr, detail[0] ? " -- " : "", detail);
    fflush(stdout);
    funlockfile(stdout);
}

static inline int kp_check_note(int ok)
{
    if (kp_check_st.active)
        __atomic_fetch_add(&kp_check_st.expects, 1, __ATOMIC_RELAXED);
    return ok;
}

/* FAILF's body: a failed expectation with only a message; gives 0. */
__attribute__((format(KP_CHECK_PRINTF, 3, 4)))
static inline int kp_check_failf(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kp_check_note(0);
    kp_check_fail(file, line, msg, NULL);
    return 0;
}

/* " (ENOMEM)" for the errno values these tests expect, "" otherwise. */
static inline const char *kp_check_errno_name(int e)
{
    switch (e) {
    case ENOMEM: return " (ENOMEM)";
    case EINVAL: return " (EINVAL)";
    case EFAULT: return " (EFAULT)";
    case ERANGE: return " (ERANGE)";
    case EOVERFLOW: return " (EOVERFLOW)";
    default: return "";
    }
}

/* Prints the summary line and gives the exit status. */
static inline int kp_check_summary(void)
{
    kp_check_init();
    if (kp_check_st.active) {
        printf("FAIL [%s] check still open at summary\n", kp_check_st.name);
        kp_check_st.failed++;
        kp_check_st.active = 0;
    }
    if (kp_check_st.stray_fails) {
        printf("FAIL (outside CHECK): %lu failed expectations\n", kp_check_st.stray_fails);
        kp_check_st.failed++;
    }
    printf("%lu passed, %lu failed\n", kp_check_st.passed, kp_check_st.failed);
    fflush(stdout);
    return kp_check_st.failed ? 1 : 0;
}

#define CHECK(...)                                                                 \
    for (int kp_check_once_ = kp_check_begin(__FILE__, __LINE__, __VA_ARGS__);     \
         kp_check_once_; kp_check_once_ = kp_check_end())

/* Records a failure with a free-form explanation, for conditions checked by
 * hand (e.g. a mismatch found while scanning a buffer). */
#define FAILF(...) kp_check_failf(__FILE__, __LINE__, __VA_ARGS__)

#define EXPECT(cond)                                                               \
    kp_check_note((cond) ? 1 : (kp_check_fail(__FILE__, __LINE__, #cond, NULL), 0))

#define EXPECTF(cond, ...)                                                         \
    kp_check_note((cond) ? 1 : (kp_check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__), 0))

#define KP_CHECK_CMP_U(a, op, b)                                                   \
    ({                                                                             \
        uintmax_t kp_a_ = (uintmax_t)(a), kp_b_ = (uintmax_t)(b);                  \
        kp_check_note(kp_a_ op kp_b_ ? 1                                           \
            : (kp_check_fail(__FILE__, __LINE__, #a " " #op " " #b,                \
                             "got %ju (0x%jx) vs %ju (0x%jx)",                     \
                             kp_a_, kp_a_, kp_b_, kp_b_), 0));                     \
    })

#define EXPECT_U_EQ(a, b) KP_CHECK_CMP_U(a, ==, b)
#define EXPECT_U_NE(a, b) KP_CHECK_CMP_U(a, !=, b)
#define EXPECT_U_GE(a, b) KP_CHECK_CMP_U(a, >=, b)
#define EXPECT_U_LE(a, b) KP_CHECK_CMP_U(a, <=, b)
#define EXPECT_U_GT(a, b) KP_CHECK_CMP_U(a, >, b)
#define EXPECT_U_LT(a, b) KP_CHECK_CMP_U(a, <, b)

#define EXPECT_INT_EQ(a, b)                                                        \
    ({                                                                             \
        intmax_t kp_a_ = (intmax_t)(a), kp_b_ = (intmax_t)(b);                     \
        kp_check_note(kp_a_ == kp_b_ ? 1                                           \
            : (kp_check_fail(__FILE__, __LINE__, #a " == " #b,                     \
                             "got %jd%s vs %jd%s", kp_a_,                          \
                             kp_check_errno_name((int)kp_a_), kp_b_,               \
                             kp_check_errno_name((int)kp_b_)), 0));                \
    })

/* errno compared by name: EXPECT_ERRNO(ENOMEM). */
#define EXPECT_ERRNO(e)                                                            \
    ({                                                                             \
        int kp_e_ = errno;                                                         \
        kp_check_note(kp_e_ == (e) ? 1                                             \
            : (kp_check_fail(__FILE__, __LINE__, "errno == " #e,                   \
                             "errno is %d%s, expected %d%s", kp_e_,                \
                             kp_check_errno_name(kp_e_), (int)(e),                 \
                             kp_check_errno_name((int)(e))), 0));                  \
    })

#define EXPECT_NULL(p)                                                             \
    ({                                                                             \
        const void *kp_p_ = (p);                                                   \
        kp_check_note(kp_p_ == NULL ? 1                                            \
            : (kp_check_fail(__FILE__, __LINE__, #p " == NULL", "got %p", kp_p_), 0)); \
    })

#define EXPECT_NOT_NULL(p)                                                         \
    kp_check_note((p) != NULL ? 1                                                  \
        : (kp_check_fail(__FILE__, __LINE__, #p " != NULL", "got NULL (errno %d)", errno), 0))

#define EXPECT_ALIGNED(p, align)                                                   \
    ({                                                                             \
        uintptr_t kp_p_ = (uintptr_t)(p);                                          \
        uintmax_t kp_al_ = (uintmax_t)(align);                                     \
        kp_check_note(kp_al_ != 0 && kp_p_ % kp_al_ == 0 ? 1                       \
            : (kp_check_fail(__FILE__, __LINE__, #p " aligned to " #align,         \
                             "pointer %#" PRIxPTR " not a multiple of %ju",        \
                             kp_p_, kp_al_), 0));                                  \
    })

/* ---- content helpers ------------------------------------------------------ */

/* Sizes and alignments passed through a volatile: the compiler can neither
 * fold an impossible request away nor diagnose it at compile time. */
static inline size_t kp_opaque(size_t n)
{
    volatile size_t v = n;
    return v;
}

/* A byte pattern that differs between neighbouring bytes, pages and MiBs, so
 * a lost, shifted or swapped page shows up:
 *   kp_pat(i, seed) = i*13 + (i>>12)*7 + (i>>20)*3 + seed   (mod 256)
 * Within a 4 KiB page the pattern is j*13 + c for the offset j and a
 * per-page constant c (4096*13 is a multiple of 256), so every page is a
 * row of one precomputed table: filling and checking are memcpy / memcmp,
 * which stay fast in the sanitizer builds where byte loops are slow. */
#define KP_PAT_PAGE 4096u
static unsigned char kp_pat_rows[256][KP_PAT_PAGE];

__attribute__((constructor))
static void kp_pat_init(void)
{
    for (unsigned c = 0; c < 256; c++)
        for (unsigned j = 0; j < KP_PAT_PAGE; j++)
            kp_pat_rows[c][j] = (unsigned char)(j * 13u + c);
}

static inline unsigned char kp_pat(size_t i, unsigned seed)
{
    return (unsigned char)(i * 13u + (i >> 12) * 7u + (i >> 20) * 3u + seed);
}

static inline const unsigned char *kp_pat_row(size_t i, unsigned seed)
{
    size_t pg = i / KP_PAT_PAGE;
    return kp_pat_rows[(unsigned char)(pg * 7u + (pg >> 8) * 3u + seed)];
}

static inline void kp_fill_pat(void *p, size_t n, unsigned seed)
{
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t j = i % KP_PAT_PAGE, len = KP_PAT_PAGE - j;
        if (len > n - i)
            len = n - i;
        memcpy(b + i, kp_pat_row(i, seed) + j, len);
        i += len;
    }
}

/* Index of the first byte that breaks the pattern, n when none does. */
static inline size_t kp_pat_mismatch(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t j = i % KP_PAT_PAGE, len = KP_PAT_PAGE - j;
        if (len > n - i)
            len = n - i;
        if (memcmp(b + i, kp_pat_row(i, seed) + j, len) != 0) {
            for (size_t k = i; k < i + len; k++)
                if (b[k] != kp_pat(k, seed))
                    return k;
        }
        i += len;
    }
    return n;
}

/* Index of the first byte that is not v, n when none.  All bytes equal v
 * exactly when the first does and the block equals itself shifted by one. */
static inline size_t kp_byte_mismatch(const void *p, size_t n, unsigned char v)
{
    const unsigned char *b = (const unsigned char *)p;
    if (n == 0 || (b[0] == v && memcmp(b, b + 1, n - 1) == 0))
        return n;
    for (size_t i = 0; i < n; i++)
        if (b[i] != v)
            return i;
    return n;
}

/* The factor KP_TEST_SCALE asks the tests' loops to be scaled by (1 when
 * unset or not positive). */
static inline double kp_test_scale(void)
{
    const char *s = getenv("KP_TEST_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

#ifdef __linux__
/* Whether a mapping starting at `start` is a sanitizer's shadow memory,
 * which the sanitizer fills as the program touches its own memory and
 * never gives back: resident memory counts the program's mappings only. */
static inline int kp_sanitizer_shadow(unsigned long start)
{
#if defined(KP_TSAN) && defined(__x86_64__)
    return start >= 0x010000000000ul && start < 0x400000000000ul;
#elif defined(KP_ASAN) && defined(__x86_64__)
    return start >= 0x7fff8000ul && start < 0x10007fff8000ul;
#else
    (void)start;
    return 0;
#endif
}

/* The process's resident bytes, without sanitizer shadow memory. */
static inline size_t kp_resident_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    size_t total = 0;
    int in = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long start, end, kb;
        const char *dash = strchr(line, '-'), *space = strchr(line, ' ');
        if (dash != NULL && space != NULL && dash < space && sscanf(line, "%lx-%lx ", &start, &end) == 2)
            in = !kp_sanitizer_shadow(start);
        else if (in && sscanf(line, "Rss: %lu kB", &kb) == 1)
            total += (size_t)kb << 10;
    }
    fclose(f);
    return total;
}
#endif

/* Reads fd to its end (a child's output through a pipe) into out, at most
 * cap - 1 bytes and a terminating NUL, and closes it.  Returns the length. */
static inline size_t kp_read_all(int fd, char *out, size_t cap)
{
    size_t have = 0;
    ssize_t n;
    while (have + 1 < cap && (n = read(fd, out + have, cap - 1 - have)) > 0)
        have += (size_t)n;
    out[have] = '\0';
    close(fd);
    return have;
}

/* The first n bytes at p still hold kp_fill_pat(p, n, seed). */
#define EXPECT_PATTERN(p, n, seed)                                                  \
    ({                                                                              \
        const unsigned char *kp_pp_ = (const unsigned char *)(p);                   \
        unsigned kp_ps_ = (seed);                                                   \
        size_t kp_pn_ = (n), kp_pi_ = kp_pat_mismatch(kp_pp_, kp_pn_, kp_ps_);      \
        kp_pi_ == kp_pn_ ? kp_check_note(1)                                         \
            : FAILF("contents of %s changed: byte %zu of %zu is 0x%02x, expected 0x%02x", \
                    #p, kp_pi_, kp_pn_, kp_pp_[kp_pi_], kp_pat(kp_pi_, kp_ps_));    \
    })

/* Every one of the first n bytes at p equals v. */
#define EXPECT_BYTES(p, n, v)                                                       \
    ({                                                                              \
        const unsigned char *kp_pp_ = (const unsigned char *)(p);                   \
        unsigned char kp_pv_ = (unsigned char)(v);                                  \
        size_t kp_pn_ = (n), kp_pi_ = kp_byte_mismatch(kp_pp_, kp_pn_, kp_pv_);     \
        kp_pi_ == kp_pn_ ? kp_check_note(1)                                         \
            : FAILF("%s: byte %zu of %zu is 0x%02x, expected 0x%02x",               \
                    #p, kp_pi_, kp_pn_, kp_pp_[kp_pi_], kp_pv_);                    \
    })

#endif /* KP_CHECK_H */
