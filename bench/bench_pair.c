/* The hit-path cost of a malloc+free pair, for counting instructions with
 * valgrind --tool=callgrind (bench/callgrind_pair.sh): 100 blocks of the
 * size stay live while the loop allocates, touches and frees one more.
 * Usage: bench_pair [PAIRS [SIZE]] (SIZE defaults to 64 bytes). */
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
  void *live[100];
  for (int i = 0; i < 100; i++) live[i] = malloc(size);
  for (long i = 0; i < n; i++) {
    void *volatile p = malloc(size);
    *(char *)p = 1;
    free(p);
  }
  for (int i = 0; i < 100; i++) free(live[i]);
  return 0;
}
