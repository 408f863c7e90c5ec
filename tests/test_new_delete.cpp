// Conformance of the library's operator new and operator delete: every
// replaceable form, checked for alignment, usable size and content; each
// block freed by every delete form the standard allows for it, and by the
// ones it does not (the pool frees any block from any form); the
// definitions in force are the library's; sizes passed to sized delete are
// not trusted.  Built only with the override, in three ways: linked with
// the shared library, linked with the static one (KP_TEST_STATIC), and not
// linked at all, run under LD_PRELOAD (KP_TEST_PRELOADED).
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <set>
#include <vector>

#include "check.h"
#include "kame_pool.h"

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

// The pool's C API: linked, or found in the preloaded library.
struct Pool {
  size_t (*usable)(const void *);
  size_t (*reserved)();
  void (*trim)();
};

Pool pool_api() {
#ifdef KP_TEST_PRELOADED
  Pool p{};
  p.usable = reinterpret_cast<size_t (*)(const void *)>(dlsym(RTLD_DEFAULT, "kame_pool_malloc_usable_size"));
  p.reserved = reinterpret_cast<size_t (*)()>(dlsym(RTLD_DEFAULT, "kame_pool_reserved_bytes"));
  p.trim = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "kame_pool_trim"));
  return p;
#else
  return Pool{kame_pool_malloc_usable_size, kame_pool_reserved_bytes, kame_pool_trim};
#endif
}

Pool pool;

// The compiler may drop a new/delete pair whose memory does not escape.
void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

// ---- The forms ------------------------------------------------------------

enum : unsigned { ARRAY = 1, ALIGNED = 2, NOTHROW = 4, SIZED = 8 };

struct NewForm {
  const char *name;
  unsigned kind;
  void *(*call)(size_t size, size_t align);
};

std::align_val_t al(size_t a) { return static_cast<std::align_val_t>(a); }

const NewForm new_forms[] = {
    {"new", 0, [](size_t n, size_t) { return ::operator new(n); }},
    {"new[]", ARRAY, [](size_t n, size_t) { return ::operator new[](n); }},
    {"new nothrow", NOTHROW, [](size_t n, size_t) { return ::operator new(n, std::nothrow); }},
    {"new[] nothrow", ARRAY | NOTHROW, [](size_t n, size_t) { return ::operator new[](n, std::nothrow); }},
    {"new align", ALIGNED, [](size_t n, size_t a) { return ::operator new(n, al(a)); }},
    {"new[] align", ARRAY | ALIGNED, [](size_t n, size_t a) { return ::operator new[](n, al(a)); }},
    {"new align nothrow", ALIGNED | NOTHROW,
     [](size_t n, size_t a) { return ::operator new(n, al(a), std::nothrow); }},
    {"new[] align nothrow", ARRAY | ALIGNED | NOTHROW,
     [](size_t n, size_t a) { return ::operator new[](n, al(a), std::nothrow); }},
};

struct DeleteForm {
  const char *name;
  unsigned kind;
  void (*call)(void *p, size_t size, size_t align);
};

const DeleteForm delete_forms[] = {
    {"delete", 0, [](void *p, size_t, size_t) { ::operator delete(p); }},
    {"delete sized", SIZED, [](void *p, size_t n, size_t) { ::operator delete(p, n); }},
    {"delete nothrow", NOTHROW, [](void *p, size_t, size_t) { ::operator delete(p, std::nothrow); }},
    {"delete[]", ARRAY, [](void *p, size_t, size_t) { ::operator delete[](p); }},
    {"delete[] sized", ARRAY | SIZED, [](void *p, size_t n, size_t) { ::operator delete[](p, n); }},
    {"delete[] nothrow", ARRAY | NOTHROW,
     [](void *p, size_t, size_t) { ::operator delete[](p, std::nothrow); }},
    {"delete align", ALIGNED, [](void *p, size_t, size_t a) { ::operator delete(p, al(a)); }},
    {"delete sized align", SIZED | ALIGNED,
     [](void *p, size_t n, size_t a) { ::operator delete(p, n, al(a)); }},
    {"delete align nothrow", ALIGNED | NOTHROW,
     [](void *p, size_t, size_t a) { ::operator delete(p, al(a), std::nothrow); }},
    {"delete[] align", ARRAY | ALIGNED, [](void *p, size_t, size_t a) { ::operator delete[](p, al(a)); }},
    {"delete[] sized align", ARRAY | SIZED | ALIGNED,
     [](void *p, size_t n, size_t a) { ::operator delete[](p, n, al(a)); }},
    {"delete[] align nothrow", ARRAY | ALIGNED | NOTHROW,
     [](void *p, size_t, size_t a) { ::operator delete[](p, al(a), std::nothrow); }},
};

