/* Options: every knob of the pool is one row of one table, settable by a
 * KAME_POOL_<NAME> environment variable read once at start-up and by the
 * matching kame_pool_set_* call.  Values parse the same way everywhere:
 * booleans as 1/true/on/yes or 0/false/off/no, sizes as a number with an
 * optional K, M, G or T suffix (powers of 1024, "KiB" etc. accepted).  A
 * malformed value is reported on stderr and ignored. */
#include "internal.h"

#include <string.h>

enum { KP_OPT_BOOL, KP_OPT_SIZE, KP_OPT_UINT };

static void set_max_bytes(uint64_t v) { kame_pool_set_max_bytes((size_t)v); }
static void set_cache_cap(uint64_t v) { kame_pool_set_large_cache_cap((size_t)v); }
static void set_cache_top(uint64_t v) { kame_pool_set_large_cache_top((size_t)v); }
static void set_drain_ms(uint64_t v) { kame_pool_set_lazy_drain_interval_ms((unsigned)v); }
static void set_exit_reclaim(uint64_t v) { kame_pool_set_thread_exit_reclaim((int)v); }
static void set_check(uint64_t v) { kame_pool_set_check_level((int)v); }
static void set_rt_default(uint64_t v) { kame_pool_set_realtime_default((int)v); }
static void set_rt_pending_cap(uint64_t v) { kame_pool_set_rt_pending_cap((size_t)v); }
static void set_rt_os_policy(uint64_t v) { kame_pool_set_rt_os_policy((int)v); }
static void set_thp_policy(uint64_t v) { (void)kame_pool_set_thp_policy((int)v); }
static void set_realtime_mode(uint64_t v) { kame_pool_set_realtime_mode((int)v); }

typedef struct kp_option {
  const char *name; /* the environment variable is KAME_POOL_<name> */
  int type;
  uint64_t max;
  void (*set)(uint64_t);
} kp_option;

static const kp_option options[] = {
    {"CHECK", KP_OPT_UINT, 2, set_check},
    {"MAX_BYTES", KP_OPT_SIZE, SIZE_MAX, set_max_bytes},
    {"LARGE_CACHE_CAP", KP_OPT_SIZE, SIZE_MAX, set_cache_cap},
    {"LARGE_CACHE_TOP", KP_OPT_SIZE, SIZE_MAX, set_cache_top},
    {"LAZY_DRAIN_MS", KP_OPT_UINT, 1000000, set_drain_ms},
    {"THREAD_EXIT_RECLAIM", KP_OPT_BOOL, 1, set_exit_reclaim},
    {"REALTIME_DEFAULT", KP_OPT_UINT, 1, set_rt_default},
    {"RT_PENDING_CAP", KP_OPT_SIZE, SIZE_MAX, set_rt_pending_cap},
    {"RT_OS_POLICY", KP_OPT_UINT, 3, set_rt_os_policy},
    {"THP_POLICY", KP_OPT_UINT, 2, set_thp_policy},
    {"REALTIME_MODE", KP_OPT_BOOL, 1, set_realtime_mode},
};

static bool word_is(const char *s, const char *const *words) {
  for (; *words; words++)
    if (strcasecmp(s, *words) == 0) return true;
  return false;
}

/* Parses `text` as the option's type; false when malformed. */
static bool parse(const kp_option *o, const char *text, uint64_t *out) {
  static const char *const yes[] = {"1", "true", "on", "yes", NULL};
  static const char *const no[] = {"0", "false", "off", "no", NULL};
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
    if (o->type != KP_OPT_SIZE) return false;
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

static void report_bad(const char *name, const char *text) {
  const char *parts[] = {"kamepoolalloc: ignoring KAME_POOL_", name, "=", text, ": not a valid value\n"};
  for (unsigned i = 0; i < sizeof parts / sizeof parts[0]; i++) kp_os_write_error(parts[i], strlen(parts[i]));
}

/* Applies the environment's KAME_POOL_* settings once, when the library
 * is loaded. */
__attribute__((constructor)) static void options_from_environment(void) {
  kp_os_init();
  char var[64] = "KAME_POOL_";
  for (unsigned i = 0; i < sizeof options / sizeof options[0]; i++) {
    const kp_option *o = &options[i];
    strcpy(var + 10, o->name);
    const char *text = kp_os_getenv(var);
    if (text == NULL) continue;
    uint64_t v;
    if (parse(o, text, &v)) o->set(v);
    else report_bad(o->name, text);
  }
}
