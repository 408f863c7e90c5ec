/* The bucket tier's allocation slow path: refill the current chunk, or
 * find, adopt or claim another one. */
#include "internal.h"

/* Slots are threaded onto the free list this many bytes at a time, so a
 * fresh chunk's pages are touched only as they are used. */
#define KP_CARVE_BYTES 16384u

void kp_chunk_init_bucket(kp_chunk *c, kp_heap *h, unsigned cls) {
  c->kind = KP_CHUNK_BUCKET;
  c->cls = (uint8_t)cls;
  c->slot_size = kp_class_size[cls];
  c->capacity = (uint32_t)(((size_t)c->units << KP_UNIT_SHIFT) / c->slot_size);
  c->carved = 0;
  c->used = 0;
  c->free = c->local_free = NULL;
  c->next = c->prev = NULL;
  c->list = KP_LIST_NONE;
  kp_store_relaxed(&c->remote_free, NULL);
  kp_store_relaxed(&c->owner, h);
}

static bool chunk_carve(kp_chunk *c) {
  uint32_t n = c->capacity - c->carved;
  if (n == 0) return false;
  uint32_t batch = KP_CARVE_BYTES / c->slot_size;
  if (batch == 0) batch = 1;
  if (n > batch) n = batch;
  kp_region *r = kp_region_of(c);
  char *first = kp_chunk_start(r, c) + (size_t)c->carved * c->slot_size;
  char *p = first;
  for (uint32_t i = 1; i < n; i++, p += c->slot_size) ((kp_block *)p)->next = (kp_block *)(p + c->slot_size);
  ((kp_block *)p)->next = c->free;
  c->free = (kp_block *)first;
  c->carved += n;
  return true;
}

/* Puts slots on c->free if the chunk has any to give. */
static bool chunk_refill(kp_chunk *c) {
  if (c->local_free != NULL) {
    c->free = c->local_free;
    c->local_free = NULL;
    return true;
  }
  if (kp_remote_collect(c) != 0) return true;
  return chunk_carve(c);
}

/* Remote frees reached full chunks: take them back, release what emptied. */
static void heap_collect_full(kp_heap *h, unsigned cls) {
  atomic_store_explicit(&h->remote_hint[cls], 0, memory_order_seq_cst);
  /* The clear must precede the looks at the remote lists below. */
  atomic_thread_fence(memory_order_seq_cst);
  for (kp_chunk *next, *c = h->full[cls]; c != NULL; c = next) {
    next = c->next;
    if (kp_remote_collect(c) == 0) continue;
    kp_heap_list_remove(h, c);
    if (c->used == 0) kp_chunk_release(c);
    else kp_heap_list_push(h, c, KP_LIST_AVAIL);
  }
}

void *kp_malloc_small_slow(kp_heap *h, size_t size) {
  unsigned cls = kp_size_class(size);
  if (unlikely(h == &kp_empty_heap)) {
    h = kp_heap_for_thread();
    if (h == NULL) return kp_fallback_alloc(size, 0, false);
  }
  for (;;) {
    kp_chunk *c = h->current[cls];
    if (c != &kp_empty_chunk) {
      if (c->free != NULL || chunk_refill(c)) {
        kp_block *b = c->free;
        c->free = b->next;
        c->used++;
        return b;
      }
      kp_heap_list_push(h, c, KP_LIST_FULL);
      h->current[cls] = &kp_empty_chunk;
    }
    if (kp_load_relaxed(&h->remote_hint[cls])) heap_collect_full(h, cls);
    c = h->avail[cls];
    if (c == NULL && kp_heap_adopt_orphan(h, cls)) c = h->avail[cls];
    if (c != NULL) {
      kp_heap_list_remove(h, c);
      h->current[cls] = c;
      continue;
    }
    bool zeroed;
    c = kp_chunk_claim(h, kp_class_units[cls], &zeroed);
    if (c == NULL) return kp_fallback_alloc(size, 0, false);
    kp_chunk_init_bucket(c, h, cls);
    h->current[cls] = c;
  }
}