// The standard pairs a delete with a new of the same array-ness and
// alignment-ness; sized and nothrow are free either way.
bool standard_pair(const NewForm &n, const DeleteForm &d) {
  return (n.kind & (ARRAY | ALIGNED)) == (d.kind & (ARRAY | ALIGNED));
}

const size_t sizes[] = {0,      1,       7,        8,       15,      16,       17,      24,
                        63,     64,      100,      128,     1000,    KiB,      4 * KiB, 4 * KiB + 1,
                        32 * KiB, 32 * KiB + 1, 256 * KiB, MiB,  5 * MiB, 40 * MiB};
const size_t aligns[] = {1, 8, 16, 32, 64, 128, 256, 4 * KiB, 64 * KiB, 256 * KiB, MiB, 64 * MiB};

size_t default_align(size_t n) {
  if (n >= __STDCPP_DEFAULT_NEW_ALIGNMENT__) return __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  size_t a = 1;  // the largest power of two an object of n bytes may need
  while (a * 2 <= n) a *= 2;
  return a;
}

// Fills and checks at most this much of a block: the ends of a huge block
// are what a wrong mapping size would break.
void fill(void *p, size_t n, unsigned seed) {
  if (n <= 2 * MiB) return kp_fill_pat(p, n, seed);
  kp_fill_pat(p, MiB, seed);
  kp_fill_pat(static_cast<char *>(p) + n - MiB, MiB, seed + 1);
}
bool intact(const void *p, size_t n, unsigned seed) {
  if (n <= 2 * MiB) return kp_pat_mismatch(p, n, seed) == n;
  return kp_pat_mismatch(p, MiB, seed) == MiB &&
         kp_pat_mismatch(static_cast<const char *>(p) + n - MiB, MiB, seed + 1) == MiB;
}

// ---- Checks ---------------------------------------------------------------

void check_symbols() {
  // Where the operators a call binds to live: our library (linked or
  // preloaded), or the executable itself when linked statically.
  Dl_info self{}, lib{};
  dladdr(reinterpret_cast<void *>(&pool_api), &self);
  const struct {
    const char *name;
    void *addr;
  } forms[] = {
      {"new", reinterpret_cast<void *>(static_cast<void *(*)(size_t)>(&::operator new))},
      {"new[]", reinterpret_cast<void *>(static_cast<void *(*)(size_t)>(&::operator new[]))},
      {"new align", reinterpret_cast<void *>(static_cast<void *(*)(size_t, std::align_val_t)>(&::operator new))},
      {"new nothrow",
       reinterpret_cast<void *>(static_cast<void *(*)(size_t, const std::nothrow_t &) noexcept>(&::operator new))},
      {"delete", reinterpret_cast<void *>(static_cast<void (*)(void *) noexcept>(&::operator delete))},
      {"delete sized", reinterpret_cast<void *>(static_cast<void (*)(void *, size_t) noexcept>(&::operator delete))},
      {"delete[] sized align",
       reinterpret_cast<void *>(
           static_cast<void (*)(void *, size_t, std::align_val_t) noexcept>(&::operator delete[]))},
  };
  for (const auto &f : forms) {
    CHECK("operator %s is the library's", f.name) {
      if (!EXPECTF(dladdr(f.addr, &lib) != 0, "dladdr found no object for %p", f.addr)) continue;
#ifdef KP_TEST_STATIC
      EXPECTF(lib.dli_fbase == self.dli_fbase, "defined in %s, not in the executable", lib.dli_fname);
#else
      EXPECTF(std::strstr(lib.dli_fname, "libkamepoolalloc") != nullptr, "defined in %s", lib.dli_fname);
#endif
    }
  }
}

void check_new_forms() {
  for (const NewForm &form : new_forms) {
    unsigned seed = 0;
    for (size_t n : sizes) {
      for (size_t a : aligns) {
        if (!(form.kind & ALIGNED) && a != aligns[0]) break;  // one pass for the plain forms
        CHECK("%s(%zu%s%zu): aligned, usable, content", form.name, n, form.kind & ALIGNED ? ", align " : "",
              form.kind & ALIGNED ? a : size_t{0}) {
          void *p = form.call(n, a);
          if (!EXPECT_NOT_NULL(p)) continue;
          escape(p);
          size_t want = form.kind & ALIGNED ? a : default_align(n);
          EXPECT_ALIGNED(p, want);
          EXPECT_U_GE(pool.usable(p), n);
          fill(p, n, ++seed);
          EXPECTF(intact(p, n, seed), "content of a %zu-byte block changed", n);
          // The same form's own delete; the other forms are checked below.
          if (form.kind & ALIGNED) {
            if (form.kind & ARRAY) ::operator delete[](p, al(a));
            else ::operator delete(p, al(a));
          } else {
            if (form.kind & ARRAY) ::operator delete[](p);
            else ::operator delete(p);
          }
        }
      }
    }
  }
}

