/* Options: every knob of the pool is one row of one table, settable by a
 * KAME_POOL_<NAME> environment variable read once at start-up and by the
 * matching kame_pool_set_* call (or kame_pool_set_option by name).  Values
 * parse the same way everywhere: booleans as 1/true/on/yes or
 * 0/false/off/no, sizes as a number with an optional K, M, G or T suffix
 * (powers of 1024, "KiB" etc. accepted).  A malformed value is reported on
 * stderr and ignored.  kamepoolalloc(3) documents the table; a test checks
 * the two agree. */
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum { KP_OPT_BOOL, KP_OPT_SIZE, KP_OPT_UINT, KP_OPT_WORDS };

static _Atomic int verbose, show_stats, stats_json;

void kame_pool_set_verbose(int on) { kp_store_relaxed(&verbose, on != 0); }
int kame_pool_get_verbose(void) { return kp_load_relaxed(&verbose); }
void kame_pool_set_show_stats(int on) { kp_store_relaxed(&show_stats, on != 0); }
int kame_pool_get_show_stats(void) { return kp_load_relaxed(&show_stats); }
void kame_pool_set_stats_json(int on) { kp_store_relaxed(&stats_json, on != 0); }
int kame_pool_get_stats_json(void) { return kp_load_relaxed(&stats_json); }

/* The table: X(NAME, TYPE, max, words, setter, getter, description), one
 * row per option.  The environment variable is KAME_POOL_<NAME>; TYPE is
 * BOOL, SIZE, UINT (0..max) or WORDS (one of the words of `words`,
 * "a|b|c", given to the setter as its index, or that index as a number);
 * the setter and getter are the public calls (their argument converts
 * from the parsed value). */
#define KP_OPTIONS(X)                                                                                 \
  X(CHECK, WORDS, 2, "ignore|abort|full", kame_pool_set_check_level, kame_pool_get_check_level,     \
    "pointer checks: ignore (0) bad pointers, report and abort (1, default), check every free in full (2)") \
  X(MAX_BYTES, SIZE, SIZE_MAX, NULL, kame_pool_set_max_bytes, kame_pool_get_max_bytes,              \
    "ceiling on the address space the pool maps; past it the system allocator serves (0: none)")     \
  X(LARGE_CACHE_CAP, SIZE, SIZE_MAX, NULL, kame_pool_set_large_cache_cap, kame_pool_get_large_cache_cap, \
    "bytes the recycle cache may hold, all threads together")                                         \
  X(LARGE_CACHE_TOP, SIZE, SIZE_MAX, NULL, kame_pool_set_large_cache_top, kame_pool_get_large_cache_top, \
    "largest block the recycle cache keeps (below 1 GiB)")                                            \
  X(LAZY_DRAIN_MS, UINT, 1000000, NULL, kame_pool_set_lazy_drain_interval_ms,                       \
    kame_pool_get_lazy_drain_interval_ms, "drain interval: cached blocks idle two intervals go back (0: never)") \
  X(THREAD_EXIT_RECLAIM, BOOL, 1, NULL, kame_pool_set_thread_exit_reclaim, kame_pool_get_thread_exit_reclaim, \
    "an exiting thread's cached memory goes back to the OS (off: to the global cache)")              \
  X(REALTIME_DEFAULT, WORDS, 1, "off|defer", kame_pool_set_realtime_default, kame_pool_get_realtime_default, \
    "realtime level every thread has at least: off (0, default) or defer (1)")                        \
  X(RT_PENDING_CAP, SIZE, SIZE_MAX, NULL, kame_pool_set_rt_pending_cap, kame_pool_get_rt_pending_cap, \
    "bytes of mappings realtime frees may park before one unmaps at once (default 1G)")              \
  X(RT_OS_POLICY, WORDS, 3, "allow|count|fail|abort", kame_pool_set_rt_os_policy, kame_pool_get_rt_os_policy, \
    "a realtime thread's allocation that needs a new mapping: allow (0, default), count, fail, abort") \
  X(THP_POLICY, WORDS, 3, "system|always|never|blocks", kame_pool_set_thp_policy, kame_pool_get_thp_policy, \
    "transparent huge pages: system (0), always, never, blocks (3, default: cacheable large blocks)") \
  X(REALTIME_MODE, BOOL, 1, NULL, kame_pool_set_realtime_mode, kame_pool_get_realtime_mode,          \
    "silence every background release path (lazy drain, thread-exit purge, page purging)")          \
  X(VERBOSE, BOOL, 1, NULL, kame_pool_set_verbose, kame_pool_get_verbose, "print the options in force at start-up") \
  X(SHOW_STATS, BOOL, 1, NULL, kame_pool_set_show_stats, kame_pool_get_show_stats, "print the statistics at exit") \
  X(STATS_JSON, BOOL, 1, NULL, kame_pool_set_stats_json, kame_pool_get_stats_json,                  \
    "print the exit statistics as JSON")

