/* The malloc family for macOS programs, by dyld's interposing: the
 * library carries a table of {replacement, replacee} pairs in the section
 * __DATA,__interpose, and when it is loaded with DYLD_INSERT_LIBRARIES
 * dyld binds every other image's references to a replacee to the
 * replacement instead.  The pool's own image keeps the originals, which
 * is how sys_alloc_macos.c reaches the system allocator.
 * Compile-checked, never run (README.md, Platforms).
 *
 * Replaced: malloc, calloc, realloc, reallocf, free, valloc,
 * posix_memalign, aligned_alloc, and the size queries Swift, Objective-C
 * and Core Foundation make of any heap block, malloc_size and
 * malloc_good_size.  macOS has no malloc_usable_size or memalign.
 *
 * Zones: blocks a malloc zone made (before the pool was loaded, or for
 * code that calls malloc_zone_malloc) are foreign to the pool, and free,
 * realloc and malloc_size hand them to the system.  The other way round,
 * a block of the pool's may reach the public zone calls: malloc_zone_free
 * and malloc_zone_realloc are interposed to take the pool's blocks back,
 * and malloc_zone_from_ptr answers the default zone for them, so that code
 * which frees through the zone it finds frees through the interposed call.
 * Code that calls a zone's function pointers directly with a pool block
 * is not covered.
 *
 * operator new and delete are not replaced here: libc++'s call malloc and
 * free, which are interposed. */
#include "internal.h"

#include <malloc/malloc.h>
#include <stdlib.h>

typedef struct {
  const void *replacement;
  const void *replacee;
} kp_interpose_pair;

#define KP_INTERPOSE(replacement, replacee)                                                         \
  __attribute__((used, section("__DATA,__interpose"))) static const kp_interpose_pair              \
      kp_interpose_##replacee = {(const void *)&replacement, (const void *)&replacee}

static bool owned(const void *p) {
  if (p == NULL) return false;
  kp_ptr_info info;
  kp_lookup(p, &info);
  return info.kind != KP_PTR_FOREIGN;
}

static void *kp_mac_malloc(size_t size) { return kp_malloc_inline(size); }
static void kp_mac_free(void *p) { kp_free_inline(p); }
static void *kp_mac_calloc(size_t count, size_t size) { return kp_calloc(count, size); }
static void *kp_mac_realloc(void *p, size_t size) { return kp_realloc(p, size); }

/* reallocf(3): realloc that frees the block when it fails. */
static void *kp_mac_reallocf(void *p, size_t size) {
  void *q = kp_realloc(p, size);
  if (q == NULL && p != NULL && size != 0) kp_free(p);
  return q;
}

static void *kp_mac_valloc(size_t size) { return kp_memalign(kp_page_size(), size); }

static int kp_mac_posix_memalign(void **out, size_t align, size_t size) { return kp_posix_memalign(out, align, size); }

static void *kp_mac_aligned_alloc(size_t align, size_t size) {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return kp_memalign(align, size);
}

/* malloc_size(3) answers 0 for a pointer that is not the start of a heap
 * block, and callers use that to ask whether it is one: a pointer into
 * the pool's memory that is not a live block is answered 0 without the
 * misuse report malloc_usable_size would make. */
static size_t kp_mac_malloc_size(const void *p) {
  if (p == NULL) return 0;
  kp_ptr_info info;
  kp_lookup(p, &info);
  if (info.kind == KP_PTR_FOREIGN) return malloc_size(p);
  return info.kind == KP_PTR_INVALID ? 0 : info.usable;
}

/* The usable size the pool gives a request of `size` bytes: its class,
 * whole units, or its mapping's length.  Past the ceiling the system
 * allocator serves it, and its own rounding is not known here. */
static size_t kp_mac_malloc_good_size(size_t size) {
  if (size <= KP_SMALL_MAX) return kp_class_size[kp_size_class(size)];
  if (size <= KP_DEDICATED_MAX) return (size + KP_UNIT_SIZE - 1) & ~(KP_UNIT_SIZE - 1);
  if (size > SIZE_MAX - KP_MAP_GRANULE) return size;
  return kp_map_length(size);
}

static void kp_mac_malloc_zone_free(malloc_zone_t *zone, void *p) {
  if (owned(p)) kp_free(p);
  else malloc_zone_free(zone, p);
}

static void *kp_mac_malloc_zone_realloc(malloc_zone_t *zone, void *p, size_t size) {
  return owned(p) ? kp_realloc(p, size) : malloc_zone_realloc(zone, p, size);
}

static malloc_zone_t *kp_mac_malloc_zone_from_ptr(const void *p) {
  return owned(p) ? malloc_default_zone() : malloc_zone_from_ptr(p);
}

KP_INTERPOSE(kp_mac_malloc, malloc);
KP_INTERPOSE(kp_mac_free, free);
KP_INTERPOSE(kp_mac_calloc, calloc);
KP_INTERPOSE(kp_mac_realloc, realloc);
KP_INTERPOSE(kp_mac_reallocf, reallocf);
KP_INTERPOSE(kp_mac_valloc, valloc);
KP_INTERPOSE(kp_mac_posix_memalign, posix_memalign);
KP_INTERPOSE(kp_mac_aligned_alloc, aligned_alloc);
KP_INTERPOSE(kp_mac_malloc_size, malloc_size);
KP_INTERPOSE(kp_mac_malloc_good_size, malloc_good_size);
KP_INTERPOSE(kp_mac_malloc_zone_free, malloc_zone_free);
KP_INTERPOSE(kp_mac_malloc_zone_realloc, malloc_zone_realloc);
KP_INTERPOSE(kp_mac_malloc_zone_from_ptr, malloc_zone_from_ptr);
