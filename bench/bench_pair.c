/* The hit-path cost of a malloc+free pair, for counting instructions with
 * valgrind --tool=callgrind (bench/callgrind_pair.sh): 100 blocks of 64 B
 * stay live while the loop allocates, touches and frees one more. */
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  void *live[100];
  for (int i = 0; i < 100; i++) live[i] = malloc(64);
  for (long i = 0; i < n; i++) {
    void *volatile p = malloc(64);
    *(char *)p = 1;
    free(p);
  }
  for (int i = 0; i < 100; i++) free(live[i]);
  return 0;
}
