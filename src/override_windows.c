/* The malloc family of a Windows process, routed to the pool.
 *
 * A PE module calls the C runtime's malloc through its import address
 * table (IAT): one pointer per imported function, written by the loader.
 * Rewriting those pointers in every module bound to a runtime DLL sends
 * its calls here, without touching the runtime's code.  The runtime keeps
 * calling its own allocator internally (strdup, stdio buffers, argv), so
 * blocks it made reach a rewritten free or realloc: each runtime gets its
 * own set of entry points (a slot), and a pointer the pool does not know
 * goes back to the functions of the runtime the caller was bound to.
 *
 * Left alone: the pool's own module (its fallback to the system allocator
 * calls the runtime through its IAT), the modules that serve the pool's
 * emulated TLS (MinGW: libgcc's DLL, whose __emutls_get_address every
 * access to the thread's heap goes through, or winpthreads' keys when the
 * emulation is linked in) with everything they depend on (winpthreads):
 * they allocate on a thread's first access, and redirected
 * those calls would come back here before the thread has a heap; the
 * runtime DLLs themselves, and every module under the Windows
 * directory (the system's DLLs pair their own runtime calls and do not
 * depend on this process's allocator).
 *
 * Modules loaded later are rewritten from the loader's DLL notification,
 * which Windows sends after a module's imports are bound and before its
 * DllMain runs; kame_pool_redirect walks every module again on demand.
 * Only documented Win32 calls and the PE format's own structures are used;
 * the notification is ntdll's, looked up by name. */
#include "internal.h"

#include <string.h>
#include <windows.h>
/* EnumProcessModules from kernel32 (K32*), without psapi.dll. */
#ifndef PSAPI_VERSION
#define PSAPI_VERSION 2
#endif
#include <psapi.h>

/* sys_alloc_windows.c: a block of the pool's own pages (the fallback's
 * aligned blocks), which kp_free takes back although the map says foreign. */
KP_HIDDEN bool kp_sys_own_pages(const void *p);

enum {
  F_MALLOC,
  F_CALLOC,
  F_REALLOC,
  F_FREE,
  F_MSIZE,
  F_EXPAND,
  F_RECALLOC,
  F_ALIGNED_MALLOC,
  F_ALIGNED_REALLOC,
  F_ALIGNED_FREE,
  F_ALIGNED_MSIZE,
  F_COUNT
};

static const char *const fn_names[F_COUNT] = {
    "malloc",          "calloc",           "realloc",       "free",          "_msize",    "_expand", "_recalloc",
    "_aligned_malloc", "_aligned_realloc", "_aligned_free", "_aligned_msize"};

/* A runtime DLL seen bound in some module, and its own functions. */
#define KP_CRT_SLOTS 4
typedef struct kp_crt {
  HMODULE module;
  void *orig[F_COUNT];
} kp_crt;
static kp_crt crts[KP_CRT_SLOTS];
static volatile LONG crt_count;
static SRWLOCK crt_lock = SRWLOCK_INIT;
/* Around each page-protection change and its write: two walkers racing on
 * one page would otherwise restore its protection under each other. */
static SRWLOCK write_lock = SRWLOCK_INIT;

static HMODULE self_module;
/* The modules serving the pool's TLS, outside the Windows directory. */
#define KP_DEPS_MAX 16
static HMODULE deps[KP_DEPS_MAX];
static unsigned deps_count;
static WCHAR windows_dir[MAX_PATH];
static unsigned windows_dir_len;

/* ---- The entry points --------------------------------------------------- */

/* Whether p belongs to the runtime rather than to the pool. */
static bool crt_block(const void *p) {
  if (kp_is_region(p)) return false;
  kp_ptr_info info;
  kp_lookup(p, &info);
  return info.kind == KP_PTR_FOREIGN && !kp_sys_own_pages(p);
}

typedef void (*free_fn)(void *);
typedef void *(*realloc_fn)(void *, size_t);
typedef size_t (*msize_fn)(void *);
typedef void *(*recalloc_fn)(void *, size_t, size_t);
typedef void *(*aligned_realloc_fn)(void *, size_t, size_t);
typedef size_t (*aligned_msize_fn)(void *, size_t, size_t);

