// Out of memory in the library's operator new, as the standard describes
// it: while an attempt fails and a std::new_handler is installed, the
// handler is called and the allocation tried again; with none installed
// (or once it uninstalls itself) the throwing forms throw std::bad_alloc
// and the nothrow forms return nullptr; a handler that throws bad_alloc
// ends a throwing new with that exception and a nothrow one with nullptr.
// Memory runs out three ways: sizes no allocator can serve, RLIMIT_AS, and
// kame_pool_set_max_bytes (the pool's ceiling) with RLIMIT_AS behind it.
// Built only with the override.
#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

#include "check.h"
#include "kame_pool.h"

namespace {

constexpr size_t MiB = size_t{1} << 20;

void escape(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

std::align_val_t al(size_t a) { return static_cast<std::align_val_t>(a); }

// ---- The forms, with a uniform signature ----------------------------------

struct Form {
  const char *name;
  bool nothrow;
  size_t align;  // 0: not an aligned form
  void *(*call)(size_t size);
  void (*release)(void *p);
};

const Form forms[] = {
    {"new", false, 0, [](size_t n) { return ::operator new(n); }, [](void *p) { ::operator delete(p); }},
    {"new[]", false, 0, [](size_t n) { return ::operator new[](n); }, [](void *p) { ::operator delete[](p); }},
    {"new align 64", false, 64, [](size_t n) { return ::operator new(n, al(64)); },
     [](void *p) { ::operator delete(p, al(64)); }},
    {"new[] align 4096", false, 4096, [](size_t n) { return ::operator new[](n, al(4096)); },
     [](void *p) { ::operator delete[](p, al(4096)); }},
    {"new nothrow", true, 0, [](size_t n) { return ::operator new(n, std::nothrow); },
     [](void *p) { ::operator delete(p, std::nothrow); }},
    {"new[] nothrow", true, 0, [](size_t n) { return ::operator new[](n, std::nothrow); },
     [](void *p) { ::operator delete[](p, std::nothrow); }},
    {"new align 64 nothrow", true, 64, [](size_t n) { return ::operator new(n, al(64), std::nothrow); },
     [](void *p) { ::operator delete(p, al(64), std::nothrow); }},
    {"new[] align 4096 nothrow", true, 4096,
     [](size_t n) { return ::operator new[](n, al(4096), std::nothrow); },
     [](void *p) { ::operator delete[](p, al(4096), std::nothrow); }},
};

// What one call did: the block, or that it threw bad_alloc.
struct Outcome {
  void *p = nullptr;
  bool threw = false;
};

Outcome attempt(const Form &f, size_t n) {
  Outcome o;
  try {
    o.p = f.call(n);
    escape(o.p);
  } catch (const std::bad_alloc &) {
    o.threw = true;
  }
  return o;
}

// ---- Handlers ---------------------------------------------------------------

int g_calls;
void *g_reserve;
void (*g_release_reserve)(void *);

void handler_uninstalls() {
  g_calls++;
  std::set_new_handler(nullptr);
}

void handler_three_times() {
  if (++g_calls == 3) std::set_new_handler(nullptr);
}

void handler_throws() {
  g_calls++;
  throw std::bad_alloc();
}

// Frees the reserve on its first call; a second call means freeing it did
// not help, and ends the loop.  (Unused under an emulator, where RLIMIT_AS
// is not tested.)
[[maybe_unused]] void handler_frees_reserve() {
  g_calls++;
  if (g_reserve != nullptr) {
    g_release_reserve(g_reserve);
    g_reserve = nullptr;
    return;
  }
  std::set_new_handler(nullptr);
}

void handler_counts() { g_calls++; }

// ---- Address-space limit ------------------------------------------------------

size_t vm_size() {
  FILE *f = std::fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long kib = 0;
  if (f == nullptr) return 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmSize: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return static_cast<size_t>(kib) * 1024;
}

// Sets RLIMIT_AS to the present address space plus ROOM; the destructor
// restores the limit.
class AddressLimit {
 public:
  explicit AddressLimit(size_t room) {
    ok_ = getrlimit(RLIMIT_AS, &saved_) == 0;
    size_t vm = vm_size();
    if (!ok_ || vm == 0) {
      ok_ = false;
      return;
    }
    struct rlimit lim = saved_;
    lim.rlim_cur = vm + room;
    if (saved_.rlim_max != RLIM_INFINITY && lim.rlim_cur > saved_.rlim_max) lim.rlim_cur = saved_.rlim_max;
    ok_ = setrlimit(RLIMIT_AS, &lim) == 0;
  }
  ~AddressLimit() {
    if (ok_) setrlimit(RLIMIT_AS, &saved_);
  }
  bool ok() const { return ok_; }

 private:
  struct rlimit saved_ {};
  bool ok_ = false;
};

void expect_failed(const Form &f, const Outcome &o) {
  if (f.nothrow) {
    EXPECTF(!o.threw && o.p == nullptr, "%s returned %p%s instead of nullptr", f.name, o.p,
            o.threw ? " (threw)" : "");
  } else {
    EXPECTF(o.threw, "%s returned %p instead of throwing std::bad_alloc", f.name, o.p);
  }
  if (o.p) f.release(o.p);
}

// Sizes no allocator can serve: past PTRDIFF_MAX, and SIZE_MAX itself.
const size_t impossible[] = {SIZE_MAX, SIZE_MAX / 2 + 1};

void check_impossible_sizes() {
  for (const Form &f : forms) {
    for (size_t n : impossible) {
      CHECK("%s(%#zx), no handler: %s", f.name, n, f.nothrow ? "nullptr" : "bad_alloc") {
        std::set_new_handler(nullptr);
        expect_failed(f, attempt(f, n));
      }
      CHECK("%s(%#zx), a handler that uninstalls itself: called once", f.name, n) {
        g_calls = 0;
        std::set_new_handler(handler_uninstalls);
        expect_failed(f, attempt(f, n));
        EXPECT_INT_EQ(g_calls, 1);
        EXPECT(std::get_new_handler() == nullptr);
      }
      CHECK("%s(%#zx), a handler that gives up on its third call: called three times", f.name, n) {
        g_calls = 0;
        std::set_new_handler(handler_three_times);
        expect_failed(f, attempt(f, n));
        EXPECT_INT_EQ(g_calls, 3);
        std::set_new_handler(nullptr);
      }
      CHECK("%s(%#zx), a handler that throws bad_alloc: %s", f.name, n,
            f.nothrow ? "nullptr" : "the exception") {
        g_calls = 0;
        std::set_new_handler(handler_throws);
        expect_failed(f, attempt(f, n));
        EXPECT_INT_EQ(g_calls, 1);
        std::set_new_handler(nullptr);
      }
    }
  }
  CHECK("new T[n] with n too large: std::bad_array_new_length, no handler call") {
    g_calls = 0;
    std::set_new_handler(handler_counts);
    volatile size_t n = SIZE_MAX / 4;
    bool caught = false;
    try {
      int *p = new int[n];
      escape(p);
      delete[] p;
    } catch (const std::bad_array_new_length &) {
      caught = true;
    }
    EXPECT(caught);
    EXPECT_INT_EQ(g_calls, 0);
    std::set_new_handler(nullptr);
  }
}

#ifndef KP_TEST_EMULATED
// RLIMIT_AS: a 128 MiB reserve is held, the address space may grow by 32
// MiB only, and 96 MiB are asked for.  Freeing the reserve makes room.
constexpr size_t RESERVE = 128 * MiB, ROOM = 32 * MiB, ASK = 96 * MiB;

void check_address_limit() {
  for (const Form &f : forms) {
    CHECK("%s under RLIMIT_AS, a handler that frees a reserve: succeeds after one call", f.name) {
      g_reserve = ::operator new(RESERVE);
      g_release_reserve = [](void *p) { ::operator delete(p); };
      g_calls = 0;
      Outcome o;
      {
        AddressLimit limit(ROOM);
        if (!EXPECTF(limit.ok(), "setrlimit(RLIMIT_AS) failed")) continue;
        std::set_new_handler(handler_frees_reserve);
        o = attempt(f, ASK);
        std::set_new_handler(nullptr);
      }
      EXPECT_INT_EQ(g_calls, 1);
      EXPECT(!o.threw);
      if (EXPECT_NOT_NULL(o.p)) {
        if (f.align) EXPECT_ALIGNED(o.p, f.align);
        EXPECT_U_GE(kame_pool_malloc_usable_size(o.p), ASK);
        std::memset(o.p, 0x5a, MiB);
        std::memset(static_cast<char *>(o.p) + ASK - MiB, 0xa5, MiB);
        EXPECT_U_EQ(static_cast<unsigned char *>(o.p)[ASK - 1], 0xa5);
        f.release(o.p);
      }
      if (g_reserve) ::operator delete(g_reserve);
      g_reserve = nullptr;
    }
    CHECK("%s under RLIMIT_AS, no handler: %s", f.name, f.nothrow ? "nullptr" : "bad_alloc") {
      AddressLimit limit(ROOM);
      if (!EXPECTF(limit.ok(), "setrlimit(RLIMIT_AS) failed")) continue;
      std::set_new_handler(nullptr);
      expect_failed(f, attempt(f, ASK));
    }
  }
}
#endif

// The pool's ceiling: past it the pool hands requests to the system
// allocator, so operator new still succeeds and no handler runs; with the
// system allocator held back by RLIMIT_AS as well, the handler runs, and
// what it frees brings the pool back under its ceiling.
void check_ceiling() {
  // The reserve must go back to the OS when freed, not stay in the
  // recycle cache: keep blocks of its size out of the cache.
  size_t top = kame_pool_get_large_cache_top();
  kame_pool_set_large_cache_top(32 * MiB);
  for (const Form &f : forms) {
    CHECK("%s past kame_pool_set_max_bytes: served by the system allocator, no handler call", f.name) {
      g_calls = 0;
      std::set_new_handler(handler_counts);
      size_t before = kame_pool_reserved_bytes();
      kame_pool_set_max_bytes(before + MiB);
      void *p = f.call(8 * MiB);
      escape(p);
      size_t after = kame_pool_reserved_bytes();
      kame_pool_set_max_bytes(0);
      std::set_new_handler(nullptr);
      EXPECT_INT_EQ(g_calls, 0);
      EXPECT_U_LE(after, before);
      if (EXPECT_NOT_NULL(p)) {
        if (f.align) EXPECT_ALIGNED(p, f.align);
        std::memset(p, 1, 8 * MiB);
        f.release(p);
      }
    }
#ifndef KP_TEST_EMULATED
    CHECK("%s past the ceiling and under RLIMIT_AS: a handler that frees a reserve", f.name) {
      const size_t reserve = 64 * MiB, ask = 64 * MiB;
      g_reserve = ::operator new(reserve);
      g_release_reserve = [](void *p) { ::operator delete(p); };
      g_calls = 0;
      size_t held = kame_pool_reserved_bytes();
      kame_pool_set_max_bytes(held + 32 * MiB);  // room for the request only once the reserve is gone
      Outcome o;
      size_t served_from = 0;
      {
        AddressLimit limit(48 * MiB);  // the system allocator cannot map 64 MiB either
        if (!EXPECTF(limit.ok(), "setrlimit(RLIMIT_AS) failed")) {
          kame_pool_set_max_bytes(0);
          continue;
        }
        std::set_new_handler(handler_frees_reserve);
        o = attempt(f, ask);
        std::set_new_handler(nullptr);
        served_from = kame_pool_reserved_bytes();
      }
      kame_pool_set_max_bytes(0);
      EXPECT_INT_EQ(g_calls, 1);
      EXPECT(!o.threw);
      if (EXPECT_NOT_NULL(o.p)) {
        // The reserve's bytes went back and the block's came from the pool.
        EXPECTF(served_from >= held, "the pool maps %zu bytes, less than the %zu it held with the reserve",
                served_from, held);
        EXPECT_U_EQ(kame_pool_malloc_usable_size(o.p), ask);
        std::memset(o.p, 0x11, ask);
        f.release(o.p);
      }
      if (g_reserve) ::operator delete(g_reserve);
      g_reserve = nullptr;
    }
#endif
  }
  kame_pool_set_large_cache_top(top);
}

}  // namespace

int main() {
  check_impossible_sizes();
  // qemu-user does not apply RLIMIT_AS to the program it runs (its own
  // mappings would not fit): under an emulator the limit is not tested.
#ifndef KP_TEST_EMULATED
  check_address_limit();
#endif
  check_ceiling();
  return kp_check_summary();
}