typedef struct kp_option {
  const char *name;
  int type;
  uint64_t max;
  const char *words; /* WORDS: "a|b|c" */
  void (*set)(uint64_t);
  uint64_t (*get)(void);
  const char *doc;
} kp_option;

#define KP_OPTION_ADAPTERS(NAME, TYPE, max, words, setter, getter, doc)                                     \
  static void set_##NAME(uint64_t v) { setter(v); }                                                  \
  static uint64_t get_##NAME(void) { return (uint64_t)getter(); }
KP_OPTIONS(KP_OPTION_ADAPTERS)
#undef KP_OPTION_ADAPTERS

static const kp_option options[] = {
#define KP_OPTION_ROW(NAME, TYPE, max, words, setter, getter, doc)                                   \
  {#NAME, KP_OPT_##TYPE, max, words, set_##NAME, get_##NAME, doc},
    KP_OPTIONS(KP_OPTION_ROW)
#undef KP_OPTION_ROW
};
#define KP_NUM_OPTIONS (sizeof options / sizeof options[0])

static bool word_is(const char *s, const char *const *words) {
  for (; *words; words++)
    if (strcasecmp(s, *words) == 0) return true;
  return false;
}

/* The index of `text` among the words "a|b|c" (any case), or -1. */
static int word_index(const char *words, const char *text) {
  size_t n = strlen(text);
  int i = 0;
  for (const char *w = words; *w; i++) {
    size_t len = strcspn(w, "|");
    if (len == n && n != 0 && strncasecmp(w, text, n) == 0) return i;
    w += len;
    if (*w == '|') w++;
  }
  return -1;
}

/* Parses `text` as the option's type; false when malformed. */
static bool parse(const kp_option *o, const char *text, uint64_t *out) {
  static const char *const yes[] = {"1", "true", "on", "yes", NULL};
  static const char *const no[] = {"0", "false", "off", "no", NULL};
  if (o->type == KP_OPT_WORDS) {
    int i = word_index(o->words, text);
    if (i >= 0 && (uint64_t)i <= o->max) {
      *out = (uint64_t)i;
      return true;
    }
  }
  if (o->type == KP_OPT_BOOL) {
    if (word_is(text, yes)) *out = 1;
    else if (word_is(text, no)) *out = 0;
    else return false;
    return true;
  }
  const char *s = text;
  uint64_t v = 0;
  if (*s < '0' || *s > '9') return false;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  if (*s != '\0') {
    if (o->type != KP_OPT_SIZE) return false; /* UINT, WORDS: a plain number */
    static const char units[] = "KMGT";
    const char *u = strchr(units, *s >= 'a' ? *s - 32 : *s);
    if (u == NULL || *u == '\0') return false;
    s++;
    if (strcasecmp(s, "") != 0 && strcasecmp(s, "B") != 0 && strcasecmp(s, "iB") != 0) return false;
    unsigned shift = 10 * (unsigned)(u - units + 1);
    if (v > (UINT64_MAX >> shift)) return false;
    v <<= shift;
  }
  if (v > o->max) return false;
  *out = v;
  return true;
}

static const kp_option *find(const char *name) {
  if (name == NULL) return NULL;
  if (strncasecmp(name, "KAME_POOL_", 10) == 0) name += 10;
  for (unsigned i = 0; i < KP_NUM_OPTIONS; i++)
    if (strcasecmp(name, options[i].name) == 0) return &options[i];
  return NULL;
}

int kame_pool_set_option(const char *name, const char *value) {
  const kp_option *o = find(name);
  uint64_t v;
  if (o == NULL || value == NULL || !parse(o, value, &v)) return EINVAL;
  o->set(v);
  return 0;
}

int kame_pool_get_option(const char *name, unsigned long long *value) {
  const kp_option *o = find(name);
  if (o == NULL) return EINVAL;
  if (value != NULL) *value = o->get();
  return 0;
}

static void say(const char *s) { kp_os_write_error(s, strlen(s)); }

static void report(const char *name, const char *text, const char *why) {
  say("kamepoolalloc: ignoring KAME_POOL_");
  say(name);
  say("=");
  say(text);
  say(": ");
  say(why);
  say("\n");
}

/* One line per option, into buf (no stdio: this also runs at start-up,
 * from the loader). */
static int format_option(const kp_option *o, char *buf, size_t len) {
  uint64_t v = o->get();
  if (o->type == KP_OPT_WORDS) {
    const char *w = o->words;
    for (uint64_t i = 0; i < v && *w; i++) {
      w += strcspn(w, "|");
      if (*w == '|') w++;
    }
    int n = (int)strcspn(w, "|");
    if (n > 0) return snprintf(buf, len, "KAME_POOL_%s=%.*s\n", o->name, n, w);
  }
  if (o->type == KP_OPT_SIZE && v == SIZE_MAX)
    return snprintf(buf, len, "KAME_POOL_%s=%llu (no limit)\n", o->name, (unsigned long long)v);
  return snprintf(buf, len, "KAME_POOL_%s=%llu\n", o->name, (unsigned long long)v);
}

void kame_pool_print_options(FILE *out) {
  if (out == NULL) out = stderr;
  char buf[128];
  for (unsigned i = 0; i < KP_NUM_OPTIONS; i++) {
    format_option(&options[i], buf, sizeof buf);
    fputs(buf, out);
  }
  fflush(out);
}

#if defined(__unix__) || defined(__APPLE__)
extern char **environ;
/* A KAME_POOL_ variable that names no option is most likely a typo. */
static void report_unknown(void) {
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "KAME_POOL_", 10) != 0) continue;
    const char *eq = strchr(*e, '=');
    char name[64];
    size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, *e, n);
    name[n] = '\0';
    if (find(name) == NULL) {
      say("kamepoolalloc: ignoring ");
      say(name);
      say(": no such option\n");
    }
  }
}
#else
static void report_unknown(void) {}
#endif