static void *pool_malloc(size_t size) { return kp_malloc_inline(size); }
static void *pool_calloc(size_t count, size_t size) { return kp_calloc(count, size); }

static void *pool_aligned_malloc(size_t size, size_t align) {
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  return kp_memalign(align, size);
}

static void crt_free(unsigned slot, void *p) {
  if (p == NULL) return;
  if (kp_is_region(p)) kp_free_inline(p);
  else if (crt_block(p)) ((free_fn)crts[slot].orig[F_FREE])(p);
  else kp_free(p);
}

/* A runtime block grown or shrunk moves to the pool: the runtime's heap
 * empties as the program goes on. */
static void *crt_realloc(unsigned slot, void *p, size_t size) {
  if (p == NULL || !crt_block(p)) return kp_realloc(p, size);
  if (size == 0) return ((realloc_fn)crts[slot].orig[F_REALLOC])(p, 0);
  void *q = kp_malloc(size);
  if (q == NULL) return NULL;
  size_t old = ((msize_fn)crts[slot].orig[F_MSIZE])(p);
  memcpy(q, p, old < size ? old : size);
  ((free_fn)crts[slot].orig[F_FREE])(p);
  return q;
}

static size_t crt_msize(unsigned slot, void *p) {
  if (p != NULL && crt_block(p)) return ((msize_fn)crts[slot].orig[F_MSIZE])(p);
  return kp_usable_size(p);
}

/* Grows in place or not at all: a pool block already has all the room
 * its slot gives. */
static void *crt_expand(unsigned slot, void *p, size_t size) {
  if (p != NULL && crt_block(p)) return ((realloc_fn)crts[slot].orig[F_EXPAND])(p, size);
  if (p == NULL || kp_usable_size(p) < size) {
    errno = ENOMEM;
    return NULL;
  }
  return p;
}

/* The bytes past the old block's usable size read zero, as the runtime's
 * _recalloc does past its _msize. */
