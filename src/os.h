/* The OS primitives the pool needs.  One file per OS implements them
 * (os_linux.c); nothing else in the core calls the OS directly, and the
 * policies built on them (aligned placement, what to purge or unmap and
 * when) live above this interface, in portable code.
 *
 * Functions that can fail return 0 on success or an errno-style code, and
 * leave errno as it was: a failed unmap inside free() must not change
 * what the program sees in errno. */
#ifndef KP_OS_H
#define KP_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KP_HIDDEN __attribute__((visibility("hidden")))

typedef struct kp_os_config {
  size_t page_size;
  size_t map_granularity; /* alignment of a plain mapping's address */
  bool partial_unmap;     /* part of a mapping can be unmapped */
} kp_os_config;

/* Filled once, before the first mapping (kp_os_init is idempotent and
 * cheap to call again). */
extern KP_HIDDEN kp_os_config kp_os;
KP_HIDDEN void kp_os_init(void);
static inline size_t kp_page_size(void) {
  size_t page = __atomic_load_n(&kp_os.page_size, __ATOMIC_RELAXED);
  if (__builtin_expect(page == 0, 0)) {
    kp_os_init();
    page = kp_os.page_size;
  }
  return page;
}

/* Maps `size` bytes of zero-filled read-write memory, at `hint` if that
 * range is free (hint may be NULL: anywhere).  *out is the address. */
KP_HIDDEN int kp_os_map(void *hint, size_t size, void **out);
KP_HIDDEN int kp_os_unmap(void *addr, size_t size);
/* Returns the pages to the OS but keeps the range mapped; the next touch
 * sees zero-filled pages. */
KP_HIDDEN int kp_os_purge(void *addr, size_t size);
/* Whether the page holding addr is mapped (by anyone).  Cold paths only:
 * it is a system call. */
KP_HIDDEN bool kp_os_is_mapped(const void *addr);

/* A number unique to each live thread, cheap to read (the thread pointer:
 * one instruction on x86-64 and aarch64).  A thread that exits may see
 * its number reused by a later thread. */
static inline uintptr_t kp_os_thread_id(void) { return (uintptr_t)__builtin_thread_pointer(); }

/* Registers `child` to run in the child after fork(). */
KP_HIDDEN void kp_os_atfork_child(void (*child)(void));

KP_HIDDEN uint64_t kp_os_now_ns(void); /* monotonic clock */
KP_HIDDEN void kp_os_write_error(const char *text, size_t len);
KP_HIDDEN __attribute__((noreturn)) void kp_os_abort(void);
/* The environment variable's value, or NULL; usable before the C
 * library's allocator is. */
KP_HIDDEN const char *kp_os_getenv(const char *name);

/* Thread-exit hook: `init` registers the destructor once per process (it
 * may be called again, harmlessly); `arm` makes it run for the calling
 * thread with `arg` when the thread exits.  Both may allocate through the
 * pool, so callers arm only after the thread's heap is usable. */
KP_HIDDEN void kp_os_thread_exit_init(void (*destructor)(void *arg));
KP_HIDDEN void kp_os_thread_exit_arm(void *arg);

/* ---- Pinning and huge-page advice --------------------------------------
 * Used by the realtime layer (realtime.c) on the pool's own ranges.  Each
 * returns 0 or an errno-style code and leaves errno unchanged. */
KP_HIDDEN int kp_os_lock(void *addr, size_t size);   /* pin (and populate) the pages */
KP_HIDDEN int kp_os_unlock(void *addr, size_t size); /* undo kp_os_lock */
/* huge: ask for transparent huge pages on the range; otherwise ask the
 * kernel not to use them there. */
KP_HIDDEN int kp_os_advise_huge(void *addr, size_t size, bool huge);

#endif