/* Applies the environment's KAME_POOL_* settings once, when the library
 * is loaded. */
__attribute__((constructor)) static void options_from_environment(void) {
  kp_os_init();
  char var[64] = "KAME_POOL_";
  for (unsigned i = 0; i < KP_NUM_OPTIONS; i++) {
    const kp_option *o = &options[i];
    strcpy(var + 10, o->name);
    const char *text = kp_os_getenv(var);
    if (text == NULL) continue;
    uint64_t v;
    if (parse(o, text, &v)) o->set(v);
    else report(o->name, text, "not a valid value");
  }
  report_unknown();
  if (kame_pool_get_verbose()) {
    char buf[128];
    say("kamepoolalloc " KP_STRINGIFY(KAME_POOL_VERSION_MAJOR) "." KP_STRINGIFY(KAME_POOL_VERSION_MINOR) "." KP_STRINGIFY(
        KAME_POOL_VERSION_PATCH) ": options in force\n");
    for (unsigned i = 0; i < KP_NUM_OPTIONS; i++) {
      int n = format_option(&options[i], buf, sizeof buf);
      if (n > 0) kp_os_write_error(buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    }
  }
}

/* KAME_POOL_SHOW_STATS: the statistics once the program is done (after
 * its own exit handlers). */
__attribute__((destructor)) static void stats_at_exit(void) {
  if (kame_pool_get_show_stats())
    kame_pool_print_stats(stderr, kame_pool_get_stats_json() ? KAME_POOL_STATS_JSON : KAME_POOL_STATS_TABLE);
}