static void *crt_recalloc(unsigned slot, void *p, size_t count, size_t size) {
  if (p != NULL && crt_block(p)) return ((recalloc_fn)crts[slot].orig[F_RECALLOC])(p, count, size);
  if (size != 0 && count > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  size_t bytes = count * size;
  if (p == NULL) return kp_calloc(1, bytes);
  size_t old = kp_usable_size(p);
  void *q = kp_realloc(p, bytes);
  if (q != NULL && bytes > old) memset((char *)q + old, 0, bytes - old);
  return q;
}

static void *crt_aligned_realloc(unsigned slot, void *p, size_t size, size_t align) {
  if (p != NULL && crt_block(p))
    return ((aligned_realloc_fn)crts[slot].orig[F_ALIGNED_REALLOC])(p, size, align);
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  if (p == NULL) return kp_memalign(align, size);
  if (size == 0) {
    kp_free(p);
    return NULL;
  }
  size_t old = kp_usable_size(p);
  if (size <= old && ((uintptr_t)p & (align - 1)) == 0) return p;
  void *q = kp_memalign(align, size);
  if (q == NULL) return NULL;
  memcpy(q, p, old < size ? old : size);
  kp_free(p);
  return q;
}

static void crt_aligned_free(unsigned slot, void *p) {
  if (p == NULL) return;
  if (crt_block(p)) ((free_fn)crts[slot].orig[F_ALIGNED_FREE])(p);
  else kp_free(p);
}

static size_t crt_aligned_msize(unsigned slot, void *p, size_t align, size_t offset) {
  if (p != NULL && crt_block(p)) return ((aligned_msize_fn)crts[slot].orig[F_ALIGNED_MSIZE])(p, align, offset);
  return kp_usable_size(p);
}

/* One set of entry points per slot: the slot says whose functions a
 * foreign pointer goes to. */
#define KP_CRT_SLOT(n)                                                                                      \
  static void free_##n(void *p) { crt_free(n, p); }                                                       \
  static void *realloc_##n(void *p, size_t s) { return crt_realloc(n, p, s); }                            \
  static size_t msize_##n(void *p) { return crt_msize(n, p); }                                            \
  static void *expand_##n(void *p, size_t s) { return crt_expand(n, p, s); }                              \
  static void *recalloc_##n(void *p, size_t c, size_t s) { return crt_recalloc(n, p, c, s); }             \
  static void *aligned_realloc_##n(void *p, size_t s, size_t a) { return crt_aligned_realloc(n, p, s, a); } \
  static void aligned_free_##n(void *p) { crt_aligned_free(n, p); }                                       \
  static size_t aligned_msize_##n(void *p, size_t a, size_t o) { return crt_aligned_msize(n, p, a, o); }
KP_CRT_SLOT(0)
KP_CRT_SLOT(1)
KP_CRT_SLOT(2)
KP_CRT_SLOT(3)

#define KP_CRT_STUBS(n)                                                                                 \
  {                                                                                                     \
    (void *)pool_malloc, (void *)pool_calloc, (void *)realloc_##n, (void *)free_##n, (void *)msize_##n, \
        (void *)expand_##n, (void *)recalloc_##n, (void *)pool_aligned_malloc, (void *)aligned_realloc_##n, \
        (void *)aligned_free_##n, (void *)aligned_msize_##n                                             \
  }
static void *const stubs[KP_CRT_SLOTS][F_COUNT] = {KP_CRT_STUBS(0), KP_CRT_STUBS(1), KP_CRT_STUBS(2),
                                                   KP_CRT_STUBS(3)};

/* ---- Which modules ------------------------------------------------------ */

static char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

static bool starts_with(const char *s, const char *prefix) {
  for (; *prefix; s++, prefix++)
    if (ascii_lower(*s) != *prefix) return false;
  return true;
}

static bool equals(const char *s, const char *t) { return starts_with(s, t) && s[strlen(t)] == '\0'; }

/* A runtime DLL's name: msvcrt.dll, ucrtbase(d).dll, msvcrNNN(d).dll, or
 * one of the API sets that forward to the universal runtime. */
static bool crt_name(const char *name) {
  if (equals(name, "msvcrt.dll") || equals(name, "ucrtbase.dll") || equals(name, "ucrtbased.dll")) return true;
  if (starts_with(name, "api-ms-win-crt-")) return true;
  if (!starts_with(name, "msvcr")) return false;
  const char *s = name + 5;
  if (*s < '0' || *s > '9') return false;
  while (*s >= '0' && *s <= '9') s++;
  if (ascii_lower(*s) == 'd') s++;
  return equals(s, ".dll");
}

/* The module's full file name; false when it has none or it does not fit. */
static bool module_path(HMODULE m, WCHAR *path, DWORD cap) {
  DWORD n = GetModuleFileNameW(m, path, cap);
  return n != 0 && n < cap;
}

static bool is_crt_module(HMODULE m) {
  WCHAR path[MAX_PATH + 1];
  if (!module_path(m, path, MAX_PATH + 1)) return false;
  const WCHAR *base = path;
  for (const WCHAR *s = path; *s; s++)
    if (*s == L'\\' || *s == L'/') base = s + 1;
  char name[64];
  size_t i = 0;
  for (; base[i] && i < sizeof name - 1; i++) name[i] = base[i] < 128 ? (char)base[i] : '?';
  name[i] = '\0';
  return crt_name(name) && !starts_with(name, "api-ms-win-crt-");
}

static bool under_windows_dir(HMODULE m) {
  WCHAR path[MAX_PATH + 1];
  if (windows_dir_len == 0 || !module_path(m, path, MAX_PATH + 1)) return false;
  if (wcslen(path) <= windows_dir_len) return false;
  return CompareStringOrdinal(path, (int)windows_dir_len, windows_dir, (int)windows_dir_len, TRUE) == CSTR_EQUAL &&
         (path[windows_dir_len] == L'\\' || path[windows_dir_len] == L'/');
}

/* The slot of the runtime module m, made on first sight; -1 when m is no
 * runtime or every slot is taken. */
static int crt_slot(HMODULE m) {
  LONG n = crt_count;
  MemoryBarrier();
  for (LONG i = 0; i < n; i++)
    if (crts[i].module == m) return (int)i;
  if (!is_crt_module(m)) return -1;
  kp_crt fresh = {.module = m};
  for (unsigned f = 0; f < F_COUNT; f++) fresh.orig[f] = (void *)GetProcAddress(m, fn_names[f]);
  /* free, realloc and _msize are what every foreign pointer needs. */
  if (!fresh.orig[F_FREE] || !fresh.orig[F_REALLOC] || !fresh.orig[F_MSIZE]) return -1;
  int slot = -1;
  AcquireSRWLockExclusive(&crt_lock);
  for (LONG i = 0; i < crt_count; i++)
    if (crts[i].module == m) slot = (int)i;
  if (slot < 0 && crt_count < KP_CRT_SLOTS) {
    slot = (int)crt_count;
    crts[slot] = fresh;
    MemoryBarrier();
    crt_count = slot + 1;
  }
  ReleaseSRWLockExclusive(&crt_lock);
  return slot;
}

static void write_entry(void **entry, void *value) {
  DWORD old;
  AcquireSRWLockExclusive(&write_lock);
  if (VirtualProtect(entry, sizeof *entry, PAGE_READWRITE, &old)) {
    InterlockedExchangePointer(entry, value);
    VirtualProtect(entry, sizeof *entry, old, &old);
  }
  ReleaseSRWLockExclusive(&write_lock);
}

/* The module's import directory, or NULL. */
static const IMAGE_IMPORT_DESCRIPTOR *imports_of(HMODULE m) {
  const BYTE *base = (const BYTE *)m;
  const IMAGE_DOS_HEADER *dos = (const IMAGE_DOS_HEADER *)base;
  if (dos->e_magic != IMAGE_DOS_SIGNATURE) return NULL;
  const IMAGE_NT_HEADERS *nt = (const IMAGE_NT_HEADERS *)(base + dos->e_lfanew);
  if (nt->Signature != IMAGE_NT_SIGNATURE || nt->OptionalHeader.Magic != IMAGE_NT_OPTIONAL_HDR_MAGIC) return NULL;
  if (nt->OptionalHeader.NumberOfRvaAndSizes <= IMAGE_DIRECTORY_ENTRY_IMPORT) return NULL;
  const IMAGE_DATA_DIRECTORY *dir = &nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_IMPORT];
  if (dir->VirtualAddress == 0 || dir->Size == 0) return NULL;
  return (const IMAGE_IMPORT_DESCRIPTOR *)(base + dir->VirtualAddress);
}

