/* The C side of operator new / delete (new_delete.cpp).  internal.h is C11
 * and not valid C++, so the C++ file reaches the pool through these few
 * functions, which cxx_bridge.c defines with the hit paths inlined.  Both
 * languages include this header; cxx_bridge.c also includes internal.h. */
#ifndef KP_CXX_BRIDGE_H
#define KP_CXX_BRIDGE_H

#include <stddef.h>

#define KP_CXX_HIDDEN __attribute__((visibility("hidden")))
/* Tells the C++ compiler these never throw, so noexcept callers can
 * tail-call them. */
#define KP_CXX_NOTHROW __attribute__((nothrow))
/* The same in the type, where C++ has it: a noexcept function pointer
 * may then hold the function. */
#ifdef __cplusplus
#define KP_CXX_NOEXCEPT noexcept
#else
#define KP_CXX_NOEXCEPT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Throwing allocation: the pool's block, or else what kp_cxx_oom returns
 * (it runs the new-handler loop and throws).  ALIGN is a power of two. */
KP_CXX_HIDDEN void *kp_cxx_new(size_t size);
KP_CXX_HIDDEN void *kp_cxx_new_aligned(size_t size, size_t align);

/* One attempt, no handler: the block or NULL.  ALIGN 0 means the default
 * alignment. */
KP_CXX_HIDDEN KP_CXX_NOTHROW void *kp_cxx_try_alloc(size_t size, size_t align);

/* Frees any block of the pool, whatever form allocated it, and passes a
 * foreign pointer to the system allocator, as free does. */
KP_CXX_HIDDEN KP_CXX_NOTHROW void kp_cxx_delete(void *p) KP_CXX_NOEXCEPT;

/* Defined in new_delete.cpp: the allocation failed once; runs the
 * standard's new-handler loop and returns a block or throws
 * std::bad_alloc. */
KP_CXX_HIDDEN void *kp_cxx_oom(size_t size, size_t align);

#ifdef __cplusplus
}
#endif

#endif
