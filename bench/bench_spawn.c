/* Runs one benchmark command and reports its peak resident set.
 *
 *   bench_spawn REPORT PRELOAD PROGRAM [ARGS...]
 *
 * Starts PROGRAM with LD_PRELOAD=PRELOAD (none when PRELOAD is empty),
 * waits for it with wait4 and writes "status=S maxrss_kib=K cpu_s=C" to
 * the file REPORT, where S is the raw wait status and C the user plus
 * system CPU time.  Exits with PROGRAM's exit
 * status, or 128 + the signal that killed it.
 *
 * Why a launcher: Linux carries a process's peak RSS across exec, so a
 * program started straight from the runner (a Python process of some
 * 20 MiB) would report at least the runner's size.  This launcher is
 * small, so the figure is the program's own (and that of the children it
 * waited for), give or take a few hundred KiB.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_spawn REPORT PRELOAD PROGRAM [ARGS...]\n");
    return 2;
  }
  const char *report = argv[1];
  const char *preload = argv[2];
  pid_t pid = fork();
  if (pid < 0) {
    perror("bench_spawn: fork");
    return 125;
  }
  if (pid == 0) {
    if (preload[0])
      setenv("LD_PRELOAD", preload, 1);
    else
      unsetenv("LD_PRELOAD");
    execvp(argv[3], argv + 3);
    fprintf(stderr, "bench_spawn: %s: %s\n", argv[3], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("bench_spawn: wait4");
      return 125;
    }
  }
  FILE *f = fopen(report, "w");
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
  if (!f || fprintf(f, "status=%d maxrss_kib=%ld cpu_s=%.4f\n", status, ru.ru_maxrss, cpu) < 0 ||
      fclose(f) != 0) {
    perror("bench_spawn: writing the report");
    return 125;
  }
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
