// operator new and operator delete, every replaceable form of C++17 and
// C++20, served by the pool directly (cxx_bridge.h), with the standard's
// out-of-memory behaviour: the new-handler loop, then std::bad_alloc, or
// nullptr for the nothrow forms.  Built only with the malloc override,
// since like malloc it replaces the program's global allocation.
//
// Every definition is weak, so a program that links the static library
// and defines some forms itself keeps its own without a duplicate-symbol
// error.  The standard defines most forms in terms of a few others (new[]
// calls new, sized delete calls unsized delete, ...); when a program
// replaces one of those, ours forward to it as the standard's defaults do,
// and otherwise go straight to the pool.  docs/design.md has the reasons.
#include <atomic>
#include <cstddef>
#include <new>

#include <dlfcn.h>
#include <link.h>

#include "cxx_bridge.h"

// In the shared library the C++ runtime is bound weakly, so the library
// needs no libstdc++ of its own: a C program preloaded with the pool does
// not load it (about 1 MiB resident), and a C++ program brings it anyway,
// which binds these names at load.  The operators reach the runtime only
// on their out-of-memory path; when it was not loaded with the program (a
// C program that later opens a C++ library), that path finds it by name
// then (runtime_by_name below).  The static library binds it strongly.
#ifdef KP_CXX_WEAK_RUNTIME
__asm__(".weak _ZSt15get_new_handlerv\n"
        ".weak _ZNSt9bad_allocD1Ev\n"
        ".weak _ZTISt9bad_alloc\n"
        ".weak _ZTVSt9bad_alloc\n"
        ".weak __cxa_allocate_exception\n"
        ".weak __cxa_throw\n"
        ".weak __cxa_begin_catch\n"
        ".weak __cxa_end_catch\n"
        ".weak __gxx_personality_v0\n");
#endif

#define KP_LIKELY(x) __builtin_expect(!!(x), 1)
#define KP_NEW_FORM(target) __attribute__((weak, alias(target), visibility("default")))
#define KP_NEW_EXPORT __attribute__((weak, visibility("default")))

namespace {

using std::align_val_t;
using std::nothrow_t;
using std::size_t;

size_t align_of(align_val_t al) { return static_cast<size_t>(al); }

// The runtime's pieces the out-of-memory path needs, looked up by name
// when the weak binding found no runtime at load.  Only a C++ library
// opened later can call an operator then, so the runtime is loaded by the
// time this runs.
struct cxx_runtime {
  std::new_handler (*get_new_handler)();
  void *(*allocate_exception)(size_t);
  void (*throw_exception)(void *, void *, void (*)(void *));
  void *bad_alloc_type;
  void **bad_alloc_vtable;
  void (*bad_alloc_destructor)(void *);
};

}  // namespace

#ifdef KP_CXX_WEAK_RUNTIME
// std::get_new_handler under a name the compiler knows may be missing, for
// the test of whether the runtime was bound at load.
extern "C" std::new_handler kp_weak_get_new_handler() __asm__("_ZSt15get_new_handlerv") __attribute__((weak));
#endif

