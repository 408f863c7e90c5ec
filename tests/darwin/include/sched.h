/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md). */
#ifndef KP_DARWIN_SCHED_H
#define KP_DARWIN_SCHED_H
int sched_yield(void);
#endif
