/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  The clocks of clock_gettime(3), macOS 10.12
 * and later, with Darwin's values. */
#ifndef KP_DARWIN_TIME_H
#define KP_DARWIN_TIME_H
#include <kp_darwin_decls.h>
struct timespec {
  time_t tv_sec;
  long tv_nsec;
};
typedef enum {
  _CLOCK_REALTIME = 0,
  _CLOCK_MONOTONIC = 6,
  _CLOCK_MONOTONIC_RAW = 4,
  _CLOCK_MONOTONIC_RAW_APPROX = 5,
  _CLOCK_UPTIME_RAW = 8,
  _CLOCK_UPTIME_RAW_APPROX = 9,
} clockid_t;
#define CLOCK_REALTIME _CLOCK_REALTIME
#define CLOCK_MONOTONIC _CLOCK_MONOTONIC
#define CLOCK_UPTIME_RAW _CLOCK_UPTIME_RAW
#define CLOCK_UPTIME_RAW_APPROX _CLOCK_UPTIME_RAW_APPROX
int clock_gettime(clockid_t clock_id, struct timespec *tp);
uint64_t clock_gettime_nsec_np(clockid_t clock_id);
int nanosleep(const struct timespec *rqtp, struct timespec *rmtp);
#endif