namespace {

#ifdef KP_CXX_WEAK_RUNTIME
bool runtime_bound() { return &kp_weak_get_new_handler != nullptr; }
#else
constexpr bool runtime_bound() { return true; }
#endif

// The runtime may have come with a library opened RTLD_LOCAL, out of the
// global scope's reach: then each loaded object is asked in turn.
struct symbol_search {
  const char *name;
  void *found;
};

int search_object(struct dl_phdr_info *info, size_t, void *arg) {
  auto *search = static_cast<symbol_search *>(arg);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return 0;
  search->found = dlsym(handle, search->name);
  dlclose(handle);
  return search->found != nullptr;
}

void *find_symbol(const char *name) {
  if (void *p = dlsym(RTLD_DEFAULT, name)) return p;
  symbol_search search{name, nullptr};
  dl_iterate_phdr(search_object, &search);
  return search.found;
}

// Looked up each time: this is the out-of-memory path of a process that
// loaded its C++ runtime late, not worth a cache.
cxx_runtime runtime_by_name() {
  return cxx_runtime{
      reinterpret_cast<std::new_handler (*)()>(find_symbol("_ZSt15get_new_handlerv")),
      reinterpret_cast<void *(*)(size_t)>(find_symbol("__cxa_allocate_exception")),
      reinterpret_cast<void (*)(void *, void *, void (*)(void *))>(find_symbol("__cxa_throw")),
      find_symbol("_ZTISt9bad_alloc"),
      static_cast<void **>(find_symbol("_ZTVSt9bad_alloc")),
      reinterpret_cast<void (*)(void *)>(find_symbol("_ZNSt9bad_allocD1Ev")),
  };
}

std::new_handler current_handler() {
  if (runtime_bound()) return std::get_new_handler();
  cxx_runtime rt = runtime_by_name();
  return rt.get_new_handler != nullptr ? rt.get_new_handler() : nullptr;
}

// throw std::bad_alloc(), by the Itanium C++ ABI's calls when the runtime
// was found by name: the object is its vtable's address point (two words
// into the vtable), the runtime's own destructor frees it.
[[noreturn]] void throw_bad_alloc() {
  if (runtime_bound()) throw std::bad_alloc();
  cxx_runtime rt = runtime_by_name();
  if (rt.allocate_exception == nullptr || rt.throw_exception == nullptr || rt.bad_alloc_type == nullptr ||
      rt.bad_alloc_vtable == nullptr)
    __builtin_trap(); // an operator new without any C++ runtime in the process
  void *e = rt.allocate_exception(sizeof(std::bad_alloc));
  *static_cast<void ***>(e) = rt.bad_alloc_vtable + 2;
  rt.throw_exception(e, rt.bad_alloc_type, rt.bad_alloc_destructor);
  __builtin_unreachable();
}

// Runs the installed new_handler until an attempt succeeds; nullptr when
// no handler is (or remains) installed.  A handler may throw.
void *handler_loop(size_t size, size_t align) {
  for (;;) {
    std::new_handler handler = current_handler();
    if (handler == nullptr) return nullptr;
    handler();
    if (void *p = kp_cxx_try_alloc(size, align)) return p;
  }
}

// The nothrow forms: the same loop, and nullptr where the throwing forms
// throw (the standard defines them as a throwing new inside a catch).
void *oom_nothrow(size_t size, size_t align) noexcept {
  try {
    return handler_loop(size, align);
  } catch (...) {
    return nullptr;
  }
}

void *new_nothrow(size_t size, size_t align) noexcept {
  if (void *p = kp_cxx_try_alloc(size, align)) return p;
  return oom_nothrow(size, align);
}

}  // namespace

extern "C" void *kp_cxx_oom(size_t size, size_t align) {
  if (void *p = handler_loop(size, align)) return p;
  throw_bad_alloc();
}

// ---- The forms the others are defined by -------------------------------
//
// Each is a weak, exported alias of a hidden function, so that the
// hidden name always means our definition while the operator's name
// means whichever definition the program ends up with.

extern "C" {
KP_CXX_HIDDEN void *kp_own_new(size_t size) { return kp_cxx_new(size); }
KP_CXX_HIDDEN void *kp_own_new_array(size_t size);
KP_CXX_HIDDEN void *kp_own_new_aligned(size_t size, align_val_t al) {
  return kp_cxx_new_aligned(size, align_of(al));
}
KP_CXX_HIDDEN void *kp_own_new_array_aligned(size_t size, align_val_t al);
KP_CXX_HIDDEN void kp_own_delete(void *p) noexcept { kp_cxx_delete(p); }
KP_CXX_HIDDEN void kp_own_delete_array(void *p) noexcept;
KP_CXX_HIDDEN void kp_own_delete_aligned(void *p, align_val_t) noexcept { kp_cxx_delete(p); }
KP_CXX_HIDDEN void kp_own_delete_array_aligned(void *p, align_val_t) noexcept;
}

void *operator new(size_t size) KP_NEW_FORM("kp_own_new");
void *operator new[](size_t size) KP_NEW_FORM("kp_own_new_array");
void *operator new(size_t size, align_val_t al) KP_NEW_FORM("kp_own_new_aligned");
void *operator new[](size_t size, align_val_t al) KP_NEW_FORM("kp_own_new_array_aligned");
void operator delete(void *p) noexcept KP_NEW_FORM("kp_own_delete");
void operator delete[](void *p) noexcept KP_NEW_FORM("kp_own_delete_array");
void operator delete(void *p, align_val_t al) noexcept KP_NEW_FORM("kp_own_delete_aligned");
void operator delete[](void *p, align_val_t al) noexcept KP_NEW_FORM("kp_own_delete_array_aligned");

