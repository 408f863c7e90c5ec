/* The part of the OS interface (os.h) that Linux and macOS share: POSIX
 * calls only.  Each OS's own file has the rest. */
#include "os_posix.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int kp_os_unmap(void *addr, size_t size) { KP_OS_CALL(munmap(addr, size)); }

int kp_os_commit(void *addr, size_t size) { KP_OS_CALL(mprotect(addr, size, PROT_READ | PROT_WRITE)); }

void kp_os_write_error(const char *text, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, text, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    text += n;
    len -= (size_t)n;
  }
  errno = saved;
}

void kp_os_abort(void) { abort(); }

void kp_os_atfork_child(void (*child)(void)) { pthread_atfork(NULL, NULL, child); }

const char *kp_os_getenv(const char *name) { return getenv(name); }

/* Thread exit: a pthread key's destructor. */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void (*_Atomic exit_destructor)(void *);

static void exit_key_create(void) { pthread_key_create(&exit_key, atomic_load(&exit_destructor)); }

void kp_os_thread_exit_init(void (*destructor)(void *arg)) {
  void (*expected)(void *) = NULL;
  atomic_compare_exchange_strong(&exit_destructor, &expected, destructor);
  pthread_once(&exit_once, exit_key_create);
}

void kp_os_thread_exit_arm(void *arg) { pthread_setspecific(exit_key, arg); }

void kp_os_yield(void) { sched_yield(); }
