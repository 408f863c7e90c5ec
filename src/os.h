/* The OS interface: everything the pool asks of the operating system.
 * One file per OS implements it (os_linux.c, os_windows.c, os_macos.c);
 * nothing else in the core calls the OS directly or tests which OS it is
 * built for.  The policies built on these calls (aligned placement, what
 * to purge or unmap and when, the fallback to the system allocator) live
 * above this interface, in portable code.
 *
 * Memory comes in reservations: a range of address space, reserved in
 * one call and released (unmapped) by the portable code in one or more
 * calls (see has_partial_unmap).  Inside a reservation, pages are
 * committed (readable, writable, zero on first touch), decommitted (no
 * access, no backing), or purged (still accessible, backing returned, zero
 * on the next touch).
 *
 * Functions that can fail return 0 on success or an errno-style code, and
 * leave errno as it was: a failed unmap inside free() must not change
 * what the program sees in errno. */
#ifndef KP_OS_H
#define KP_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The few things that must be inline differ per OS and compiler: they
 * are spelled here, and only here. */
#if defined(_WIN32)
/* A PE image exports only what is marked for export. */
#define KP_HIDDEN
#define KAME_POOL_EXPORT __declspec(dllexport)
#else
#define KP_HIDDEN __attribute__((visibility("hidden")))
/* For exported names that kame_pool.h does not declare (the malloc family). */
#define KAME_POOL_EXPORT __attribute__((visibility("default")))
#endif