// Blocks of the pool's shapes, which the C library's allocator would not
// produce: the direct path reaches the pool.
void check_pool_shape() {
  CHECK("new(4096) is an exact page-aligned slot") {
    void *p = ::operator new(4096);
    escape(p);
    EXPECT_ALIGNED(p, 4096);
    EXPECT_U_EQ(pool.usable(p), 4096);
    ::operator delete(p, 4096);
  }
  CHECK("new(100, align 64) takes a 64-aligned class, not padding") {
    void *p = ::operator new(100, al(64));
    escape(p);
    EXPECT_ALIGNED(p, 64);
    EXPECT_U_GE(pool.usable(p), 100);
    EXPECT_U_LE(pool.usable(p), 192);
    ::operator delete(p, 100, al(64));
  }
  CHECK("new(100 MiB) is a mapping of the pool, unmapped at delete (above the cache's top)") {
    size_t before = pool.reserved();
    void *p = ::operator new(100 * MiB);
    escape(p);
    EXPECT_U_GE(pool.reserved(), before + 100 * MiB);
    ::operator delete(p, 100 * MiB);
    EXPECT_U_LE(pool.reserved(), before);
  }
}

// Frees through D, many times over: if D did not free, the pool would grow
// by ROUNDS blocks.
void check_delete_form(const NewForm &nf, const DeleteForm &df, size_t n, size_t a, int rounds) {
  CHECK("%s(%zu%s) freed by %s%s", nf.name, n, nf.kind & ALIGNED ? ", align" : "", df.name,
        standard_pair(nf, df) ? "" : " (beyond the standard)") {
    size_t before = pool.reserved();
    bool ok = true;
    for (int i = 0; i < rounds && ok; i++) {
      void *p = nf.call(n, a);
      ok = EXPECT_NOT_NULL(p);
      if (!ok) break;
      static_cast<char *>(p)[0] = static_cast<char>(i);
      static_cast<char *>(p)[n - 1] = static_cast<char>(i);
      escape(p);
      df.call(p, n, a);
    }
    // Leaked, the rounds would hold rounds * n bytes (64 MiB or more).  A
    // freed block may stay in the recycle cache (reserved) until a trim.
    pool.trim();
    EXPECTF(pool.reserved() <= before + 32 * MiB, "the pool grew from %zu to %zu bytes", before,
            pool.reserved());
  }
}

void check_delete_forms() {
  for (const NewForm &nf : new_forms) {
    for (const DeleteForm &df : delete_forms) {
      size_t a = nf.kind & ALIGNED ? 64 : 16;
      check_delete_form(nf, df, 4 * KiB, a, 32768);  // bucket slots: 128 MiB if leaked
      check_delete_form(nf, df, MiB, a, 128);        // dedicated chunks
      check_delete_form(nf, df, 40 * MiB, a, 4);     // huge mappings
      if (nf.kind & ALIGNED) check_delete_form(nf, df, 64, 8 * KiB, 16384);  // alignment above the size
    }
  }
}

struct alignas(128) Wide {
  unsigned char bytes[200];
};
struct Small {
  int id;
  Small() : id(7) {}
};

