/* A C program that allocates only inside the C library (strdup) and
 * names no allocator function itself: linked with the static library, it
 * gets the pool only if the link pulls the override in by itself.
 *
 * It prints "pool" when every 4 KiB block strdup returned is page-aligned,
 * as the pool's exact power-of-two slots are and glibc's blocks, which sit
 * 16 bytes past a chunk header, are not; "system" otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BLOCKS 8

int main(void) {
  static char text[4096]; /* 4095 characters and the NUL: a 4 KiB request */
  memset(text, 'k', sizeof text - 1);
  int aligned = 0;
  for (int i = 0; i < BLOCKS; i++) {
    char *copy = strdup(text);
    if (copy == NULL || strcmp(copy, text) != 0) {
      printf("strdup failed\n");
      return 1;
    }
    aligned += ((uintptr_t)copy & 4095) == 0;
  }
  printf("%s (%d of %d blocks page-aligned)\n", aligned == BLOCKS ? "pool" : "system", aligned,
         BLOCKS);
  return 0;
}
