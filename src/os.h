/* The OS primitives the pool needs.  One file per OS implements them
 * (os_linux.c); nothing else in the core calls the OS directly. */
#ifndef KP_OS_H
#define KP_OS_H

#include <stddef.h>

#define KP_HIDDEN __attribute__((visibility("hidden")))

/* Anonymous read-write memory, zero-filled, or NULL (errno left as the OS
 * set it).  `align` must be a power of two multiple of the page size. */
KP_HIDDEN void *kp_os_map(size_t size);
KP_HIDDEN void *kp_os_map_aligned(size_t size, size_t align);
KP_HIDDEN void kp_os_unmap(void *addr, size_t size);
/* Returns the pages to the OS but keeps the range mapped; the next touch
 * sees zero-filled pages. */
KP_HIDDEN void kp_os_purge(void *addr, size_t size);
KP_HIDDEN size_t kp_os_page_size(void);

/* Thread-exit hook: `init` registers the destructor once per process (it
 * may be called again, harmlessly); `arm` makes it run for the calling
 * thread with `arg` when the thread exits.  Both may allocate through the
 * pool, so callers arm only after the thread's heap is usable. */
KP_HIDDEN void kp_os_thread_exit_init(void (*destructor)(void *arg));
KP_HIDDEN void kp_os_thread_exit_arm(void *arg);

#endif