/* What the OS offers, filled once by kp_os_init. */
typedef struct kp_os_config {
  size_t page_size;         /* unit of commit, decommit, purge and locking */
  size_t alloc_granularity; /* alignment of a reservation's address */
  unsigned address_bits;    /* user addresses the OS hands out lie below 2^address_bits */
  bool has_partial_unmap;   /* part of a reservation can be unmapped */
  bool has_overcommit;      /* committed memory is backed only when touched */
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

/* ---- Memory ------------------------------------------------------------ */

/* Reserves `size` bytes (a page multiple) of address space, at `hint` if
 * that range is free (hint may be NULL: anywhere; a hint is never forced
 * over an existing mapping).  With `commit` the range is also committed.
 * *out is the address (aligned to alloc_granularity), NULL on failure. */
KP_HIDDEN int kp_os_reserve(void *hint, size_t size, bool commit, void **out);
/* Releases [addr, addr + size): a whole reservation, or with
 * has_partial_unmap any page-aligned part of one. */
KP_HIDDEN int kp_os_unmap(void *addr, size_t size);
/* Makes reserved pages readable and writable; untouched ones read zero. */
KP_HIDDEN int kp_os_commit(void *addr, size_t size);
/* Takes access and backing away; a later commit sees zero-filled pages. */
KP_HIDDEN int kp_os_decommit(void *addr, size_t size);
/* Returns the pages' backing to the OS but keeps them accessible; the
 * next touch sees zero-filled pages. */
KP_HIDDEN int kp_os_purge(void *addr, size_t size);
/* Resizes the mapping [addr, addr + old_size) to new_size keeping its
 * pages (none is copied): in place when `to` is NULL, which fails if the
 * range after it is taken; else moved onto [to, to + new_size), a range
 * the caller mapped, which it replaces, and addr's range is unmapped.
 * ENOTSUP where the OS cannot. */
KP_HIDDEN int kp_os_remap(void *addr, size_t old_size, size_t new_size, void *to);
/* Whether the page holding addr is mapped (by anyone).  Cold paths only:
 * it is a system call. */
KP_HIDDEN bool kp_os_is_mapped(const void *addr);

/* Reserved and committed: what every mapping of the pool is today. */
static inline int kp_os_map(void *hint, size_t size, void **out) { return kp_os_reserve(hint, size, true, out); }

/* Pins the pages in memory (no paging out, no fault on access once
 * touched), and undoes it.  Committed pages only. */
KP_HIDDEN int kp_os_lock(void *addr, size_t size);
KP_HIDDEN int kp_os_unlock(void *addr, size_t size);
/* Asks for (huge) or against (!huge) transparent huge pages on the range;
 * where the OS has no such advice, ENOTSUP. */
KP_HIDDEN int kp_os_advise_huge(void *addr, size_t size, bool huge);

/* ---- Threads ----------------------------------------------------------- */

/* Thread-local storage with the cheapest access the target has: a fixed
 * offset from the thread pointer (the pool is loaded at start-up or
 * linked in, never dlopen'ed late into a process whose static TLS block
 * is full).  The heap's slot, kp_tls_heap, is declared with it, so the
 * hit paths read it in one instruction. */
#if defined(_MSC_VER)
#define KP_THREAD_LOCAL __declspec(thread)
#elif defined(_WIN32)
/* MinGW-w64's gcc emulates TLS (a call per access); its native TLS is not
 * on by default. */
#define KP_THREAD_LOCAL __thread
#else
#define KP_THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
#endif

/* A number unique to each live thread, cheap to read (the thread pointer,
 * or on Windows the thread's TEB: one instruction on x86-64, x86 and
 * aarch64).  A thread that exits may see its number reused by a later
 * thread.  Its three low bits are clear (it is the address of an aligned
 * structure on every target): owner tokens set them; the resting token
 * flips the next one, whatever it is [CUR-2]. */
#if defined(_MSC_VER) && defined(_M_X64)
#include <intrin.h>
static inline uintptr_t kp_os_thread_id(void) { return (uintptr_t)__readgsqword(0x30); }
#elif defined(_MSC_VER) && defined(_M_IX86)
#include <intrin.h>
static inline uintptr_t kp_os_thread_id(void) { return (uintptr_t)__readfsdword(0x18); }
#elif defined(_WIN32) && defined(__x86_64__)
/* The TEB's own address, at gs:0x30 (what __readgsqword(0x30) reads; gcc
 * warns about that intrinsic's constant address). */
static inline uintptr_t kp_os_thread_id(void) {
  uintptr_t teb;
  __asm__("movq %%gs:0x30, %0" : "=r"(teb));
  return teb;
}
#elif defined(__APPLE__)
/* clang has no __builtin_thread_pointer for Darwin's x86-64, and the
 * register Darwin keeps the thread pointer in is not documented: the
 * documented pthread_self, a short call, is the thread's identity. */
#include <pthread.h>
static inline uintptr_t kp_os_thread_id(void) { return (uintptr_t)pthread_self(); }
#else
static inline uintptr_t kp_os_thread_id(void) { return (uintptr_t)__builtin_thread_pointer(); }
#endif

/* v ^ kp_os_thread_id(): where the thread pointer is a segment base, one
 * instruction that reads it in place. */
#if defined(__x86_64__) && defined(__LP64__) && defined(__linux__)
static inline uintptr_t kp_os_thread_id_xor(uintptr_t v) {
  __asm__("xorq %%fs:0, %0" : "+r"(v));
  return v;
}
#else
static inline uintptr_t kp_os_thread_id_xor(uintptr_t v) { return v ^ kp_os_thread_id(); }
#endif

/* Thread-exit hook: `init` registers the destructor once per process (it
 * may be called again, harmlessly); `arm` makes it run for the calling
 * thread with `arg` when the thread exits.  Both may allocate through the
 * pool, so callers arm only after the thread's heap is usable. */
KP_HIDDEN void kp_os_thread_exit_init(void (*destructor)(void *arg));
KP_HIDDEN void kp_os_thread_exit_arm(void *arg);

/* Registers `child` to run in the child after fork(). */
KP_HIDDEN void kp_os_atfork_child(void (*child)(void));

/* ---- Time, errors, environment ----------------------------------------- */

KP_HIDDEN uint64_t kp_os_now_ns(void); /* monotonic clock, to a few ms */
/* Gives the CPU to another runnable thread, if there is one. */
KP_HIDDEN void kp_os_yield(void);
KP_HIDDEN void kp_os_write_error(const char *text, size_t len);
KP_HIDDEN __attribute__((noreturn)) void kp_os_abort(void);
/* The environment variable's value, or NULL; usable before the C
 * library's allocator is. */
KP_HIDDEN const char *kp_os_getenv(const char *name);

#endif
