// A C++ program that allocates only through new and the standard
// containers and names no allocator function itself: linked with the
// static library, it gets the pool only if the link pulls the override in
// by itself.  Prints "pool" or "system" as uses_strdup.c does.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

static bool page_aligned(const void *p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 4095) == 0;
}

int main() {
  const int strings = 8;
  std::vector<std::string> held;
  int aligned = 0;
  for (int i = 0; i < strings; i++) {
    held.emplace_back(4095, 'k'); // 4095 characters and the NUL: 4 KiB
    aligned += page_aligned(held.back().data());
  }
  auto bytes = std::make_unique<std::vector<char>>(4096);
  aligned += page_aligned(bytes->data());
  const int blocks = strings + 1;
  std::printf("%s (%d of %d blocks page-aligned)\n", aligned == blocks ? "pool" : "system",
              aligned, blocks);
  return 0;
}
