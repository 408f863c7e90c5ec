/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  Darwin's pthread types are opaque structs
 * with a signature word; pthread_key_t is an unsigned long. */
#ifndef KP_DARWIN_PTHREAD_H
#define KP_DARWIN_PTHREAD_H
#include <kp_darwin_decls.h>
typedef struct _opaque_pthread_t *pthread_t;
typedef unsigned long pthread_key_t;
typedef struct {
  long __sig;
  char __opaque[8];
} pthread_once_t;
#define PTHREAD_ONCE_INIT {0x30B1BCBA, {0}}
pthread_t pthread_self(void);
int pthread_key_create(pthread_key_t *key, void (*destructor)(void *));
int pthread_setspecific(pthread_key_t key, const void *value);
void *pthread_getspecific(pthread_key_t key);
int pthread_once(pthread_once_t *once_control, void (*init_routine)(void));
int pthread_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
#endif
