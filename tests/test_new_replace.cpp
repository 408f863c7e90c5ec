// A program that replaces operator new(size_t) and operator delete(void *)
// itself, with blocks the pool could never free (a header in front of
// each), while the library provides the other forms.  The standard defines
// those in terms of these two (new[] calls new, sized and array delete call
// delete, the nothrow forms call the throwing ones), so the library's must
// reach the program's: every block must come back to the delete that
// matches its new.  The aligned forms, which the program leaves alone, stay
// the pool's.  Built three ways like test_new_delete: linked with the
// shared library, with the static one (where the program's definitions
// must win over the archive's without a duplicate-symbol error), and run
// under LD_PRELOAD.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "check.h"
#include "kame_pool.h"

// Leaving out the sized delete and freeing a pointer other than the one
// malloc returned are what this program is about.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wsized-deallocation"
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"
#endif

namespace {

constexpr uint64_t MAGIC = 0x6b616d656e657721;  // marks the program's own blocks
constexpr size_t HEADER = 16;

std::atomic<long> g_news, g_deletes;

void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

}  // namespace

void *operator new(std::size_t n) {
  void *raw = std::malloc(n + HEADER);
  if (raw == nullptr) throw std::bad_alloc();
  std::memcpy(raw, &MAGIC, sizeof MAGIC);
  g_news++;
  return static_cast<char *>(raw) + HEADER;
}

void operator delete(void *p) noexcept {
  if (p == nullptr) return;
  char *raw = static_cast<char *>(p) - HEADER;
  uint64_t tag;
  std::memcpy(&tag, raw, sizeof tag);
  // A block this operator new did not make: the library sent the program's
  // delete something of its own, or kept one of the program's.
  if (tag != MAGIC) std::abort();
  std::memset(raw, 0, sizeof tag);
  g_deletes++;
  std::free(raw);
}

namespace {

std::align_val_t al(size_t a) { return static_cast<std::align_val_t>(a); }

struct Item {
  long v[3];
};

// The pool's own usable size: linked, or found in the preloaded library.
size_t (*pool_usable_fn())(const void *) {
#ifdef KP_TEST_PRELOADED
  return reinterpret_cast<size_t (*)(const void *)>(dlsym(RTLD_DEFAULT, "kame_pool_malloc_usable_size"));
#else
  return kame_pool_malloc_usable_size;
#endif
}

size_t pool_usable(const void *p) {
  auto f = pool_usable_fn();
  return f ? f(p) : 0;
}

}  // namespace

int main() {
  CHECK("the library is present") { EXPECT(pool_usable_fn() != nullptr); }

  CHECK("new[] / delete[] reach the program's new and delete") {
    long n0 = g_news, d0 = g_deletes;
    int *a = new int[100];
    escape(a);
    EXPECT_INT_EQ(g_news - n0, 1);
    delete[] a;
    EXPECT_INT_EQ(g_deletes - d0, 1);
    char *b = static_cast<char *>(::operator new[](1000));
    escape(b);
    ::operator delete[](b, 1000);
    EXPECT_INT_EQ(g_news - n0, 2);
    EXPECT_INT_EQ(g_deletes - d0, 2);
  }

  CHECK("sized and nothrow forms reach the program's") {
    long n0 = g_news, d0 = g_deletes;
    Item *i = new Item;
    escape(i);
    delete i;  // sized delete
    void *p = ::operator new(64, std::nothrow);
    escape(p);
    ::operator delete(p, std::nothrow);
    void *q = ::operator new[](64, std::nothrow);
    escape(q);
    ::operator delete[](q, std::nothrow);
    void *r = ::operator new(48);
    escape(r);
    ::operator delete(r, size_t{48});
    EXPECT_INT_EQ(g_news - n0, 4);
    EXPECT_INT_EQ(g_deletes - d0, 4);
  }

  CHECK("standard containers balance through the program's operators") {
    long n0 = g_news, d0 = g_deletes;
    {
      std::map<int, std::string> m;
      std::vector<std::unique_ptr<Item>> v;
      for (int k = 0; k < 5000; k++) {
        m[k] = std::string(40 + k % 50, 'k');
        v.push_back(std::make_unique<Item>());
        if (k % 3 == 0) m.erase(k / 2);
      }
    }
    EXPECT(g_news - n0 > 10000);
    EXPECT_INT_EQ(g_news - n0, g_deletes - d0);
  }

  CHECK("the aligned forms, not replaced, are still the pool's") {
    long n0 = g_news;
    void *p = ::operator new(4096, al(4096));
    escape(p);
    EXPECT_ALIGNED(p, 4096);
    EXPECT_U_EQ(pool_usable(p), 4096);
    ::operator delete(p, 4096, al(4096));
    void *q = ::operator new[](100, al(64), std::nothrow);
    escape(q);
    EXPECT_ALIGNED(q, 64);
    ::operator delete[](q, al(64));
    EXPECT_INT_EQ(g_news - n0, 0);
  }
  return kp_check_summary();
}
