// The hit-path cost of a new+delete pair of a 64-byte object, for counting
// instructions with valgrind --tool=callgrind (bench/callgrind_pair.sh):
// 100 objects stay live while the loop creates, touches and deletes one
// more, through a new-expression and a sized delete, as compiled C++ does.
#include <cstdlib>

namespace {
struct Object {
  char bytes[64];
};
}  // namespace

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  Object *live[100];
  for (auto &p : live) p = new Object;
  for (long i = 0; i < n; i++) {
    Object *p = new Object;
    // The empty asm keeps the compiler from removing the pair.
    __asm__ volatile("" : : "r"(p) : "memory");
    p->bytes[0] = 1;
    delete p;
  }
  for (auto &p : live) delete p;
  return 0;
}
