/* The allocation entry points: the kame_pool_* C API, and the kp_*
 * functions the malloc-family override forwards to. */
#include "internal.h"

#include <string.h>

static KP_NOINLINE void *enomem(void) {
  errno = ENOMEM;
  return NULL;
}

/* ---- malloc / free ------------------------------------------------------ */

void *kp_malloc(size_t size) { return kp_malloc_inline(size); }

void kp_free(void *p) { kp_free_inline(p); }

void *kp_calloc(size_t count, size_t size) {
  size_t bytes;
  if (unlikely(__builtin_mul_overflow(count, size, &bytes) || bytes > KP_MAX_REQUEST)) return enomem();
  if (bytes <= KP_SMALL_MAX) {
    void *p = kp_malloc_small(bytes);
    return p ? memset(p, 0, bytes) : NULL;
  }
  void *p = kp_alloc_big(bytes, 0, true);
  return p ? p : kp_fallback_alloc(bytes, 0, true);
}

/* ---- Aligned allocation ------------------------------------------------- */

static void *alloc_aligned(size_t align, size_t size) {
  /* An alignment no mapping could satisfy fails here, before any fallback. */
  if (unlikely(size > KP_MAX_REQUEST || align > KP_MAX_REQUEST / 2 || size + align > KP_MAX_REQUEST))
    return enomem();
  if (align <= KP_MIN_ALIGN) return kp_malloc(size);
  if (size == 0) size = 1; /* a unique block like malloc(0), in every tier */
  int cls = kp_size_class_aligned(size, align);
  if (cls >= 0) {
    /* Past the ceiling the slot comes from the system allocator instead. */
    return kp_fallback_realign(kp_malloc_small(kp_class_size[cls]), size, align);
  }
  void *p = kp_alloc_big(size, align, false);
  return p ? p : kp_fallback_alloc(size, align, false);
}

/* memalign: a non-power-of-two alignment is rounded up to one, as glibc
 * does. */
void *kp_memalign(size_t align, size_t size) {
  if (align & (align - 1)) {
    if (align > SIZE_MAX / 2 + 1) { /* no power of two above it */
      errno = EINVAL;
      return NULL;
    }
    align = (size_t)1 << (sizeof(size_t) * 8 - (size_t)__builtin_clzl(align));
  }
  return alloc_aligned(align ? align : 1, size);
}

/* As glibc: EINVAL for a bad alignment, ENOMEM (also left in errno) when
 * memory cannot be had. */
int kp_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
  void *p = alloc_aligned(align, size);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

/* ---- Sizes and realloc -------------------------------------------------- */

size_t kp_usable_size(const void *p) {
  if (p == NULL) return 0;
  kp_ptr_info info;
  kp_lookup(p, &info);
  if (info.kind == KP_PTR_FOREIGN) return kp_sys_usable_size((void *)p);
  if (info.kind == KP_PTR_INVALID) {
    kp_invalid_pointer("malloc_usable_size", p, info.problem);
    return 0;
  }
  return info.usable;
}

void *kp_realloc(void *p, size_t size) {
  if (p == NULL) return kp_malloc(size);
  kp_ptr_info info;
  kp_lookup(p, &info);
  if (info.kind == KP_PTR_INVALID) {
    kp_invalid_pointer("realloc", p, info.problem);
    errno = EINVAL;
    return NULL;
  }
  if (size == 0) {
    kp_free(p);
    return NULL;
  }
  if (unlikely(size > KP_MAX_REQUEST)) return enomem();
  if (info.kind == KP_PTR_FOREIGN) return kp_sys_realloc(p, size);
  size_t usable = info.usable;
  /* In place when it fits and would not strand more than half the block
   * (so a block never shrinks in place into a smaller tier). */
  if (size <= usable && (size >= usable / 2 || usable <= 64)) return p;
  if (info.kind == KP_PTR_MAPPING && size > usable) {
    kp_track_free(p);
    void *q = kp_mapping_grow(p, info.entry, size);
    kp_track_alloc(q ? q : p, false);
    kp_track_reuse(q ? q : p, usable); /* the contents carry over */
    if (q != NULL) return q;
  }
  if (info.kind == KP_PTR_MAPPING && size < usable) {
    kp_track_free(p);
    bool shrunk = kp_mapping_shrink(p, info.entry, size);
    kp_track_alloc(p, false);
    kp_track_reuse(p, shrunk ? size : usable);
    if (shrunk) return p;
  }
  void *q = kp_malloc(size);
  if (q == NULL) return NULL;
  memcpy(q, p, size < usable ? size : usable);
  kp_free(p);
  return q;
}

/* ---- The public C API ---------------------------------------------------- */

void *kame_pool_malloc(size_t size) { return kp_malloc_inline(size); }
void *kame_pool_calloc(size_t count, size_t size) { return kp_calloc(count, size); }
void *kame_pool_realloc(void *p, size_t size) { return kp_realloc(p, size); }
void kame_pool_free(void *p) { kp_free_inline(p); }
size_t kame_pool_malloc_usable_size(const void *p) { return kp_usable_size(p); }
int kame_pool_posix_memalign(void **out, size_t align, size_t size) { return kp_posix_memalign(out, align, size); }

void *kame_pool_aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return alloc_aligned(align, size);
}
