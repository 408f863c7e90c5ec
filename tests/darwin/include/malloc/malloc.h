/* Stand-in for the macOS SDK, for a syntax and type check only (see
 * tests/darwin/README.md).  The zone functions of malloc_zone_malloc(3)
 * and malloc_size(3); the zone is opaque here (the pool never looks
 * inside one). */
#ifndef KP_DARWIN_MALLOC_MALLOC_H
#define KP_DARWIN_MALLOC_MALLOC_H
#include <kp_darwin_decls.h>
typedef struct _malloc_zone_t malloc_zone_t;
malloc_zone_t *malloc_default_zone(void);
malloc_zone_t *malloc_zone_from_ptr(const void *ptr);
void *malloc_zone_malloc(malloc_zone_t *zone, size_t size);
void *malloc_zone_calloc(malloc_zone_t *zone, size_t num_items, size_t size);
void *malloc_zone_realloc(malloc_zone_t *zone, void *ptr, size_t size);
void *malloc_zone_memalign(malloc_zone_t *zone, size_t alignment, size_t size);
void malloc_zone_free(malloc_zone_t *zone, void *ptr);
size_t malloc_size(const void *ptr);
size_t malloc_good_size(size_t size);
#endif