static bool is_dep(HMODULE m) {
  for (unsigned i = 0; i < deps_count; i++)
    if (deps[i] == m) return true;
  return false;
}

/* Adds m and the modules it imports from, and theirs, leaving out the
 * system's and the runtimes (which import no runtime's malloc). */
static void add_deps(HMODULE m) {
  if (m == NULL || m == self_module || is_dep(m) || under_windows_dir(m) || is_crt_module(m)) return;
  if (deps_count == KP_DEPS_MAX) return;
  deps[deps_count++] = m;
  for (const IMAGE_IMPORT_DESCRIPTOR *d = imports_of(m); d != NULL && d->Name != 0; d++)
    add_deps(GetModuleHandleA((const char *)m + d->Name));
}

/* Whether the descriptor of module m imports `name` by name. */
static bool imports_name(HMODULE m, const IMAGE_IMPORT_DESCRIPTOR *d, const char *name) {
  if (d->OriginalFirstThunk == 0) return false;
  for (const IMAGE_THUNK_DATA *t = (const IMAGE_THUNK_DATA *)((const BYTE *)m + d->OriginalFirstThunk);
       t->u1.AddressOfData != 0; t++) {
    if (IMAGE_SNAP_BY_ORDINAL(t->u1.Ordinal)) continue;
    const IMAGE_IMPORT_BY_NAME *by = (const IMAGE_IMPORT_BY_NAME *)((const BYTE *)m + t->u1.AddressOfData);
    if (strcmp((const char *)by->Name, name) == 0) return true;
  }
  return false;
}

/* The modules the pool's own module takes its emulated TLS from: libgcc's
 * DLL when the emulation is imported, winpthreads' keys when it is linked
 * in (a program with the static library). */