void check_expressions() {
  CHECK("new/delete expressions of an ordinary class") {
    std::vector<Small *> v;
    for (int i = 0; i < 1000; i++) v.push_back(new Small);
    for (Small *s : v) EXPECT_INT_EQ(s->id, 7);
    for (Small *s : v) delete s;  // sized delete
    Small *a = new Small[333];
    escape(a);
    EXPECT_INT_EQ(a[332].id, 7);
    delete[] a;
  }
  CHECK("new/delete expressions of an over-aligned class (aligned forms)") {
    std::vector<Wide *> v;
    for (int i = 0; i < 1000; i++) {
      Wide *w = new Wide;
      EXPECT_ALIGNED(w, 128);
      std::memset(w->bytes, i & 0xff, sizeof w->bytes);
      v.push_back(w);
    }
    for (size_t i = 0; i < v.size(); i++) EXPECT_U_EQ(v[i]->bytes[199], i & 0xff);
    for (Wide *w : v) delete w;
    Wide *a = new Wide[50];
    EXPECT_ALIGNED(a, 128);
    escape(a);
    delete[] a;
    Wide *b = new (std::nothrow) Wide[3];
    EXPECT_ALIGNED(b, 128);
    escape(b);
    delete[] b;
  }
  CHECK("new of size 0 gives distinct pointers") {
    void *p = ::operator new(0), *q = ::operator new(0), *r = ::operator new[](0, al(256));
    EXPECT(p != nullptr && q != nullptr && p != q);
    EXPECT_ALIGNED(r, 256);
    ::operator delete(p, size_t{0});
    ::operator delete(q);
    ::operator delete[](r, al(256));
  }
  CHECK("aligned new of size 0, every alignment: blocks of their own") {
    void *live = ::operator new(256);
    std::memset(live, 0x3c, 256);
    for (size_t a : aligns) {
      void *p = ::operator new(0, al(a)), *q = ::operator new[](0, al(a), std::nothrow);
      escape(p);
      escape(q);
      EXPECT(p != nullptr && q != nullptr && p != q && p != live && q != live);
      EXPECT_ALIGNED(p, a);
      EXPECT_U_GE(pool.usable(p), 1);
      EXPECT_U_GE(pool.usable(q), 1);
      ::operator delete(p, al(a));
      ::operator delete[](q, size_t{0}, al(a));
    }
    // Freeing them must not have touched the live block or its neighbours.
    EXPECT_U_EQ(kp_byte_mismatch(live, 256, 0x3c), 256);
    std::vector<void *> fresh;
    for (int i = 0; i < 5000; i++) {
      fresh.push_back(::operator new(256));
      std::memset(fresh.back(), 0x77, 256);
    }
    EXPECT_U_EQ(kp_byte_mismatch(live, 256, 0x3c), 256);
    for (void *f : fresh) ::operator delete(f, 256);
    ::operator delete(live, 256);
  }
  CHECK("delete of nullptr, every form") {
    for (const DeleteForm &df : delete_forms) df.call(nullptr, 16, 64);
    EXPECT(true);
  }
}

// Sized delete ignores the size: freeing with a wrong one must leave every
// other block alone and the next allocations unharmed.
void check_wrong_sizes() {
  CHECK("sized delete with a wrong size corrupts nothing") {
    const size_t n = 96;
    std::vector<void *> live;
    for (int i = 0; i < 2000; i++) {
      void *p = ::operator new(n);
      kp_fill_pat(p, n, static_cast<unsigned>(i));
      live.push_back(p);
    }
    const size_t wrong[] = {0, 1, 8, 4096, 64 * MiB, SIZE_MAX};
    for (size_t i = 0; i < live.size(); i += 2) {
      size_t w = wrong[(i / 2) % (sizeof wrong / sizeof wrong[0])];
      if (i % 4 == 0) ::operator delete(live[i], w);
      else ::operator delete[](live[i], w, al(64));
      live[i] = nullptr;
    }
    std::set<uintptr_t> held;
    for (size_t i = 1; i < live.size(); i += 2) {
      EXPECTF(kp_pat_mismatch(live[i], n, static_cast<unsigned>(i)) == n, "block %zu changed", i);
      held.insert(reinterpret_cast<uintptr_t>(live[i]));
    }
    for (int i = 0; i < 3000; i++) {
      void *p = ::operator new(n);
      uintptr_t u = reinterpret_cast<uintptr_t>(p);
      auto next = held.lower_bound(u);
      bool clear = (next == held.end() || *next >= u + n) && (next == held.begin() || *std::prev(next) + n <= u);
      if (!EXPECTF(clear, "new(%zu) = %p overlaps a live block", n, p)) break;
      held.insert(u);
      live.push_back(p);
    }
    for (void *p : live)
      if (p) ::operator delete(p);
  }
}

// Another thread frees what this one allocated, through delete.
void check_cross_thread() {
  CHECK("blocks from new freed by another thread's sized delete") {
    std::vector<Small *> v;
    size_t before = pool.reserved();
    for (int round = 0; round < 50; round++) {
      for (int i = 0; i < 20000; i++) v.push_back(new Small);
      pthread_t t;
      auto body = [](void *arg) -> void * {
        auto *vec = static_cast<std::vector<Small *> *>(arg);
        for (Small *s : *vec) delete s;
        vec->clear();
        return nullptr;
      };
      if (!EXPECT_INT_EQ(pthread_create(&t, nullptr, body, &v), 0)) break;
      pthread_join(t, nullptr);
    }
    pool.trim();
    EXPECT_U_LE(pool.reserved(), before + 32 * MiB);
  }
}

}  // namespace

int main() {
  pool = pool_api();
  CHECK("the pool's API is reachable") { EXPECT(pool.usable != nullptr && pool.reserved != nullptr); }
  if (pool.usable == nullptr || pool.reserved == nullptr) return kp_check_summary();
  check_symbols();
  check_pool_shape();
  check_new_forms();
  check_delete_forms();
  check_expressions();
  check_wrong_sizes();
  check_cross_thread();
  return kp_check_summary();
}