namespace {

// Whether the eight forms above are all ours, looked up once: then every
// other form goes straight to the pool; if the program replaced any of
// them, each form calls the one the standard defines it by.
enum : unsigned char { MODE_UNKNOWN, MODE_DIRECT, MODE_FORWARD };
std::atomic<unsigned char> g_mode{MODE_UNKNOWN};

template <class F> bool same(F resolved, F own) { return resolved == own; }

__attribute__((noinline)) bool decide_mode() noexcept {
  using New = void *(*)(size_t);
  using NewAligned = void *(*)(size_t, align_val_t);
  using Delete = void (*)(void *) noexcept;
  using DeleteAligned = void (*)(void *, align_val_t) noexcept;
  // The operators' addresses are read through the GOT (or, in a static
  // link, resolved by the linker), so they name the definitions in force.
  bool ours = same<New>(&::operator new, &kp_own_new) &&
              same<New>(&::operator new[], &kp_own_new_array) &&
              same<NewAligned>(&::operator new, &kp_own_new_aligned) &&
              same<NewAligned>(&::operator new[], &kp_own_new_array_aligned) &&
              same<Delete>(&::operator delete, &kp_own_delete) &&
              same<Delete>(&::operator delete[], &kp_own_delete_array) &&
              same<DeleteAligned>(&::operator delete, &kp_own_delete_aligned) &&
              same<DeleteAligned>(&::operator delete[], &kp_own_delete_array_aligned);
  g_mode.store(ours ? MODE_DIRECT : MODE_FORWARD, std::memory_order_relaxed);
  return ours;
}

inline bool direct() noexcept {
  unsigned char mode = g_mode.load(std::memory_order_relaxed);
  if (KP_LIKELY(mode == MODE_DIRECT)) return true;
  return mode == MODE_UNKNOWN && decide_mode();
}

}  // namespace

extern "C" {
void *kp_own_new_array(size_t size) {
  if (KP_LIKELY(direct())) return kp_cxx_new(size);
  return ::operator new(size);
}
void *kp_own_new_array_aligned(size_t size, align_val_t al) {
  if (KP_LIKELY(direct())) return kp_cxx_new_aligned(size, align_of(al));
  return ::operator new(size, al);
}
void kp_own_delete_array(void *p) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete(p);
}
void kp_own_delete_array_aligned(void *p, align_val_t al) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete(p, al);
}
}

// ---- nothrow new ----------------------------------------------------------

KP_NEW_EXPORT void *operator new(size_t size, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return new_nothrow(size, 0);
  try {
    return ::operator new(size);
  } catch (...) {
    return nullptr;
  }
}

KP_NEW_EXPORT void *operator new[](size_t size, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return new_nothrow(size, 0);
  try {
    return ::operator new[](size);
  } catch (...) {
    return nullptr;
  }
}

KP_NEW_EXPORT void *operator new(size_t size, align_val_t al, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return new_nothrow(size, align_of(al));
  try {
    return ::operator new(size, al);
  } catch (...) {
    return nullptr;
  }
}

KP_NEW_EXPORT void *operator new[](size_t size, align_val_t al, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return new_nothrow(size, align_of(al));
  try {
    return ::operator new[](size, al);
  } catch (...) {
    return nullptr;
  }
}

// ---- The other deletes ------------------------------------------------------
//
// The size is not used: the pool finds a block's size from its address, so
// a wrong size from the program changes nothing.
//
// Compiled C++ calls the sized forms for most deletes, so they jump
// through a pointer, set at the first call: to the pool's delete if the
// eight forms are ours, else to a call of the form the standard defines
// them by.  The mode test the other forms make took three instructions
// more on every delete.

namespace {

using delete_fn = void (*)(void *) noexcept;

void sized_delete_first(void *p) noexcept;
void sized_delete_array_first(void *p) noexcept;
std::atomic<delete_fn> g_sized_delete{sized_delete_first};
std::atomic<delete_fn> g_sized_delete_array{sized_delete_array_first};

void forward_delete(void *p) noexcept { ::operator delete(p); }
void forward_delete_array(void *p) noexcept { ::operator delete[](p); }

// Every thread that comes here before the pointer is set stores the same
// value: the mode is decided once.
void sized_delete_first(void *p) noexcept {
  delete_fn to = direct() ? kp_cxx_delete : forward_delete;
  g_sized_delete.store(to, std::memory_order_relaxed);
  to(p);
}

void sized_delete_array_first(void *p) noexcept {
  delete_fn to = direct() ? kp_cxx_delete : forward_delete_array;
  g_sized_delete_array.store(to, std::memory_order_relaxed);
  to(p);
}

}  // namespace

KP_NEW_EXPORT void operator delete(void *p, size_t) noexcept {
  g_sized_delete.load(std::memory_order_relaxed)(p);
}

KP_NEW_EXPORT void operator delete[](void *p, size_t) noexcept {
  g_sized_delete_array.load(std::memory_order_relaxed)(p);
}

KP_NEW_EXPORT void operator delete(void *p, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete(p);
}

KP_NEW_EXPORT void operator delete[](void *p, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete[](p);
}

KP_NEW_EXPORT void operator delete(void *p, size_t, align_val_t al) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete(p, al);
}

KP_NEW_EXPORT void operator delete[](void *p, size_t, align_val_t al) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete[](p, al);
}

KP_NEW_EXPORT void operator delete(void *p, align_val_t al, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete(p, al);
}

KP_NEW_EXPORT void operator delete[](void *p, align_val_t al, const nothrow_t &) noexcept {
  if (KP_LIKELY(direct())) return kp_cxx_delete(p);
  ::operator delete[](p, al);
}