static void collect_tls_deps(void) {
  static const char *const tls_names[] = {"__emutls_get_address", "pthread_getspecific", "pthread_key_create"};
  for (const IMAGE_IMPORT_DESCRIPTOR *d = imports_of(self_module); d != NULL && d->Name != 0; d++)
    for (unsigned i = 0; i < sizeof tls_names / sizeof tls_names[0]; i++)
      if (imports_name(self_module, d, tls_names[i])) {
        add_deps(GetModuleHandleA((const char *)self_module + d->Name));
        break;
      }
}

/* Rewrites the module's imports of the malloc family from runtime DLLs.
 * Entries are matched by the address bound in them (the function of the
 * runtime that exports the name), which also covers imports by ordinal and
 * the API sets' forwarding. */
static unsigned patch_module(HMODULE m) {
  if (m == NULL || m == self_module || is_dep(m) || under_windows_dir(m)) return 0;
  const BYTE *base = (const BYTE *)m;
  unsigned patched = 0;
  for (const IMAGE_IMPORT_DESCRIPTOR *d = imports_of(m); d != NULL && d->Name != 0 && d->FirstThunk != 0; d++) {
    if (!crt_name((const char *)(base + d->Name))) continue;
    void **iat = (void **)(base + d->FirstThunk);
    for (; *iat != NULL; iat++) {
      HMODULE owner;
      if (!GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                              (LPCWSTR)*iat, &owner) ||
          owner == self_module)
        continue;
      int slot = crt_slot(owner);
      if (slot < 0) continue;
      for (unsigned f = 0; f < F_COUNT; f++) {
        if (crts[slot].orig[f] != NULL && crts[slot].orig[f] == *iat) {
          write_entry(iat, stubs[slot][f]);
          patched++;
          break;
        }
      }
    }
  }
  return patched;
}

/* ---- Modules loaded later ----------------------------------------------- */

/* ntdll's LDR_DLL_NOTIFICATION_DATA (loaded and unloaded share a layout). */
typedef struct kp_dll_notification {
  ULONG flags;
  const void *full_name;
  const void *base_name;
  void *base;
  ULONG size;
} kp_dll_notification;
#define KP_DLL_LOADED 1
typedef VOID(CALLBACK *kp_dll_notify_fn)(ULONG reason, const kp_dll_notification *data, void *context);
typedef LONG(NTAPI *kp_register_fn)(ULONG flags, kp_dll_notify_fn fn, void *context, void **cookie);

/* Called with the loader lock held: only the module's own headers, page
 * protections and the loader's reentrant queries. */
static VOID CALLBACK dll_loaded(ULONG reason, const kp_dll_notification *data, void *context) {
  (void)context;
  if (reason == KP_DLL_LOADED && data != NULL) patch_module((HMODULE)data->base);
}

static INIT_ONCE setup_once = INIT_ONCE_STATIC_INIT;

static BOOL CALLBACK setup(INIT_ONCE *once, void *param, void **ctx) {
  (void)once;
  (void)param;
  (void)ctx;
  /* Pinned: once modules call into it, the pool's code must outlive them. */
  GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                     (LPCWSTR)(void *)&kame_pool_redirect, &self_module);
  UINT n = GetSystemWindowsDirectoryW(windows_dir, MAX_PATH);
  if (n > 0 && n < MAX_PATH) {
    while (n > 0 && (windows_dir[n - 1] == L'\\' || windows_dir[n - 1] == L'/')) n--;
    windows_dir_len = n;
  }
  collect_tls_deps();
  HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
  kp_register_fn reg = ntdll ? (kp_register_fn)(void *)GetProcAddress(ntdll, "LdrRegisterDllNotification") : NULL;
  void *cookie;
  if (reg != NULL) reg(0, dll_loaded, NULL, &cookie);
  return TRUE;
}

unsigned kame_pool_redirect(void) {
  InitOnceExecuteOnce(&setup_once, setup, NULL, NULL);
  HMODULE mods[1024];
  DWORD bytes = 0;
  if (!EnumProcessModules(GetCurrentProcess(), mods, sizeof mods, &bytes)) return 0;
  DWORD count = bytes / sizeof mods[0];
  if (count > sizeof mods / sizeof mods[0]) count = sizeof mods / sizeof mods[0];
  unsigned patched = 0;
  for (DWORD i = 0; i < count; i++) patched += patch_module(mods[i]);
  return patched;
}
