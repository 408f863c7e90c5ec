/* A sampling profiler to preload beside an allocator, for machines
 * without hardware counters: a SIGPROF timer interrupts whichever thread
 * is using CPU, and the handler records the interrupted instruction.  At
 * exit each sample is written as "MODULE OFFSET" (the module that holds
 * the address, and the address less its load base), one per line, to
 * $SAMPLER_OUT (default sampler.out); bench/profile.sh names the
 * functions.  Time in the kernel (a page fault, a system call) is charged
 * to the instruction that entered it.  The timer's resolution is the
 * kernel's tick, so a useful profile needs a run of some seconds.
 *
 *   LD_PRELOAD="lib.so libbench_sampler.so" SAMPLER_OUT=f program ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

#define MAX_SAMPLES (1u << 20)

static void *samples[MAX_SAMPLES];
static atomic_uint taken;

static void *interrupted_pc(const ucontext_t *uc) {
#if defined(__x86_64__)
  return (void *)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
  return (void *)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
  return (void *)uc->uc_mcontext.pc;
#else
  (void)uc;
  return NULL;
#endif
}

static void on_prof(int sig, siginfo_t *info, void *context) {
  (void)sig;
  (void)info;
  unsigned i = atomic_fetch_add_explicit(&taken, 1, memory_order_relaxed);
  if (i < MAX_SAMPLES) samples[i] = interrupted_pc(context);
}

__attribute__((constructor)) static void sampler_start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, NULL) != 0) return;
  struct itimerval every = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_PROF, &every, NULL);
}

__attribute__((destructor)) static void sampler_stop(void) {
  struct itimerval off;
  memset(&off, 0, sizeof off);
  setitimer(ITIMER_PROF, &off, NULL);
  const char *path = getenv("SAMPLER_OUT");
  FILE *out = fopen(path != NULL ? path : "sampler.out", "w");
  if (out == NULL) return;
  unsigned n = atomic_load(&taken);
  if (n > MAX_SAMPLES) n = MAX_SAMPLES;
  for (unsigned i = 0; i < n; i++) {
    Dl_info where;
    if (samples[i] != NULL && dladdr(samples[i], &where) != 0 && where.dli_fname != NULL)
      fprintf(out, "%s %#lx\n", where.dli_fname,
              (unsigned long)((uintptr_t)samples[i] - (uintptr_t)where.dli_fbase));
    else
      fprintf(out, "? %p\n", samples[i]);
  }
  fclose(out);
}
